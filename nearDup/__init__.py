"""nearDup: find near-duplicate documents with MinHash and LSH (Mining of Massive Datasets, ch. 3)."""
__version__ = "0.1.0"
