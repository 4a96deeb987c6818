"""Where a run's data lives: the work dir and its manifest (workdir.py), the catalog of documents (catalog.py), and
the cache of default work dirs (cache.py)."""
