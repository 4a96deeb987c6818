"""Printing results: what (pairs, groups, dupes, keepers, uniques) in which format (tsv, jsonl, csv, human, fdupes).

Writes text to a stream that encodes with surrogateescape, so ids read from non-UTF-8 file names go back out as
their original bytes (tsv, csv, fdupes, path lists); JSONL escapes them as \\udcXX (valid JSON; `os.fsencode` of
the decoded string gives the bytes back); the human format shows them, and control and bidi characters, with
backslash escapes (see visible).
Knows nothing of click or the work dir.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii  # what json.dumps(a str) is
from typing import TYPE_CHECKING

from ..errors import OutputError

if TYPE_CHECKING:
    from rich.console import Console

    from ..pipeline.copies import Listing
    from ..pipeline.results import StoredPairs


SELECTIONS = ("pairs", "groups", "dupes", "keepers", "uniques", "script")
FORMATS = ("tsv", "jsonl", "csv", "human", "fdupes")
SCHEMA = 1
# text written at once, at most: <= 4 KB encoded, the smallest buffer of a binary stdout (st_blksize of a pipe).
# A larger write goes to the file unbuffered, and when the reader stops reading mid-write, BufferedWriter returns
# the part written instead of raising BrokenPipeError, and TextIOWrapper drops the rest: no error, exit status 0
WRITE_CHARS = 1024
PAIR_FIELDS = ("jaccard", "a", "b", "estimate", "intersection", "union")
# --metric containment: a pair is directed, a (contained) -> b (container), and its score is the containment
CONTAINMENT_FIELDS = ("containment", "contained", "container", "jaccard", "estimate", "intersection", "union")


def _directed(p: dict) -> dict:
    """A containment pair's record with its ends named for what they are."""
    return {**p, "contained": p["a"], "container": p["b"]}


def _metric(record: dict) -> str:
    """The score of a pair or group record: "containment" (--metric containment), else "jaccard"."""
    return "containment" if "containment" in record or "min_containment" in record else "jaccard"


# what could hide text from a person reading a terminal or a script (or rewrite the terminal: ESC sequences):
# control characters, bidi controls, line separators, and undecodable bytes (surrogate escapes)
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\udc80-\udcff]")
_ESCAPED = re.compile(_HIDDEN.pattern[:-1] + r"\\]")  # and backslash, so that the escaped form is unambiguous
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """text as a reviewer can read it: if it holds a control, bidi or undecodable character, every such character
    and backslash shown escaped (\\r, \\n, \\t, \\\\, \\xNN for a byte or C1 control, \\uNNNN)."""
    if not _HIDDEN.search(text):
        return text

    def escape(m: re.Match) -> str:
        o = ord(m.group())
        if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte
            o -= 0xDC00
        return _NAMED.get(m.group()) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
    return _ESCAPED.sub(escape, text)


