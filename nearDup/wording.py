"""How nearDup's messages count things: '1 pair', '3 groups', '2.1 MB'. Every layer logs counts (the stages their
summaries, the report its summary line), so this sits beside config and errors, below all of them."""
from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 pair', '3 pairs' (nouns: an irregular plural): every count in a message goes through here."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def human_size(size: int) -> str:
    """Bytes in decimal units, one decimal: 22107 -> '22.1 kB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return plural(size, "byte")
