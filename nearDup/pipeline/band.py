"""Stage 3, band: the band keys of each shard's signatures, with b and r chosen from the threshold by the S-curve
P(s) = 1 - (1 - s^r)^b (kernels.lsh; Leskovec, Rajaraman and Ullman, Mining of Massive Datasets, 3rd ed., 3.4).
"""
from __future__ import annotations

import numpy as np

from ..config import BandParams, banding_threshold, choose_bands, threshold_or_default
from ..kernels import lsh
from ..kernels.hashing import U64, combine
from ..store.manifest import BandRecord, SignatureRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .driver import Runner, ShardStage, require, run_shard_stage


def band_keys(signatures: np.ndarray, params: BandParams) -> np.ndarray:
    """The band keys (n_docs, bands) of signatures (kernels.lsh.band_keys)."""
    return lsh.band_keys(signatures, params.bands, params.rows)


DIGEST_SEED = 0x636F7079
DIGEST = "digest.npy"  # part-n.digest.npy: band_digest of the shard's keys


def band_digest(keys: np.ndarray, params: BandParams) -> np.ndarray:
    """A uint64 digest of each document's band keys, all bands (hashing.combine): documents with equal shingle
    sets have equal keys, hence equal digests, which is how copies.copy_classes finds them. Kept beside the keys,
    so that an index run reads 8 bytes a document, not its keys in every band (14 x 8)."""
    return combine((keys[:, j] for j in range(keys.shape[1])), DIGEST_SEED) if len(keys) else np.empty(0, U64)


STAGE: ShardStage[BandParams, BandRecord] = ShardStage("band", "signature", ("npy",), band_keys, BandRecord,
                                                        derived=((DIGEST, band_digest),))


def run(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None,
        chosen: BandParams | None = None, recall: float | None = None) -> BandRecord:
    """chosen: (b, r) already chosen for this run (pipeline.run chooses them once, before the fused shingle tasks);
    recall: the target P(threshold) >= recall they are chosen for (--recall)."""
    num_perm = require(runner.work, SignatureRecord, consumer="band").params.num_perm
    kept = kept_bands(runner.work, num_perm, threshold, bands, rows, recall) if chosen is None else None
    params = chosen or choose_bands(num_perm, threshold, bands, rows, kept, stored_in=str(runner.work.root),
                                    recall=recall)
    summary = describe_bands(params, num_perm)
    return run_shard_stage(runner, STAGE, params, summary, lambda record, reused: f"band: {summary}")


def kept_bands(work: WorkDir, num_perm: int, threshold: float | None, bands: int | None = None,
               rows: int | None = None, recall: float | None = None) -> BandParams | None:
    """The band parameters an index chose for this threshold (threshold_or_default), recall target and num_perm, if
    it is an index that did and no --bands/--rows are given: an index keeps the choice it made
    (config.choose_bands)."""
    if bands or rows:  # they win; and the manifest is not read for them
        return None
    manifest = work.manifest()
    if not manifest.index:
        return None
    band_record, signature_record = manifest.band, manifest.signature
    if band_record is None or signature_record is None or signature_record.params.num_perm != num_perm \
            or band_record.params.threshold != threshold_or_default(threshold) or band_record.params.recall != recall:
        return None
    return band_record.params


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={plural(params.bands, 'band')} x r={plural(params.rows, 'row')} ({num_perm - used} of "
            f"{plural(num_perm, 'permutation')} unused{why_unused(params, num_perm)}); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")


def why_unused(params: BandParams, num_perm: int) -> str:
    """Why b x r leaves permutations unused (": ..."; "" when none is): they are fewer than a band of r rows, or
    more bands of r rows would cost more false candidates than the choice's rule allows. (The signature estimate
    of each verified pair uses all of them.)"""
    b, r, t = params.bands, params.rows, params.threshold
    more = num_perm // r
    if b * r == num_perm:
        return ""
    if t is None:
        return ": --bands/--rows as given"
    if more == b:
        return f": fewer than a band of {plural(r, 'row')}"
    tb = banding_threshold(t)
    fp, _ = lsh.error_areas(tb, [b, more], [r, r])
    p = lsh.s_curve(tb, np.array([b, more]), r)
    if params.recall is not None:
        return (f": P({tb}) = {p[0]:.4f} already reaches --recall {params.recall}, and {more} bands would only raise "
                f"the false-positive area from {fp[0]:.3f} to {fp[1]:.3f}")
    return (f": {more} bands would raise P({tb}) from {p[0]:.3f} to {p[1]:.3f} but the false-positive area from "
            f"{fp[0]:.3f} to {fp[1]:.3f}, a worse {lsh.FP_WEIGHT} FP + {lsh.FN_WEIGHT} FN")
