"""Stage 3, band: the band keys of each shard's signatures, with b and r chosen from the threshold by the S-curve
P(s) = 1 - (1 - s^r)^b (kernels.lsh; Leskovec, Rajaraman and Ullman, Mining of Massive Datasets, 3rd ed., 3.4).
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from ..config import (
    FORMAT,
    BandParams,
    choose_bands,
    digest,
)
from ..kernels import lsh
from ..report.printer import plural
from ..store.workdir import WorkDir
from .driver import PartitionTask, Runner, _map_partitions, _up_to_date, require


def band_partition(task: PartitionTask[BandParams]) -> None:
    work = WorkDir(task.root)
    _save_band_keys(work, task.index, task.key, task.params,
                    work.load_array(work.part("signature", task.index, "npy"), "signature"))


def _save_band_keys(work: WorkDir, shard: int, key: str, params: BandParams, sig: np.ndarray) -> None:
    work.save_array(work.part("band", shard, "npy"), lsh.band_keys(sig, params.bands, params.rows))
    work.mark_part_done("band", shard, key, suffixes=("npy",), stats={"docs": len(sig)})


def band_key(params: BandParams, signature_key: str) -> str:
    """The key of a shard's band keys: its signature key and (b, r)."""
    return digest("band", FORMAT, params, signature_key)


def run(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None,
        chosen: BandParams | None = None) -> dict:
    """chosen: (b, r) already chosen for this run (pipeline.run chooses them once, before the fused shingle tasks)."""
    work = runner.work
    upstream = require(work, "signature", consumer="band")
    num_perm = upstream["params"]["num_perm"]
    params = chosen or choose_bands(num_perm, threshold, bands, rows, work, stored=True)
    keys = [band_key(params, k) for k in upstream["partitions"]]
    key = digest("band", keys, upstream["key"])
    summary = describe_bands(params, num_perm)
    shards = upstream["shards"]
    record = _up_to_date(work, "band", key)
    if record is not None and all(work.part_done("band", n, k, ("npy",)) for n, k in zip(shards, keys)):
        runner.log(f"band: up to date ({summary})")
        return record
    _map_partitions(runner, "band", band_partition, shards, keys, ("npy",),
                    lambda i: PartitionTask(str(work.root), shards[i], keys[i], params), sizes=upstream["docs"],
                    unit="doc", docs=upstream["docs"], nbytes=require(work, "shingle").get("bytes"))
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys,
              "shards": shards, "next_shard": upstream["next_shard"]}
    work.record_stage("band", record)
    runner.log(f"band: {summary}")
    return record


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={plural(params.bands, 'band')} x r={plural(params.rows, 'row')} ({num_perm - used} of "
            f"{plural(num_perm, 'permutation')} unused); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")
