"""Normalising text before it is cut into tokens: case folding, punctuation, whitespace (ShingleParams)."""
from __future__ import annotations

import functools
import re
import unicodedata

from ..config import ShingleParams

SPACE = re.compile(r"\s+")
WORD_RUN = re.compile(r"\w*")  # a word of the word unit (kernels.shingle: runs of \w)



@functools.cache
def _punctuation_table() -> dict[int, None]:
    return {cp: None for cp in range(0x110000) if unicodedata.category(chr(cp)).startswith("P")}


def normalise(text: str, params: ShingleParams, first: bool = True, last: bool = True) -> str:
    """NFKC, case folding, optional removal of Unicode punctuation (categories P*), then whitespace runs to one
    blank (or removed entirely with whitespace="remove"). Word tokens do not depend on the whitespace rule.
    first/last: whether this piece starts/ends the document (only its ends are stripped of blanks)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if params.strip_punct:
        text = text.translate(_punctuation_table())
    if params.unit == "char":
        if params.whitespace == "remove":
            return SPACE.sub("", text)
        text = SPACE.sub(" ", text)
        text = text.lstrip(" ") if first else text
        text = text.rstrip(" ") if last else text
    return text
