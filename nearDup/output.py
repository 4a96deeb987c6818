"""Printing verified pairs: tsv (default), jsonl and csv. Writes to a text stream; knows nothing of click.

Ids are written back as the bytes they came from (surrogate escapes), so a non-UTF-8 file name survives a round
trip through a shell pipe; JSONL escapes them as \\udcXX, which `os.fsencode` turns back into the original bytes.
"""
from __future__ import annotations

import csv
import json

FORMATS = ("tsv", "jsonl", "csv")
PAIR_FIELDS = ("jaccard", "a", "b", "estimate", "intersection", "union")


def write_pairs(stream, pairs: list[dict], fmt: str, null: bool = False) -> None:
    """tsv: `<jaccard 4 decimals>\\t<a>\\t<b>` per line; jsonl: one object per pair; csv: header then rows."""
    end = "\0" if null else "\n"
    if fmt == "tsv":
        for p in pairs:
            stream.write(f"{p['jaccard']:.4f}\t{p['a']}\t{p['b']}{end}")
    elif fmt == "jsonl":
        for p in pairs:
            stream.write(json.dumps({k: p[k] for k in PAIR_FIELDS}) + end)
    elif fmt == "csv":
        writer = csv.writer(stream, lineterminator=end)
        writer.writerow(PAIR_FIELDS)
        for p in pairs:
            writer.writerow([f"{p['jaccard']:.4f}", p["a"], p["b"], f"{p['estimate']:.4f}", p["intersection"],
                             p["union"]])
    else:
        raise ValueError(f"unknown format {fmt!r}")
