"""Saved pairs read back (--replay): the JSONL or TSV nearDup printed, or a work dir's verify/KEY.pairs.jsonl."""
from __future__ import annotations

import json

from ..errors import InputError


def read_pairs(path: str, threshold: float | None, header: dict | None = None) -> list[dict]:
    """Pairs saved by nearDup (`--format jsonl` output, or a work dir's verify/KEY.pairs.jsonl), at or above threshold,
    sorted as nearDup prints them. header: filled with the params of the output's header record, if it has one."""
    pairs = []
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    if record.get("type", "pair") != "pair":
                        if record.get("type") == "header" and header is not None:
                            header.update(record.get("params") or {})
                        continue
                    pair = {"a": record["a"], "b": record["b"], "jaccard": float(record["jaccard"]),
                            "estimate": float(record.get("estimate", record["jaccard"])),
                            "intersection": int(record.get("intersection", 0)), "union": int(record.get("union", 0))}
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise InputError(f"{path}:{number}: not a nearDup pair record (a, b, jaccard)") from None
                if threshold is None or pair["jaccard"] >= threshold:
                    pairs.append(pair)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    pairs.sort(key=lambda p: (-p["jaccard"], p["a"], p["b"]))
    return pairs
