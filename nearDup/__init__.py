"""nearDup: find near-duplicate documents with MinHash and LSH (Mining of Massive Datasets, ch. 3)."""
import os as _os

# nearDup does no linear algebra, but OpenBLAS starts a thread per core when numpy is imported, which costs
# ~0.1 CPU s per process: a tenth of a small run. Set before numpy is first imported; a user's setting wins.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")

__version__ = "0.1.0"
