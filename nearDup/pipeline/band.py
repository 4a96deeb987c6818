"""Stage 3, band: the band keys of each shard's signatures, with b and r chosen from the threshold by the S-curve
P(s) = 1 - (1 - s^r)^b (kernels.lsh; Leskovec, Rajaraman and Ullman, Mining of Massive Datasets, 3rd ed., 3.4).
"""
from __future__ import annotations

import numpy as np

from ..config import BandParams, choose_bands, threshold_or_default
from ..kernels import lsh
from ..store.manifest import BandRecord, SignatureRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .driver import Runner, ShardStage, require, run_shard_stage


def band_keys(signatures: np.ndarray, params: BandParams) -> np.ndarray:
    """The band keys (n_docs, bands) of signatures (kernels.lsh.band_keys)."""
    return lsh.band_keys(signatures, params.bands, params.rows)


STAGE: ShardStage[BandParams, BandRecord] = ShardStage("band", "signature", ("npy",), band_keys, BandRecord)


def run(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None,
        chosen: BandParams | None = None) -> BandRecord:
    """chosen: (b, r) already chosen for this run (pipeline.run chooses them once, before the fused shingle tasks)."""
    num_perm = require(runner.work, SignatureRecord, consumer="band").params.num_perm
    kept = kept_bands(runner.work, num_perm, threshold, bands, rows) if chosen is None else None
    params = chosen or choose_bands(num_perm, threshold, bands, rows, kept, stored_in=str(runner.work.root))
    summary = describe_bands(params, num_perm)
    return run_shard_stage(runner, STAGE, params, summary, lambda record, reused: f"band: {summary}")


def kept_bands(work: WorkDir, num_perm: int, threshold: float | None, bands: int | None = None,
               rows: int | None = None) -> BandParams | None:
    """The band parameters an index chose for this threshold (threshold_or_default) and num_perm, if it is an
    index that did and no --bands/--rows are given: an index keeps the choice it made (config.choose_bands)."""
    if bands or rows:  # they win; and the manifest is not read for them
        return None
    manifest = work.manifest()
    if not manifest.index:
        return None
    band_record, signature_record = manifest.band, manifest.signature
    if band_record is None or signature_record is None or signature_record.params.num_perm != num_perm \
            or band_record.params.threshold != threshold_or_default(threshold):
        return None
    return band_record.params


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={plural(params.bands, 'band')} x r={plural(params.rows, 'row')} ({num_perm - used} of "
            f"{plural(num_perm, 'permutation')} unused); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")