class Printer:
    """One run's stdout. JSONL is a stream of typed records: a header, the records, a summary."""

    def __init__(self, stream, fmt: str, null: bool = False, color: bool = False):
        self.stream, self.fmt, self.color = stream, fmt, color
        self.end = "\0" if null else "\n"
        self._console: Console | None = None  # made when first needed: rich takes a while to import
        self.started = False  # the header was written

    # -------------------------------------------------------------------------------- framing (jsonl only)
    def header(self, tool_version: str, selection: str, params: dict) -> None:
        self.started = True
        if self.fmt == "jsonl":
            self._json({"type": "header", "schema": SCHEMA, "tool": "nearDup", "version": tool_version,
                        "print": selection, "params": params})

    def summary(self, counts: dict, aborted: bool = False) -> None:
        if self.fmt == "jsonl":
            self._json({"type": "summary", **counts, "aborted": aborted})

    def _json(self, record: dict) -> None:
        self.stream.write(json.dumps(record, sort_keys=False) + self.end)

    # -------------------------------------------------------------------------------- records
    def pairs(self, pairs: Iterable[dict] | StoredPairs, metric: str | None = None) -> None:
        """metric: the run's (None: as the records show it), so that no pairs still get the right csv header.
        Containment pairs are directed: jsonl and csv name the ends contained and container; tsv and human give
        the containment, then the contained, then the container (human: "A in B"). Stored pairs (--new-only too) are
        printed from their columns (_listed): the same bytes without a record per pair."""
        from ..pipeline.results import StoredPairs  # (here: the option parser imports this module for FORMATS)

        if isinstance(pairs, StoredPairs):
            return self._listed(pairs.listing())
        pairs = iter(pairs)
        first = next(pairs, None)
        pairs = itertools.chain([first] if first is not None else [], pairs)
        contained = (metric or (_metric(first) if first is not None else "jaccard")) == "containment"
        score = "containment" if contained else "jaccard"
        if self.fmt == "jsonl":
            fields = CONTAINMENT_FIELDS if contained else PAIR_FIELDS
            for p in pairs:
                record = _directed(p) if contained else p
                self._json({"type": "pair", **{k: record[k] for k in fields}})
        elif self.fmt == "csv":
            self._csv(list(CONTAINMENT_FIELDS) if contained else ["jaccard", "a", "b", "estimate", "intersection",
                                                                  "union"],
                      ([f"{p[score]:.4f}", p["a"], p["b"], *([f"{p['jaccard']:.4f}"] if contained else []),
                        f"{p['estimate']:.4f}", p["intersection"], p["union"]] for p in pairs))
        elif self.fmt == "human":
            console = self._rich()
            between = "in" if contained else "~"
            for p in pairs:
                console.print(f"[bold]{p[score]:.4f}[/]  {_esc(p['a'])}  [dim]{between}[/]  {_esc(p['b'])}")
        else:  # (fdupes prints groups: the command line asks for them)
            for p in pairs:
                self.stream.write(f"{p[score]:.4f}\t{p['a']}\t{p['b']}{self.end}")

    def _listed(self, listing: Listing) -> None:
        """pairs() of a Listing: each line head + a + middle + b + tail, the heads and tails made once per entry
        (Listing.texts: once per distinct value), the ids once each, the lines joined a chunk at a time."""
        fields = CONTAINMENT_FIELDS if listing.contained else PAIR_FIELDS  # score, the two ends, the rest
        names, end = listing.names, self.end
        if self.fmt == "jsonl":  # as _json: json.dumps, ensure_ascii
            chunks = listing.text(['{"type": "pair"', *listing.json_fields(fields[:1]), f', "{fields[1]}": '],
                                  list(map(encode_basestring_ascii, names)), f', "{fields[2]}": ',
                                  [*listing.json_fields(fields[3:]), "}" + end])
        elif self.fmt == "csv":
            self.stream.write(",".join(fields) + end)
            chunks = listing.text([listing.texts(fields[0], "{:.4f},".format)], list(map(_csv_field, names)), ",",
                                  [*(listing.texts(f, lambda v: f",{v:.4f}" if isinstance(v, float) else f",{v}")
                                     for f in fields[3:]), end])
        elif self.fmt == "human":
            console = self._rich()
            for pieces in listing.lines([listing.texts(fields[0], "[bold]{:.4f}[/]  ".format)], list(map(_esc, names)),
                                        f"  [dim]{'in' if listing.contained else '~'}[/]  ", []):
                for line in pieces.tolist():
                    console.print("".join(line))
            return
        else:
            chunks = listing.text([listing.texts(fields[0], "{:.4f}\t".format)], names, "\t", [end])
        for text in chunks:
            for at in range(0, len(text), WRITE_CHARS):
                self.stream.write(text[at:at + WRITE_CHARS])

    def groups(self, groups: list[dict]) -> None:
        """Containment groups give each member's containment in the keeper instead of its Jaccard."""
        score = "containment" if groups and _metric(groups[0]) == "containment" else "jaccard"
        if self.fmt == "jsonl":
            for g in groups:
                self._json({"type": "group", "group": g["group"], "keeper": g["keeper"], "size": g["size"],
                            f"min_{score}": g[f"min_{score}"], f"max_{score}": g[f"max_{score}"],
                            "pairwise": g["pairwise"], "anchored": g["anchored"],
                            "members": [{k: m[k] for k in ("id", "role", score, "reference")}
                                        for m in g["members"]]})
        elif self.fmt == "csv":
            self._csv(["group", "role", score, "path"],
                      ([g["group"], m["role"], f"{m[score]:.4f}", m["id"]] for g in groups for m in g["members"]))
        elif self.fmt == "human":
            console = self._rich()
            for g in groups:
                bounds = f"{g[f'min_{score}']:.2f}-{g[f'max_{score}']:.2f}"
                console.print(f"[bold]group {g['group']}[/]: {g['size']} documents, "
                              + (f"contained {bounds} in the keeper" if score == "containment" else f"Jaccard {bounds}")
                              + (" [yellow](anchored: large bucket)[/]" if g["anchored"] else ""))
                for m in g["members"]:
                    mark = {"keeper": "[green]keep[/]", "reference": "[cyan]ref [/]"}.get(m["role"], "[red]dupe[/]")
                    console.print(f"  {mark}  {m[score]:.4f}  {_esc(m['id'])}")
                console.print()
        elif self.fmt == "fdupes":
            for g in groups:
                for m in g["members"]:
                    self.stream.write(m["id"] + self.end)
                self.stream.write(self.end)
        else:
            for g in groups:
                for m in g["members"]:
                    self.stream.write(f"{g['group']}\t{m['role']}\t{m[score]:.4f}\t{m['id']}{self.end}")

    def paths(self, paths: list[str], role: str) -> None:
        if self.fmt == "jsonl":
            for p in paths:
                self._json({"type": "path", "role": role, "path": p})
        else:  # one path per record whatever the format: made for xargs
            for p in paths:
                self.stream.write(p + self.end)

    def text(self, text: str) -> None:
        self.stream.write(text)

    def table(self, kind: str, fields: tuple[str, ...], rows: list[dict]) -> None:
        """Rows of named numbers (eval's scores): JSONL records of type kind; tsv and csv with a header line; human
        as aligned columns. Floats with 4 decimals but in JSONL; None is empty (tsv, csv), null, or - (human)."""
        if self.fmt == "jsonl":
            for row in rows:
                self._json({"type": kind, **{f: row[f] for f in fields}})
            return
        cells = [["" if row[f] is None else f"{row[f]:.4f}" if isinstance(row[f], float) else str(row[f])
                  for f in fields] for row in rows]
        if self.fmt == "csv":
            self._csv(list(fields), cells)
        elif self.fmt == "human":
            width = [max(len(f), *(len(c[i]) for c in cells)) for i, f in enumerate(fields)]
            for line in [list(fields), *cells]:
                self.stream.write("  ".join((c or "-").rjust(w) for c, w in zip(line, width)).rstrip() + self.end)
        else:
            for line in [list(fields), *cells]:
                self.stream.write("\t".join(line) + self.end)

    # -------------------------------------------------------------------------------- helpers
    def _csv(self, header: list, rows) -> None:
        self.stream.write(",".join(header) + self.end)
        for row in rows:
            self.stream.write(",".join([_csv_field(v) for v in row]) + self.end)

    def _rich(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, force_terminal=self.color, no_color=not self.color,
                                    highlight=False, soft_wrap=True, emoji=False)
        return self._console


