"""Printing without the CLI: every format of pairs, groups and path lists, byte for byte; odd file names (blanks,
tabs, newlines, CR, quotes, commas, markup, terminal escapes, bidi controls, undecodable bytes) in each; the JSONL
header and summary; plural and human_size. (tests/test_output.py runs the same formats end to end through a shell.)"""
from __future__ import annotations

import csv
import io
import json

import pytest

from nearDup.report.printer import SCHEMA, Printer, text_stream, visible
from nearDup.wording import human_size, plural

PAIR = {"jaccard": 0.91234, "a": "/d/a.txt", "b": "/d/b.txt", "estimate": 0.875, "intersection": 42, "union": 46,
        "doc_a": 0, "doc_b": 1}  # fields a format does not print are left out
GROUPS = [
    {"type": "group", "group": 1, "keeper": "/d/a", "size": 3, "min_jaccard": 0.8, "max_jaccard": 0.95,
     "pairwise": "all pairs", "anchored": False, "members": [
         {"id": "/d/a", "role": "keeper", "jaccard": 1.0, "reference": False, "doc": 0},
         {"id": "/d/b", "role": "duplicate", "jaccard": 0.95, "reference": False, "doc": 1},
         {"id": "/r/c", "role": "reference", "jaccard": 0.9, "reference": True, "doc": 2}]},
    {"type": "group", "group": 2, "keeper": "/e/x", "size": 2, "min_jaccard": 0.8123, "max_jaccard": 0.8123,
     "pairwise": "keeper pairs only (group too large for all pairs)", "anchored": True, "members": [
         {"id": "/e/x", "role": "keeper", "jaccard": 1.0, "reference": False, "doc": 5},
         {"id": "/e/y", "role": "duplicate", "jaccard": 0.8123, "reference": False, "doc": 6}]},
]
# names a file system allows: each breaks some naive printer
ODD = ["with space", "tab\there", "new\nline", 'comma,"quote"', "cr\rname", "caf\udce9", "[bold]markup[/]",
       "esc\x1b[2Jclear", "rtl\u202etxt.exe", "back\\slash", "-dash"]


def printed(fmt: str, write, null: bool = False, color: bool = False) -> bytes:
    """The bytes a Printer writes to a binary stdout (through text_stream, as the CLI does)."""
    out = io.BytesIO()
    stream = text_stream(out)
    write(Printer(stream, fmt, null=null, color=color))
    stream.flush()
    return out.getvalue()


def odd_pairs() -> list[dict]:
    return [{"jaccard": 0.5, "a": a, "b": b, "estimate": 0.5, "intersection": 1, "union": 2}
            for a, b in zip(ODD, ODD[1:] + ODD[:1])]


# ------------------------------------------------------------------------------------------ pairs

@pytest.mark.parametrize(("fmt", "null", "expected"), [
    ("tsv", False, b"0.9123\t/d/a.txt\t/d/b.txt\n"),
    ("tsv", True, b"0.9123\t/d/a.txt\t/d/b.txt\0"),
    ("fdupes", False, b"0.9123\t/d/a.txt\t/d/b.txt\n"),  # fdupes is a format of groups: pairs stay tsv
    ("csv", False, b"jaccard,a,b,estimate,intersection,union\n0.9123,/d/a.txt,/d/b.txt,0.8750,42,46\n"),
    ("csv", True, b"jaccard,a,b,estimate,intersection,union\x000.9123,/d/a.txt,/d/b.txt,0.8750,42,46\0"),
    ("jsonl", False, b'{"type": "pair", "jaccard": 0.91234, "a": "/d/a.txt", "b": "/d/b.txt", "estimate": 0.875, '
                     b'"intersection": 42, "union": 46}\n'),
    ("jsonl", True, b'{"type": "pair", "jaccard": 0.91234, "a": "/d/a.txt", "b": "/d/b.txt", "estimate": 0.875, '
                    b'"intersection": 42, "union": 46}\0'),
    ("human", False, b"0.9123  /d/a.txt  ~  /d/b.txt\n"),
])
def test_a_pair_in_each_format(fmt, null, expected):
    assert printed(fmt, lambda p: p.pairs([PAIR]), null) == expected


def test_no_pairs_print_nothing_but_the_csv_header():
    assert {fmt: printed(fmt, lambda p: p.pairs([])) for fmt in ("tsv", "jsonl", "human", "fdupes", "csv")} == {
        "tsv": b"", "jsonl": b"", "human": b"", "fdupes": b"", "csv": b"jaccard,a,b,estimate,intersection,union\n"}


def test_pairs_are_streamed_from_an_iterator():
    pairs = ({**PAIR, "a": f"/d/{i}"} for i in range(3))
    assert printed("tsv", lambda p: p.pairs(pairs)).count(b"\n") == 3


def test_human_pairs_in_colour_and_never_wrapped():
    long = "/d/" + "x" * 300
    plain = printed("human", lambda p: p.pairs([{**PAIR, "a": long}]))
    assert plain == f"0.9123  {long}  ~  /d/b.txt\n".encode()  # one line, however narrow the terminal
    coloured = printed("human", lambda p: p.pairs([PAIR]), color=True)
    assert coloured == b"\x1b[1m0.9123\x1b[0m  /d/a.txt  \x1b[2m~\x1b[0m  /d/b.txt\n"


