"""compare: the exact Jaccard and containments of two documents, shingled as a run shingles them, and with
--explain the passages they share.
"""
from __future__ import annotations

import numpy as np

from ..config import ShingleParams, SourceParams
from ..errors import InputError, NearDupError
from ..text.inputs import list_items
from ..text.read import missing_extras_note, read_documents, stdin_document
from ..text.shingles import shingle_documents
from .similarity import containment, jaccard, one_shard, set_overlap


def _read(path: str, stdin=None) -> tuple[list, dict]:
    """A file's documents (or the text on stdin for "-"), read by read_documents (a file over STREAM_BYTES as
    pieces, streamed block by block), and the problems met."""
    source = SourceParams()
    problems: dict = {}
    if path == "-":
        doc = stdin_document(stdin)
        documents = [] if doc is None else [doc]
        problems["binary"] = int(doc is None)
    else:
        items = list_items([path], source).items
        documents = [doc for _, doc in read_documents(items, source, problems)]
    return documents, problems


def _refused(path: str, documents: list, problems: dict) -> InputError | None:
    if problems.get("binary"):
        return InputError(f"{path}: binary file (it has NUL bytes); compare reads text only")
    if not documents:  # unreadable, or (no message) in a format whose library is missing
        return InputError(problems["messages"][0] if problems.get("messages") else
                          f"{path}: {missing_extras_note(problems) or 'no document in it'}")
    return None


def _shingles(path: str, params: ShingleParams, explain: bool, stdin=None) -> tuple[tuple, list | None]:
    """A file's shingles as a run stores them (or of the text on stdin for "-"): read by _read and shingled by
    shingle_documents, as CSR lists (values, offsets) of one document. With explain, also its tokens (None for a
    streamed file), for the passages."""
    documents, problems = _read(path, stdin)
    tokens: list | None = [] if explain else None
    _, values, offsets = shingle_documents(((doc, {}) for doc in documents), params, problems, tokens)
    refused = _refused(path, documents, problems)  # (after shingling: a streamed file may turn out binary)
    if refused:
        raise refused
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


def explain_pairs(pairs: list[tuple[str, str]], params: ShingleParams) -> list[tuple[dict, dict] | NearDupError]:
    """run(a, b, explain=True) and run(b, a, explain=True) of each pair (a, b), or the error that stops it (the
    HTML report's pair views). Each document is read once and all are shingled in one call, their overlaps
    counted in one: pair by pair, the fixed cost of those calls was most of a pair view's. A file too large to be
    read whole (over STREAM_BYTES) has no tokens, hence no passages: an error here."""
    read: dict[str, object] = {}  # path -> its (first) document, or why not
    for path in dict.fromkeys(p for pair in pairs for p in pair):
        refused: NearDupError | None
        try:
            documents, problems = _read(path)
            refused = _refused(path, documents, problems)
        except (NearDupError, OSError) as e:
            refused = e if isinstance(e, NearDupError) else InputError(f"{path}: cannot read ({e.strerror or e})")
        if refused is None and documents[0].pieces is not None:
            refused = InputError(f"{path}: too large for a pair view")
        read[path] = refused or documents[0]
    number = {p: n for n, p in enumerate(p for p, doc in read.items() if not isinstance(doc, NearDupError))}
    tokens: list = []
    _, values, offsets = shingle_documents(((read[p], {}) for p in number), params, {}, tokens)
    shown = [(a, b) for a, b in pairs if a in number and b in number]
    ia, ib = (np.array([number[pair[side]] for pair in shown], np.int64) for side in (0, 1))
    inter, la, lb = set_overlap(*one_shard((values, offsets)), ia, ib)
    explained = {}
    for (a, b), ab, ba in zip(shown, _scores(inter, la, lb), _scores(inter, lb, la)):
        na, nb = number[a], number[b]
        sa, sb = values[offsets[na]:offsets[na + 1]], values[offsets[nb]:offsets[nb + 1]]
        explained[a, b] = ({"a": a, "b": b, **ab, "tokens_a": tokens[na],
                            "passages": _passages(sa, tokens[na], sb, params.k)},
                           {"a": b, "b": a, **ba, "tokens_a": tokens[nb],
                            "passages": _passages(sb, tokens[nb], sa, params.k)})
    return [explained[a, b] if (a, b) in explained else
            next(r for r in (read[a], read[b]) if isinstance(r, NearDupError)) for a, b in pairs]


def _compared(path_a: str, path_b: str, shingles_a: tuple, tokens_a: list | None, shingles_b: tuple, k: int) -> dict:
    first = np.zeros(1, np.int64)  # each side's one document
    inter, la, lb = set_overlap(*one_shard(shingles_a), first, first, other=one_shard(shingles_b))
    passages = _passages(shingles_a[0], tokens_a, shingles_b[0], k) if tokens_a is not None else []
    return {"a": path_a, "b": path_b, **_scores(inter, la, lb)[0], "tokens_a": tokens_a, "passages": passages}


def _scores(inter: np.ndarray, la: np.ndarray, lb: np.ndarray) -> list[dict]:
    """Each pair's scores as run gives them, from set_overlap's arrays (swap la and lb: the other way)."""
    return [{"jaccard": j, "containment_a_in_b": ca, "containment_b_in_a": cb, "shingles_a": a, "shingles_b": b,
             "shared": i}
            for j, ca, cb, a, b, i in zip(jaccard(inter, la, lb).tolist(), containment(inter, la).tolist(),
                                          containment(inter, lb).tolist(), la.tolist(), lb.tolist(), inter.tolist())]


def _passages(values_a: np.ndarray, tokens_a: list, values_b: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The token ranges of A (read whole: its shingle i starts at its token i) covered by shingles B has too."""
    starts = np.flatnonzero(np.isin(values_a, values_b))
    depth = np.zeros(len(tokens_a) + k + 1, np.int64)  # shared shingles over each token: +1 at a start, -1 after
    depth[starts] += 1
    depth[starts + k] -= 1
    covered = np.cumsum(depth[:len(tokens_a)]) > 0
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]