# RFC 4180: a field holding a comma, a quote, CR or LF is quoted. (The csv module of Python < 3.13 left a CR bare,
# and a LF too with -0: a reader split the record, and the output depended on the Python version.)
_CSV_QUOTED = re.compile(r'[,"\r\n]')


def _csv_field(value) -> str:
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if _CSV_QUOTED.search(text) else text


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(visible(text))


class _ResultsStream(io.TextIOWrapper):
    """A write or flush of the results that fails (standard output redirected to a full disk: ENOSPC, EDQUOT,
    EFBIG, EIO) raises OutputError, one line naming the cause, not an internal error; a closed pipe stays a
    BrokenPipeError (the reader stopped reading, exit 141)."""

    def write(self, text: str) -> int:
        with _output_errors():
            return super().write(text)

    def flush(self) -> None:
        with _output_errors():
            super().flush()


@contextlib.contextmanager
def _output_errors():
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"standard output: cannot write the results ({e.strerror or e}); the work is kept, so a "
                          f"run that prints them somewhere else does not redo it") from None


def text_stream(binary) -> io.TextIOWrapper:
    """A text layer over a binary stream that writes surrogate escapes back as their bytes (_ResultsStream)."""
    return _ResultsStream(binary, encoding="utf-8", errors="surrogateescape", newline="", write_through=True)
