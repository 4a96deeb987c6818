"""The incremental index's rules: its parameters are fixed at creation, and --new-only reports only what changed
since the last reported run.
"""
from __future__ import annotations

import numpy as np

from ..config import option_flag
from ..errors import ParameterError
from ..store.manifest import ShingleRecord
from ..store.workdir import WorkDir
from .driver import require
from .shingle import load_catalog


def check_fixed_parameters(work: WorkDir, wanted: dict[str, dict]) -> None:
    """An index keeps the parameters it was built with: a run asking for other shingle, signature or band
    parameters stops (--rebuild rebuilds the index with the new ones)."""
    manifest = work.manifest()
    if not manifest.index:
        return
    for stage, params in wanted.items():
        record = manifest.stages.get(stage)
        if record is None:
            continue
        stored = record.content if isinstance(record, ShingleRecord) else record.json_field("params")
        if stage == "shingle":  # the shingle parameters sit beside the source's in one record
            params, stored = ({**p.get("params", {}), **{k: v for k, v in p.items() if k != "params"}}
                              for p in (params, stored))
        cause_first = sorted(params.items(), key=lambda kv: kv[0] not in ("threshold", "recall"))
        for name, value in cause_first:
            if stored.get(name) != value:
                raise ParameterError(
                    f"{work.root}: this index was built with {stage} {name} {stored.get(name)!r}, not {value!r}; "
                    f"run with the index's parameters, or add --rebuild to rebuild the index with the new ones")


QUERY_FIXED = {"unit": "shingle", "k": "shingle", "whitespace": "shingle", "strip_punct": "shingle",
               "num_perm": "signature", "seed": "signature", "minhash": "signature", "bands": "band", "rows": "band",
               "recall": "band"}


def check_query_parameters(work: WorkDir, given: dict) -> None:
    """A query uses the index's shingle, signature and band parameters; options given for them (a cron script
    passes one option list to run and query) must equal the index's."""
    records = work.manifest().stages
    for name, value in given.items():
        record = records.get(QUERY_FIXED[name])
        if record is None:
            continue
        stored = getattr(record.params, "method" if name == "minhash" else name)
        if stored != value:
            flag = option_flag(name)
            raise ParameterError(f"{work.root}: this index was built with {flag} {stored}, not {value}; query uses "
                                 f"the index's parameters: drop {flag} or give the index's value")


def new_documents(work: WorkDir) -> set[str]:
    """Ids of the live documents added (new, or changed in content) since the last run whose results were
    reported."""
    record = require(work, ShingleRecord)
    reported = work.manifest().reported or 0
    catalog = load_catalog(work, record)
    return {catalog.ids[n] for n in np.flatnonzero(catalog.live & (catalog["added"] > reported)).tolist()}


def mark_reported(work: WorkDir) -> None:
    """The results of the current run were reported: --new-only will not report them again."""
    manifest = work.manifest()
    if manifest.shingle is not None and manifest.reported != manifest.shingle.run:
        work.set(reported=manifest.shingle.run)
