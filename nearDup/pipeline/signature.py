"""Stage 2, signature: MinHash signatures of each shard's shingle sets (kernels.minhash)."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from ..config import (
    FORMAT,
    SignatureParams,
    digest,
)
from ..kernels import minhash
from ..report.printer import plural
from ..store.workdir import WorkDir
from .driver import PartitionTask, Runner, _map_partitions, _up_to_date, require


def signature_partition(task: PartitionTask[SignatureParams]) -> None:
    work = WorkDir(task.root)
    values = work.load_array(work.part("shingle", task.index, "values.npy"), "shingle")
    offsets = work.load_array(work.part("shingle", task.index, "offsets.npy"), "shingle")
    _save_signatures(work, task.index, task.key, task.params, values, offsets)


def _save_signatures(work: WorkDir, shard: int, key: str, params: SignatureParams, values, offsets) -> np.ndarray:
    sig = signatures(values, offsets, params)
    work.save_array(work.part("signature", shard, "npy"), sig)
    work.mark_part_done("signature", shard, key, suffixes=("npy",), stats={"docs": len(sig)})
    return sig


def signature_key(params: SignatureParams, shingle_key: str) -> str:
    """The key of a shard's signatures: its shingle key and the signature parameters."""
    return digest("signature", FORMAT, params, shingle_key)


def signatures(values: np.ndarray, offsets: np.ndarray, params: SignatureParams) -> np.ndarray:
    """MinHash signatures (n_docs, num_perm) of CSR shingle lists (order and repeats do not change a minimum), by
    the method and seed of params."""
    if params.method == "oph":
        return minhash.oph_signatures(values, offsets, params.num_perm, params.seed)
    a, b = minhash.draw_affine_parameters(params.num_perm, params.seed)  # drawn again: cheap and deterministic
    return minhash.affine_signatures(values, offsets, a, b)


def run(runner: Runner, params: SignatureParams) -> dict:
    work = runner.work
    upstream = require(work, "shingle", consumer="signature")
    keys = [signature_key(params, k) for k in upstream["partitions"]]
    key = digest("signature", keys, upstream["key"])  # a new catalog over the same shards: a new record
    shards = upstream["shards"]
    record = _up_to_date(work, "signature", key)
    if record is not None and all(work.part_done("signature", n, k, ("npy",)) for n, k in zip(shards, keys)):
        runner.log(f"signature: up to date ({plural(params.num_perm, params.method + ' permutation')})")
        return record
    reused, _ = _map_partitions(runner, "signature", signature_partition, shards, keys, ("npy",),
                             lambda i: PartitionTask(str(work.root), shards[i], keys[i], params),
                             sizes=upstream["docs"], unit="doc", docs=upstream["docs"], nbytes=upstream.get("bytes"))
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys,
              "shards": shards, "next_shard": upstream["next_shard"], "docs": upstream["docs"]}
    work.record_stage("signature", record)
    runner.log(f"signature: {plural(sum(upstream['docs']), 'signature')} of "
               f"{plural(params.num_perm, params.method + ' permutation')}"
               + (f"; {reused} of {plural(len(keys), 'partition')} reused" if reused else ""))
    return record
