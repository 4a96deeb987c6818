"""compare: the exact Jaccard and containments of two documents, shingled as a run shingles them, and with
--explain the passages they share.
"""
from __future__ import annotations

import numpy as np

from ..config import ShingleParams, SourceParams
from ..errors import InputError
from ..kernels import sets
from ..kernels.shingle import CodePointHasher, kgram_hashes, word_hashes
from ..text.inputs import list_items
from ..text.normalise import normalise
from ..text.read import missing_extras_note, read_documents, stdin_document
from ..text.shingles import shingle_documents


def _shingles(path: str, params: ShingleParams, explain: bool,
              stdin=None) -> tuple[np.ndarray, list | None, np.ndarray | None]:
    """A file's shingle set as a run stores it (or of the text on stdin for "-"): read by read_documents (a
    file over STREAM_BYTES streamed block by block) and shingled by shingle_documents. With explain,
    for a text read whole, also its tokens and the hash of the shingle starting at each token, for the passages."""
    source = SourceParams()
    problems: dict = {}
    if path == "-":
        doc = stdin_document(stdin)
        documents = [] if doc is None else [doc]
        problems["binary"] = int(doc is None)
    else:
        items = list_items([path], source).items
        documents = [doc for _, doc in read_documents(items, source, problems)]
    _, values, _ = shingle_documents(((doc, {}) for doc in documents), params, problems)
    if problems.get("binary"):
        raise InputError(f"{path}: binary file (it has NUL bytes); compare reads text only")
    if not documents:  # unreadable, or (no message) in a format whose library is missing
        raise InputError(problems["messages"][0] if problems.get("messages") else
                         f"{path}: {missing_extras_note(problems) or 'no document in it'}")
    text = documents[0].text
    if not explain or text is None:
        return sets.sorted_unique(values), None, None
    text = normalise(text, params)
    if params.unit == "word":
        th, _, (starts, ends) = word_hashes([text])  # type: ignore[misc]  # positions=True gives them
        tokens = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    else:
        th, tokens = CodePointHasher().hash_text(text), list(text)
    return sets.sorted_unique(values), tokens, kgram_hashes(th, np.array([len(th)]), params.k)[1]


def run(path_a: str, path_b: str, params: ShingleParams, explain: bool = False, stdin=None) -> dict:
    """Exact Jaccard |A∩B|/|A∪B| and containments |A∩B|/|A|, |A∩B|/|B| of two documents' shingle sets (the sets a
    run compares), and with explain the passages of A (token ranges) made of shingles that B has too; tokens_a is
    None when A is too large to be held whole (over STREAM_BYTES). Either (not both) may be "-": the text
    on stdin."""
    if path_a == path_b == "-":
        raise InputError("compare: only one of A and B can be - (the text on stdin)")
    set_a, tokens_a, hashes_a = _shingles(path_a, params, explain, stdin)
    set_b = _shingles(path_b, params, False, stdin)[0]
    inter = len(np.intersect1d(set_a, set_b, assume_unique=True))
    union = len(set_a) + len(set_b) - inter
    passages = []
    if tokens_a is not None and hashes_a is not None:  # both, with explain
        covered = np.zeros(len(tokens_a), bool)
        for i in np.flatnonzero(np.isin(hashes_a, set_b)).tolist():
            covered[i:i + params.k] = True
        edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
        passages = [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]
    return {"a": path_a, "b": path_b, "jaccard": inter / union if union else 0.0,
            "containment_a_in_b": inter / len(set_a) if len(set_a) else 0.0,
            "containment_b_in_a": inter / len(set_b) if len(set_b) else 0.0,
            "shingles_a": len(set_a), "shingles_b": len(set_b), "shared": inter,
            "tokens_a": tokens_a, "passages": passages}
