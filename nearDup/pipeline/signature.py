"""Stage 2, signature: MinHash signatures of each shard's shingle sets (kernels.minhash)."""
from __future__ import annotations

import numpy as np

from ..config import (
    SignatureParams,
)
from ..kernels import minhash
from ..store.manifest import SignatureRecord
from ..wording import plural
from .driver import Runner, ShardStage, run_shard_stage


def signatures(values: np.ndarray, offsets: np.ndarray, params: SignatureParams) -> np.ndarray:
    """MinHash signatures (n_docs, num_perm) of CSR shingle lists (order and repeats do not change a minimum), by
    the method and seed of params."""
    if params.method == "oph":
        return minhash.oph_signatures(values, offsets, params.num_perm, params.seed)
    a, b = minhash.draw_affine_parameters(params.num_perm, params.seed)  # drawn again: cheap and deterministic
    return minhash.affine_signatures(values, offsets, a, b)


STAGE: ShardStage[SignatureParams, SignatureRecord] = ShardStage(
    "signature", "shingle", ("values.npy", "offsets.npy"), signatures, SignatureRecord, counts_docs=True)


def run(runner: Runner, params: SignatureParams) -> SignatureRecord:
    permutations = plural(params.num_perm, params.method + " permutation")

    def done(record: SignatureRecord, reused: int) -> str:
        return (f"signature: {plural(sum(record.shard_docs or ()), 'signature')} of {permutations}"
                + (f"; {reused} of {plural(len(record.shard_keys), 'partition')} reused" if reused else ""))

    return run_shard_stage(runner, STAGE, params, permutations, done)