# ------------------------------------------------------------------------------------------ groups

@pytest.mark.parametrize(("fmt", "null", "expected"), [
    ("tsv", False, b"1\tkeeper\t1.0000\t/d/a\n1\tduplicate\t0.9500\t/d/b\n1\treference\t0.9000\t/r/c\n"
                   b"2\tkeeper\t1.0000\t/e/x\n2\tduplicate\t0.8123\t/e/y\n"),
    ("tsv", True, b"1\tkeeper\t1.0000\t/d/a\x001\tduplicate\t0.9500\t/d/b\x001\treference\t0.9000\t/r/c\0"
                  b"2\tkeeper\t1.0000\t/e/x\x002\tduplicate\t0.8123\t/e/y\0"),
    ("csv", False, b"group,role,jaccard,path\n1,keeper,1.0000,/d/a\n1,duplicate,0.9500,/d/b\n"
                   b"1,reference,0.9000,/r/c\n2,keeper,1.0000,/e/x\n2,duplicate,0.8123,/e/y\n"),
    ("fdupes", False, b"/d/a\n/d/b\n/r/c\n\n/e/x\n/e/y\n\n"),  # fdupes: one name a line, a blank line after each
    ("fdupes", True, b"/d/a\0/d/b\0/r/c\0\0/e/x\0/e/y\0\0"),
    ("human", False, b"group 1: 3 documents, Jaccard 0.80-0.95\n  keep  1.0000  /d/a\n  dupe  0.9500  /d/b\n"
                     b"  ref   0.9000  /r/c\n\ngroup 2: 2 documents, Jaccard 0.81-0.81 (anchored: large bucket)\n"
                     b"  keep  1.0000  /e/x\n  dupe  0.8123  /e/y\n\n"),
])
def test_groups_in_each_format(fmt, null, expected):
    assert printed(fmt, lambda p: p.groups(GROUPS), null) == expected


def test_groups_in_jsonl_carry_their_bounds_and_members_without_internal_numbers():
    lines = printed("jsonl", lambda p: p.groups(GROUPS)).split(b"\n")
    assert lines[0] == (b'{"type": "group", "group": 1, "keeper": "/d/a", "size": 3, "min_jaccard": 0.8, '
                        b'"max_jaccard": 0.95, "pairwise": "all pairs", "anchored": false, "members": ['
                        b'{"id": "/d/a", "role": "keeper", "jaccard": 1.0, "reference": false}, '
                        b'{"id": "/d/b", "role": "duplicate", "jaccard": 0.95, "reference": false}, '
                        b'{"id": "/r/c", "role": "reference", "jaccard": 0.9, "reference": true}]}')
    second = json.loads(lines[1])
    assert (second["anchored"], second["pairwise"], [m["id"] for m in second["members"]]) == (
        True, "keeper pairs only (group too large for all pairs)", ["/e/x", "/e/y"])
    assert lines[2:] == [b""]


# ------------------------------------------------------------------------------------------ path lists

@pytest.mark.parametrize("fmt", ["tsv", "csv", "human", "fdupes"])
def test_paths_are_one_a_line_in_every_format_but_jsonl(fmt):
    paths = ["/d/b", "new\nline", "caf\udce9"]
    assert printed(fmt, lambda p: p.paths(paths, "dupe")) == b"/d/b\nnew\nline\ncaf\xe9\n"
    assert printed(fmt, lambda p: p.paths(paths, "dupe"), null=True) == b"/d/b\0new\nline\0caf\xe9\0"


def test_paths_in_jsonl_name_their_role():
    out = printed("jsonl", lambda p: p.paths(["/d/b", "caf\udce9"], "keeper"))
    assert out == b'{"type": "path", "role": "keeper", "path": "/d/b"}\n' \
                  b'{"type": "path", "role": "keeper", "path": "caf\\udce9"}\n'


# ------------------------------------------------------------------------------------------ header and summary

def test_jsonl_is_framed_by_a_header_and_a_summary():
    def run(p: Printer) -> None:
        p.header("9.9.9", "pairs", {"threshold": 0.8, "unit": "word"})
        p.pairs([PAIR])
        p.summary({"pairs": 1, "documents": 2}, aborted=True)

    records = [json.loads(line) for line in printed("jsonl", run).splitlines()]
    assert records[0] == {"type": "header", "schema": SCHEMA, "tool": "nearDup", "version": "9.9.9", "print": "pairs",
                          "params": {"threshold": 0.8, "unit": "word"}}
    assert list(records[0]) == ["type", "schema", "tool", "version", "print", "params"]  # in this order
    assert [r["type"] for r in records] == ["header", "pair", "summary"]
    assert records[2] == {"type": "summary", "pairs": 1, "documents": 2, "aborted": True}
    assert printed("jsonl", run, null=True).count(b"\0") == 3
    for fmt in ("tsv", "csv", "human", "fdupes"):  # other formats: the records only
        p = Printer(io.StringIO(), fmt)
        p.header("9.9.9", "pairs", {})
        p.summary({"pairs": 0})
        assert p.started and p.stream.getvalue() == ""


