"""nearDup: find near-duplicate documents with MinHash and LSH (Mining of Massive Datasets, ch. 3).

    import nearDup
    result = nearDup.find_duplicates(["docs/"], threshold=0.8)    # or texts=[...], ids=[...]
    result.pairs, result.groups                                    # Pair, Group (with Member) records
    idx = nearDup.Index.open("idx/"); idx.add(["docs/"]); idx.query("some text")
    nearDup.evaluate("truth.tsv", workdir="work/").scores[0].recall  # or truth="exact"

Errors are NearDupError (ParameterError, InputError, WorkDirError, ...), with the command line's messages.
"""
from __future__ import annotations

import os as _os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)

# nearDup does no linear algebra, but OpenBLAS starts a thread per core when numpy is imported, which costs
# ~0.1 CPU s per process: a tenth of a small run. Set before numpy is first imported; a user's setting wins.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")

__version__ = "0.1.0"

from .errors import InputError, NearDupError, ParameterError, WorkDirError  # noqa: E402

if TYPE_CHECKING:
    from .api import Evaluation, Group, Index, Member, Pair, Result, Score, evaluate, find_duplicates

# The API imports numpy and the pipeline, which is slow: only when first used, so `import nearDup` (and the command
# line's start-up, which imports this package first) stays cheap.
_API = ("Evaluation", "Group", "Index", "Member", "Pair", "Result", "Score", "evaluate", "find_duplicates")


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'nearDup' has no attribute {name!r}")


__all__ = ["Evaluation", "Group", "Index", "InputError", "Member", "NearDupError", "Pair", "ParameterError",
           "Result", "Score", "WorkDirError", "__version__", "evaluate", "find_duplicates"]
