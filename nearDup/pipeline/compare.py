"""compare: the exact Jaccard and containments of two documents, shingled as a run shingles them, and with
--explain the passages they share.
"""
from __future__ import annotations

import numpy as np

from ..config import ShingleParams, SourceParams
from ..errors import InputError
from ..text.inputs import list_items
from ..text.read import missing_extras_note, read_documents, stdin_document
from ..text.shingles import shingle_documents
from .similarity import containment, jaccard, one_shard, set_overlap


def _shingles(path: str, params: ShingleParams, explain: bool, stdin=None) -> tuple[tuple, list | None]:
    """A file's shingles as a run stores them (or of the text on stdin for "-"): read by read_documents (a file
    over STREAM_BYTES streamed block by block) and shingled by shingle_documents, as CSR lists (values, offsets)
    of one document. With explain, also its tokens (None for a streamed file), for the passages."""
    source = SourceParams()
    problems: dict = {}
    if path == "-":
        doc = stdin_document(stdin)
        documents = [] if doc is None else [doc]
        problems["binary"] = int(doc is None)
    else:
        items = list_items([path], source).items
        documents = [doc for _, doc in read_documents(items, source, problems)]
    tokens: list | None = [] if explain else None
    _, values, offsets = shingle_documents(((doc, {}) for doc in documents), params, problems, tokens)
    if problems.get("binary"):
        raise InputError(f"{path}: binary file (it has NUL bytes); compare reads text only")
    if not documents:  # unreadable, or (no message) in a format whose library is missing
        raise InputError(problems["messages"][0] if problems.get("messages") else
                         f"{path}: {missing_extras_note(problems) or 'no document in it'}")
    return (values, offsets), tokens[0] if tokens else None


def run(path_a: str, path_b: str, params: ShingleParams, explain: bool = False, stdin=None) -> dict:
    """Exact Jaccard |A∩B|/|A∪B| and containments |A∩B|/|A|, |A∩B|/|B| of two documents' shingle sets (the sets a
    run compares), and with explain the passages of A (token ranges) made of shingles that B has too; tokens_a is
    None when A is too large to be held whole (over STREAM_BYTES). Either (not both) may be "-": the text
    on stdin."""
    if path_a == path_b == "-":
        raise InputError("compare: only one of A and B can be - (the text on stdin)")
    shingles_a, tokens_a = _shingles(path_a, params, explain, stdin)
    shingles_b = _shingles(path_b, params, False, stdin)[0]
    return _compared(path_a, path_b, shingles_a, tokens_a, shingles_b, params.k)


def both_ways(path_a: str, path_b: str, params: ShingleParams) -> tuple[dict, dict]:
    """run(a, b, explain=True) and run(b, a, explain=True), each document read and shingled once (the HTML
    report's pair views: the passages of both sides)."""
    shingles_a, tokens_a = _shingles(path_a, params, True)
    shingles_b, tokens_b = _shingles(path_b, params, True)
    ab = _compared(path_a, path_b, shingles_a, tokens_a, shingles_b, params.k)
    return ab, {**ab, "a": path_b, "b": path_a, "containment_a_in_b": ab["containment_b_in_a"],  # (the scores swap)
                "containment_b_in_a": ab["containment_a_in_b"], "shingles_a": ab["shingles_b"],
                "shingles_b": ab["shingles_a"], "tokens_a": tokens_b,
                "passages": [] if tokens_b is None else _passages(shingles_b[0], tokens_b, shingles_a[0], params.k)}


def _compared(path_a: str, path_b: str, shingles_a: tuple, tokens_a: list | None, shingles_b: tuple, k: int) -> dict:
    first = np.zeros(1, np.int64)  # each side's one document
    inter, la, lb = set_overlap(*one_shard(shingles_a), first, first, other=one_shard(shingles_b))
    passages = _passages(shingles_a[0], tokens_a, shingles_b[0], k) if tokens_a is not None else []
    return {"a": path_a, "b": path_b, "jaccard": float(jaccard(inter, la, lb)[0]),
            "containment_a_in_b": float(containment(inter, la)[0]),
            "containment_b_in_a": float(containment(inter, lb)[0]),
            "shingles_a": int(la[0]), "shingles_b": int(lb[0]), "shared": int(inter[0]),
            "tokens_a": tokens_a, "passages": passages}


def _passages(values_a: np.ndarray, tokens_a: list, values_b: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The token ranges of A (read whole: its shingle i starts at its token i) covered by shingles B has too."""
    starts = np.flatnonzero(np.isin(values_a, values_b))
    depth = np.zeros(len(tokens_a) + k + 1, np.int64)  # shared shingles over each token: +1 at a start, -1 after
    depth[starts] += 1
    depth[starts + k] -= 1
    covered = np.cumsum(depth[:len(tokens_a)]) > 0
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]
