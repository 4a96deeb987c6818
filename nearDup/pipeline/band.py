"""Stage 3, band: the band keys of each shard's signatures, with b and r chosen from the threshold by the S-curve
P(s) = 1 - (1 - s^r)^b (kernels.lsh; Leskovec, Rajaraman and Ullman, Mining of Massive Datasets, 3rd ed., 3.4).
"""
from __future__ import annotations

from typing import NoReturn

import numpy as np

from ..config import (
    DEFAULT_THRESHOLD,
    BandParams,
)
from ..errors import ParameterError
from ..kernels import lsh
from ..report.printer import plural
from ..store.manifest import BandRecord, SignatureRecord
from ..store.workdir import WorkDir
from .driver import Runner, ShardStage, require, run_shard_stage


def band_keys(signatures: np.ndarray, params: BandParams) -> np.ndarray:
    """The band keys (n_docs, bands) of signatures (kernels.lsh.band_keys)."""
    return lsh.band_keys(signatures, params.bands, params.rows)


def choose_bands(num_perm: int, threshold: float | None, bands: int | None, rows: int | None,
                 work: WorkDir | None = None, stored: bool = False) -> BandParams:
    """Explicit --bands/--rows (one of them may be derived from num_perm), else (b, r) from the threshold: for an
    index (work), those it was built with for this threshold and num_perm (its parameters are fixed; choosing
    again costs ~50 ms, a twentieth of a run that adds a few documents), else lsh.optimal_bands. stored: num_perm
    is that of the signatures stored in work (the band stage), so the fix for too few is to re-run that stage."""
    t = threshold if threshold is not None else DEFAULT_THRESHOLD
    if bands and rows:
        params = BandParams(bands, rows, None)
    elif bands:
        params = BandParams(bands, num_perm // bands, None)
    elif rows:
        params = BandParams(num_perm // rows, rows, None)
    else:
        params = _index_bands(work, num_perm, t) or BandParams(*lsh.optimal_bands(min(t, 0.99), num_perm), t)
    if params.bands < 1 or params.rows < 1 or params.bands * params.rows > num_perm:
        _too_few_permutations(num_perm, bands, rows, work if stored else None)
    return params


def _too_few_permutations(num_perm: int, bands: int | None, rows: int | None, stored: WorkDir | None) -> NoReturn:
    """Say which of --bands/--rows asks for more than num_perm rows (b x r <= num_perm), and the two fixes."""
    need = (bands or 1) * (rows or 1)
    if bands and rows:
        what = f"--bands {bands} with --rows {rows}"
        lower = f"lower --bands or --rows so that bands x rows <= {num_perm}"
    elif bands:
        what, lower = f"--bands {bands} (one row each at least)", f"lower --bands to at most {num_perm}"
    else:
        what, lower = f"--rows {rows} (in one band at least)", f"lower --rows to at most {num_perm}"
    if stored is None:
        raise ParameterError(f"{what} needs {need} permutations but --num-perm is {num_perm}; raise --num-perm to "
                             f"{need} or {lower}")
    options = " ".join(f"--{name} {value}" for name, value in (("bands", bands), ("rows", rows)) if value)
    raise ParameterError(f"{what} needs {need} permutations but the stored signatures have {num_perm}; {lower}, or "
                         f"re-run the signature stage with more: `neardup -w {stored.root} signature --num-perm "
                         f"{need} band {options}`")


def _index_bands(work: WorkDir | None, num_perm: int, threshold: float) -> BandParams | None:
    """The band parameters an index chose for this threshold and num_perm, if it is an index that did."""
    manifest = work.read_manifest() if work is not None else {}
    if not manifest.get("index"):
        return None
    band_record, signature_record = (manifest["stages"].get(name) for name in ("band", "signature"))
    if band_record is None or signature_record is None or signature_record["params"]["num_perm"] != num_perm \
            or band_record["params"].get("threshold") != threshold:
        return None
    return BandParams(**band_record["params"])


STAGE: ShardStage[BandParams, BandRecord] = ShardStage("band", "signature", ("npy",), band_keys, BandRecord)


def run(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None
        ) -> BandRecord:
    num_perm = require(runner.work, SignatureRecord, consumer="band").params.num_perm
    params = choose_bands(num_perm, threshold, bands, rows, runner.work, stored=True)
    summary = describe_bands(params, num_perm)
    return run_shard_stage(runner, STAGE, params, summary, lambda record, reused: f"band: {summary}")


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={plural(params.bands, 'band')} x r={plural(params.rows, 'row')} ({num_perm - used} of "
            f"{plural(num_perm, 'permutation')} unused); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")
