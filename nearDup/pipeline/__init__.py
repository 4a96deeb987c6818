"""The pipeline: one module per stage (shingle, signature, band, candidates, verify, cluster), each with a `run`
over a Runner, and the stage driver they share (driver.py); query and compare reuse the stages' pieces."""
from . import band, candidates, cluster, compare, query, shingle, signature, verify

__all__ = ["band", "candidates", "cluster", "compare", "query", "shingle", "signature", "verify"]
