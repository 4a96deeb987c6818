"""The one shingling path: documents to their shingle hashes (normalise, tokenise, k-grams) as CSR lists, used
by the shingle stage, query and compare alike, so that one text always gives the same set.
"""
from __future__ import annotations

import numpy as np

from ..config import (
    ShingleParams,
)
from ..kernels import sets
from ..kernels.shingle import CodePointHasher, finish_word, kgram_hashes, word_hashes, word_state
from .normalise import WORD_RUN, normalise
from .read import BinaryFile, count_binary


def shingle_documents(documents, params: ShingleParams, problems: dict,
                      tokens: list | None = None) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """Normalise, tokenise and shingle documents: (records, values, offsets), the records (id, size, mtime_ns, sha,
    replaced, shingles: how many shingle hashes are stored for it, repeats counted except for a streamed file) and
    their shingle hashes as CSR lists (sets.csr_lists). Binary large files found while streaming count in problems.

    A document read whole keeps its shingle hashes in text order: values[offsets[d] + i] is the hash of the
    k-shingle that starts at its token i (it has none with fewer than k tokens). Given a list, tokens receives
    each document's tokens (its normalised text cut into words or characters; None for a streamed document), for
    compare --explain."""
    char_hasher = CodePointHasher()

    def token_hashes(texts: list[str], positions: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if params.unit == "word":
            return word_hashes(texts, positions=positions)
        hashed = [char_hasher.hash_text(t) for t in texts]
        return (np.concatenate(hashed) if hashed else np.empty(0, np.uint32)), np.array([len(h) for h in hashed]), None

    records: list[dict] = []
    texts: list[str] = []
    streamed = []  # (document number, its unique shingle hashes) of large files shingled piece by piece
    for doc, extra in documents:
        if doc.pieces is not None:
            try:
                hashes = _streamed_shingles(doc.pieces, params, lambda t: token_hashes([t])[0])
            except BinaryFile:
                count_binary(problems, doc.id)
                continue
            streamed.append((len(records), hashes))
            texts.append("")
        else:
            texts.append(normalise(doc.text, params))
        records.append({"id": doc.id, "size": doc.size, "mtime_ns": doc.mtime_ns, "sha": doc.sha,
                        "replaced": doc.replaced, **extra})
    all_tokens, lengths, spans = token_hashes(texts, positions=tokens is not None)
    if tokens is not None:
        tokens.extend(_tokens(texts, params.unit, np.asarray(lengths, np.int64), spans, {d for d, _ in streamed}))
    doc_index, hashes = kgram_hashes(all_tokens, np.asarray(lengths, np.int64), params.k)
    if streamed:
        doc_index = np.concatenate([doc_index, *(np.full(len(h), d, np.int64) for d, h in streamed)])
        hashes = np.concatenate([hashes, *(h for _, h in streamed)])
    values, offsets = sets.csr_lists(doc_index, hashes, len(records))
    for record, n in zip(records, np.diff(offsets).tolist()):
        record["shingles"] = n
    return records, values, offsets


def _tokens(texts: list[str], unit: str, counts: np.ndarray, spans: np.ndarray | None, streamed: set[int]) -> list:
    """Each text's tokens (None for the streamed ones): its characters, or its words cut at spans ((starts, ends) of
    each word in the texts joined by NUL, as word_hashes gives them)."""
    if unit != "word":
        return [None if d in streamed else list(text) for d, text in enumerate(texts)]
    assert spans is not None  # word_hashes gives them with positions=True
    text_start = np.r_[0, np.cumsum([len(text) + 1 for text in texts])]
    word_start = np.r_[0, np.cumsum(counts)]
    out: list = []
    for d, text in enumerate(texts):
        starts, ends = (spans[:, word_start[d]:word_start[d + 1]] - text_start[d]).tolist()
        out.append(None if d in streamed else [text[a:b] for a, b in zip(starts, ends)])
    return out


def _streamed_shingles(pieces, params: ShingleParams, hash_tokens) -> np.ndarray:
    """The unique shingle hashes of a document given as pieces cut after whitespace: each piece's tokens are
    shingled together with the last k-1 tokens of the text before it, so no shingle is lost or made up at a cut.
    A piece that ends inside a word (cut after megabytes without a blank) leaves that word to the next pieces,
    hashed piece by piece (word_state). Memory grows with the number of distinct shingles, not with the text."""
    tail = np.empty(0, np.uint32)
    merged, pending, first = np.empty(0, np.uint32), [], True
    word = None  # word_state of a word begun in the pieces before, for the word unit
    lead: list  # the hash of a word finished at the start of this piece
    for text, last in _lookahead(pieces):  # lazily: one piece in memory at a time
        text, lead = normalise(text, params, first=first, last=last), []
        first = False
        if params.unit == "word":
            if word is not None:  # it goes on up to this piece's first non-word character
                n = WORD_RUN.match(text).end()  # type: ignore[union-attr]  # \w* always matches
                word = word_state(text[:n], word)
                if n == len(text) and not last:
                    continue
                text, lead, word = text[n:], [finish_word(word)], None
            if not last and text and WORD_RUN.fullmatch(text[-1]):  # ends inside a word
                n = len(text) - WORD_RUN.match(text[::-1]).end()  # type: ignore[union-attr]  # as above
                text, word = text[:n], word_state(text[n:])
        th = np.concatenate([tail, *lead, hash_tokens(text)])
        pending.append(sets.sorted_unique(kgram_hashes(th, np.array([len(th)]), params.k)[1]))
        tail = th[len(th) - min(len(th), params.k - 1):]
        if sum(map(len, pending)) > max(len(merged), 1 << 20):  # merge when pending outgrows what is merged
            merged, pending = sets.sorted_unique(np.concatenate([merged, *pending])), []
    return sets.sorted_unique(np.concatenate([merged, *pending]))


def _lookahead(pieces):
    """(piece, is_last) for each piece of an iterator."""
    previous = None
    for piece in pieces:
        if previous is not None:
            yield previous, False
        previous = piece
    if previous is not None:
        yield previous, True