def test_text_goes_out_unchanged():
    assert printed("tsv", lambda p: p.text("#!/bin/sh\ncaf\udce9\n")) == b"#!/bin/sh\ncaf\xe9\n"


# ------------------------------------------------------------------------------------------ odd names

@pytest.mark.parametrize("fmt", ["tsv", "fdupes"])
def test_tsv_and_fdupes_write_names_back_byte_for_byte(fmt):
    out = printed(fmt, lambda p: p.groups([{**GROUPS[1], "members": [
        {"id": name, "role": "duplicate", "jaccard": 0.5, "reference": False} for name in ODD]}]), null=True)
    fields = out.split(b"\0")
    names = [f.split(b"\t", 3)[3] if fmt == "tsv" else f for f in fields if f]  # the path is the 4th field
    assert names == [n.encode("utf-8", "surrogateescape") for n in ODD]  # caf\xe9: the file's own bytes


def test_csv_quotes_what_a_csv_reader_needs_quoted_and_reads_back_every_name():
    out = printed("csv", lambda p: p.pairs(odd_pairs()))
    rows = list(csv.reader(io.StringIO(out.decode("utf-8", "surrogateescape"), newline="")))
    assert rows[0] == ["jaccard", "a", "b", "estimate", "intersection", "union"]
    assert [(r[1], r[2]) for r in rows[1:]] == [(p["a"], p["b"]) for p in odd_pairs()]
    assert b'"comma,""quote"""' in out and b'"new\nline"' in out and b"tab\there" in out and b"caf\xe9" in out
    assert b',"cr\rname",' in out  # Python < 3.13's csv module left it bare: a reader split the record at the CR
    records = printed("csv", lambda p: p.pairs(odd_pairs()), null=True).split(b"\0")
    assert len(records) == len(ODD) + 2 and records[-1] == b""  # the header, a record a pair, each ended by NUL
    assert records[3] == b'0.5000,"new\nline","comma,""quote""",0.5000,1,2'  # a name's LF stays quoted


def test_jsonl_escapes_every_odd_name_and_reads_back_the_same():
    out = printed("jsonl", lambda p: p.pairs(odd_pairs()))
    lines = out.split(b"\n")
    assert len(lines) == len(ODD) + 1 and lines[-1] == b""  # no raw newline inside a record
    assert [json.loads(line)["a"] for line in lines[:-1]] == ODD
    assert b"caf\\udce9" in out and b"esc\\u001b[2Jclear" in out and b"\x1b" not in out and b"\r" not in out


def test_the_human_format_shows_odd_names_escaped_and_never_runs_them_on_the_terminal():
    """A name holding ESC [2J cleared the terminal it was listed on; one with a CR or a newline hid or faked a line."""
    out = printed("human", lambda p: p.pairs(odd_pairs())).decode()
    lines = out.split("\n")
    assert len(lines) == len(ODD) + 1 and lines[-1] == ""  # one line a pair
    shown = [line.split("  ~  ")[0][len("0.5000  "):] for line in lines[:-1]]
    assert shown == ["with space", "tab\\there", "new\\nline", 'comma,"quote"', "cr\\rname", "caf\\xe9",
                     "[bold]markup[/]", "esc\\x1b[2Jclear", "rtl\\u202etxt.exe", "back\\slash", "-dash"]
    assert not any(c in out for c in "\x1b\r\t\u202e")
    groups = printed("human", lambda p: p.groups([{**GROUPS[1], "members": [
        {"id": "esc\x1b[2Jclear", "role": "keeper", "jaccard": 1.0}]}]), color=True).decode()
    assert "esc\\x1b[2Jclear" in groups and "\x1b[2J" not in groups


def test_visible_escapes_backslashes_only_beside_what_it_escapes():
    assert visible("plain/näme\\x.txt") == "plain/näme\\x.txt"
    assert visible("a\\b\nc") == "a\\\\b\\nc"  # unambiguous once anything is escaped
    assert visible("\x7f\x85\u200b\ufeff\udcff") == "\\x7f\\x85\\u200b\\ufeff\\xff"


# ------------------------------------------------------------------------------------------ words and sizes

@pytest.mark.parametrize(("n", "noun", "nouns", "expected"), [
    (0, "pair", None, "0 pairs"), (1, "pair", None, "1 pair"), (2, "pair", None, "2 pairs"),
    (1, "copy", "copies", "1 copy"), (3, "copy", "copies", "3 copies"), (-1, "byte", None, "-1 bytes"),
])
def test_plural(n, noun, nouns, expected):
    assert plural(n, noun, nouns) == expected


@pytest.mark.parametrize(("size", "expected"), [
    (0, "0 bytes"), (1, "1 byte"), (999, "999 bytes"), (1000, "1.0 kB"), (22107, "22.1 kB"), (1_000_000, "1.0 MB"),
    (2_345_678, "2.3 MB"), (10**9, "1.0 GB"), (5 * 10**12, "5000.0 GB"),
])
def test_human_size(size, expected):
    assert human_size(size) == expected
