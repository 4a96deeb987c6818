"""Reading document formats through the wired pipeline: files/s and MB/s per format, nearDup's overhead over the
bare extraction library, and --jobs 2 scaling (issue 20).

    python bench/formats.py [--docs 60] [--rounds 5] [--out bench/out/formats] [--only pdf,gz]
                            [--against CHECKOUT]
    python bench/formats.py --scaling [--docs 2200] [--rounds 3] [--out bench/out/formats-2200]
                            [--results bench/RESULTS-formats.md]

Fixtures: bench/extractors.py's (the first --docs BBC articles saved by LibreOffice as PDF, DOCX, ODT, by pandoc as
EPUB and HTML, and as .eml and .txt.gz; made once, reused). Per format, in alternating passes (bare, nearDup,
bare, ...) so that a shared machine's load drift falls on both:

- bare: the extraction library called on each file as a user would call it, from the path on disk
  (pypdfium2's document from the path and every page's text; gzip.open(path).read().decode(), and bz2, lzma,
  zstandard alike; email.message_from_bytes and get_body().get_content(); trafilatura.extract of the decoded
  page; for HTML visible text, nearDup's lxml tree walk of the page decoded as UTF-8; for DOCX, ODT and EPUB,
  which nearDup reads with the standard library, nearDup's extract() itself, without the tidy pass the stage
  skips too), then nearDup's shingling of the texts (text.shingles.shingle_documents): the work any tool must do.
- nearDup: the shingle stage over the format's folder into a fresh work dir (`neardup -w W shingle DIR --jobs 1`,
  in process): listing, detection, hashing, the time limit, the extraction cache, the shard files.
- --against CHECKOUT: the stage of an earlier nearDup (its nearDup/ folder, e.g. from `git archive`), in the
  same passes, so that a change's effect is a ratio from one run.
- --parts: where nearDup's per-file cost goes, in process, without the stage's files: the bare call; the file
  read (text.read._read_file); the format detection (text.read.document_format); the content hash
  (text.read.content_hash, which the catalog and an index need); extract() from the bytes read; and read_documents
  (all of them, as a task runs it: its per-file bookkeeping included). CPU microseconds a file, median of --rounds
  interleaved passes; "fmt ovh" as below, from read_documents; with --against, the earlier nearDup's
  read_documents in the same passes ("then") and its fmt ovh; "others" as with --scaling. The txt row, the
  baseline, is always measured. --cache: read_documents (ours and then) with a new extraction cache folder each
  pass, as the shingle stage reads a folder the first time (the cache's rule timed too, which --parts leaves out).
- --scaling: only the stage, with --jobs 1 and --jobs 2 in alternating passes, both over the same 8 partitions
  (--partition-docs docs / 8: partitions never depend on --jobs), on a folder large enough (thousands of files)
  that the pool's fixed cost is amortised.

Reported, for a machine shared with other jobs: CPU time (user + system of this process and its children) per
pass, whose median is steadier than wall time under load; "CPU ovh", the median nearDup pass over the median bare
pass; "fmt ovh", the overhead on the format's own cost, its CPU ms/file beyond plain text's (the txt row: read +
decode against the stage on .txt files), which leaves out what the stage costs for any file (listing, shard files,
catalog, manifest); "ovh us", the same as microseconds a file; the load average (1 min) at the start and end of
each format's passes. With --scaling: files/s of the median wall time with --jobs 1 and --jobs 2, and x, their
ratio (the --jobs 2 scaling, which needs a free second core); "j2 CPU", the CPU time of a --jobs 2 pass (its
workers included) over a --jobs 1 pass's: the work that parallel runs add, which bounds the speed-up on two free
cores by about 2 / j2 CPU whatever the load; "others" the CPU the rest of the machine used meanwhile (cores, from
/proc/stat), next to the load average. --scaling writes its table into --results between the markers it owns.
"""
from __future__ import annotations

import argparse
import bz2
import datetime
import functools
import gzip
import lzma
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import extractors  # noqa: E402
import peers  # noqa: E402

from nearDup.config import ShingleParams  # noqa: E402
from nearDup.text.extract import ExtractOptions, extract  # noqa: E402
from nearDup.text.read import Document  # noqa: E402
from nearDup.text.shingles import shingle_documents  # noqa: E402

import common  # noqa: E402


def _ours(path: str) -> str:
    return "\n".join(text for _, text in extract(path, None, ExtractOptions(tidy=False)))


def _opened(opener):
    """The whole text of a compressed file read by its standard reader, as a user would: gzip.open(path).read()."""
    def read(path: str) -> str:
        with opener(path) as f:
            return f.read().decode("utf-8")
    return read


def _zstd_open(path: str):
    import zstandard
    return zstandard.open(path, "rb")


BARE = [("txt", lambda p: Path(p).read_text(encoding="utf-8"), "read + decode"),
        ("pdf", extractors.pdf_pypdfium2, "pypdfium2 from the path"), ("docx", _ours, "nearDup extract (stdlib)"),
        ("odt", _ours, "nearDup extract (stdlib)"), ("epub", _ours, "nearDup extract (stdlib + lxml)"),
        ("html", extractors.html_lxml, "lxml walk"), ("site_a", extractors.main_trafilatura, "trafilatura"),
        ("eml", extractors.bare_email, "stdlib email"), ("gz", _opened(gzip.open), "gzip.open"),
        ("bz2", _opened(bz2.open), "bz2.open"), ("xz", _opened(lzma.open), "lzma.open"),
        ("zst", _opened(_zstd_open), "zstandard.open")]


def cpu() -> float:
    """User + system CPU seconds of this process and its waited-for children (getrusage: microseconds, where
    os.times counts 10 ms clock ticks)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bare_pass(files: list[Path], fn) -> int:
    texts = [fn(str(p)) for p in files]
    docs = ((Document(str(p), t, len(t), 0, "", False), {}) for p, t in zip(files, texts))
    shingle_documents(docs, ShingleParams(), {})
    return sum(len(t.encode("utf-8")) for t in texts)


def against(checkout: Path):
    """The CLI of an earlier nearDup (a checkout's nearDup/ folder, copied as package nearDup_against: its imports
    are relative), to time its stage in the same passes as this one's: ratios from one run, under one load
    (--parts: its reading loop, nearDup_against.text.read)."""
    import importlib

    root = Path(tempfile.mkdtemp(prefix="nd-against-"))
    shutil.copytree(checkout / "nearDup", root / "nearDup_against")
    sys.path.insert(0, str(root))
    return importlib.import_module("nearDup_against.cli").cli


def stage_pass(folder: Path, jobs: int, partition_docs: int, *extra: str, cli=None) -> None:
    from click.testing import CliRunner

    if cli is None:
        from nearDup.cli import cli
    work = Path(tempfile.mkdtemp(prefix="nd-bench-"))
    try:
        r = CliRunner().invoke(cli, ["-w", str(work / "w"), "shingle", str(folder), "--jobs", str(jobs),
                                     "--partition-docs", str(partition_docs), *extra])
        if r.exit_code != 0:
            raise SystemExit(f"{folder}: {r.output}")
    finally:
        shutil.rmtree(work)


def parts(out: Path, docs: int, rounds: int, only: set, then: str | None = None, cache: bool = False) -> None:
    """The --parts table (see the module docstring)."""
    print(f"{'format':7} {'bare us':>8} {'read':>6} {'detect':>7} {'hash':>6} {'extract':>8} {'documents':>9} "
          f"{'fmt ovh':>7}" + (f" {'then':>7} {'then ovh':>8}" if then else "") + f" {'load':>9} {'others':>6}"
          "  (CPU us a file)")
    txt: dict[str, float] = {}
    for fmt, fn, _ in BARE:
        if not only or fmt in only or fmt == "txt":  # txt: the baseline of "fmt ovh"
            load = os.getloadavg()[0]
            busy, own, began = peers.machine_busy_s(), cpu(), time.perf_counter()
            us = _parts(fmt, fn, sorted((out / fmt).iterdir())[:docs], rounds, then, cache)
            others = (peers.machine_busy_s() - busy - (cpu() - own)) / (time.perf_counter() - began)
            txt = txt or us
            # the format's own cost beyond plain text's, nearDup's (documents, or then's) over the bare library's
            own = {step: "-" if fmt == "txt" else
                   f"{100 * ((us[step] - txt[step]) / (us['bare'] - txt['bare']) - 1):+.0f}%"
                   for step in ("documents", "then") if step in us}
            print(f"{fmt:7} {us['bare']:8.1f} {us['read']:6.1f} {us['detect']:7.1f} {us['hash']:6.1f} "
                  f"{us['extract']:8.1f} {us['documents']:9.1f} {own['documents']:>7}"
                  + (f" {us['then']:7.1f} {own['then']:>8}" if then else "")
                  + f" {load:4.1f}-{os.getloadavg()[0]:<4.1f} {others:6.2f}", flush=True)


def _parts(fmt: str, fn, files: list[Path], rounds: int, then: str | None = None,
           cache: bool = False) -> dict[str, float]:
    import importlib
    import itertools

    from nearDup.config import SourceParams
    from nearDup.text import read
    from nearDup.text.inputs import list_items

    source = SourceParams(html="main") if fmt == "site_a" else SourceParams()
    paths = [str(p) for p in files]
    items = list(list_items(paths, source).items)
    datas = [read._read_file(p, f.stat().st_size) for p, f in zip(paths, files)]
    kinds = [read.document_format(d, p) for d, p in zip(datas, paths)]
    options = ExtractOptions(html_main=fmt == "site_a", tidy=False)
    # --cache: a new extraction cache folder each pass, as a first shingle stage has (made only when a text is kept)
    root = tempfile.mkdtemp(prefix="nd-cache-")
    folders = (f"{root}/{n}" for n in itertools.count())

    def documents(read=read, items=items, source=source):
        read._local.guard = read._Guard()  # as in a task: the deadline, no extraction thread
        try:
            for _ in read.read_documents(items, source, {}, cache=next(folders) if cache else None, tidy=False):
                pass
        finally:
            read._local.guard = None

    if then:  # the earlier nearDup's reading loop, with its own items and options
        old = importlib.import_module(f"{then}.text.read")
        params = importlib.import_module(f"{then}.config").SourceParams
        old_source = params(html="main") if fmt == "site_a" else params()
        old_items = list(importlib.import_module(f"{then}.text.inputs").list_items(paths, old_source).items)

    def read_each(read=read):  # each file's bytes dropped before the next is read, as read_documents does: a list
        for p, d in zip(paths, datas):  # of them all took fresh pages each pass (28 us a 28 KB ODT file, not 9)
            read._read_file(p, len(d))

    steps = {"bare": lambda: [fn(p) for p in paths],
             "read": read_each,
             "detect": lambda: [read.document_format(d, p) for d, p in zip(datas, paths)],
             "hash": lambda: [read.content_hash(d) for d in datas],
             "extract": lambda: [list(extract(p, k, options, None, d)) for p, k, d in zip(paths, kinds, datas) if k],
             "documents": documents}
    if then:
        steps["then"] = lambda: documents(old, old_items, old_source)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds + 1):  # the first round warms up and is dropped
        for name, step in steps.items():
            c = cpu()
            step()
            times[name].append(cpu() - c)
    shutil.rmtree(root)
    return {k: 1e6 * statistics.median(v[1:]) / len(paths) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "formats"))
    ap.add_argument("--only", default="")
    ap.add_argument("--against", default="", help="a checkout of an earlier nearDup whose stage is timed too")
    ap.add_argument("--scaling", action="store_true", help="--jobs 2 against --jobs 1 only")
    ap.add_argument("--parts", action="store_true", help="where the per-file cost goes, in process")
    ap.add_argument("--cache", action="store_true", help="--parts: documents read with an extraction cache")
    ap.add_argument("--results", default=str(REPO / "bench" / "RESULTS-formats.md"),
                    help="--scaling writes its table there, between its markers")
    args = ap.parse_args()
    then = against(Path(args.against)) if args.against else None
    out = Path(args.out)
    only = set(filter(None, args.only.split(",")))
    wanted = [fmt for fmt, _, _ in BARE if not only or fmt in only]
    if any(not (out / fmt).is_dir() or len(os.listdir(out / fmt)) < args.docs for fmt in wanted):
        extractors.make_fixtures(out, args.docs)  # slow (LibreOffice, pandoc): only when some are missing
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at start; {args.docs} files a format, "
          f"median of {args.rounds} alternating passes")
    if args.parts:
        parts(out, args.docs, args.rounds, only, "nearDup_against" if then else None, args.cache)
        return
    table: list[str] = []
    if args.scaling:
        table.append(f"{'format':7} {'jobs 1 f/s':>10} {'jobs 2 f/s':>10} {'x':>5} {'j1 CPU ms':>9} {'j2 CPU':>7} "
                     f"{'load':>9} {'others':>6}")
        print(table[-1])
    else:
        print(f"{'format':7} {'bare library':28} {'bare ms':>8} {'ours ms':>8} {'CPU ovh':>7} {'fmt ovh':>8} "
              f"{'ovh us':>7} " + (f"{'then ms':>8} {'then fmt':>8} " if then else "") + f"{'MB/s':>6} {'load':>9}")
    base = (0.0, 0.0, 0.0)
    for fmt, fn, label in BARE:
        if only and fmt not in only and (fmt != "txt" or args.scaling):  # txt: the baseline of "fmt ovh"
            continue
        folder = out / fmt
        files = sorted(folder.iterdir())[:args.docs]
        if args.scaling:
            variants: tuple[str, ...] = ("jobs1", "jobs2")
        else:
            variants = ("bare", "ours", "then") if then else ("bare", "ours")
        walls: dict[str, list[float]] = {k: [] for k in variants}
        cpus: dict[str, list[float]] = {k: [] for k in variants}
        mb = 0
        extra = ("--html", "main") if fmt == "site_a" else ()
        per_part = max(1, -(-len(files) // 8))  # --scaling: 8 partitions, for --jobs 1 and 2 alike
        load = os.getloadavg()[0]
        busy, own, began = peers.machine_busy_s(), cpu(), time.perf_counter()
        if not args.scaling:
            bare_pass(files, fn)  # warm: imports, the page cache
        stage_pass(folder, 1, 4000, *extra)
        if then:
            stage_pass(folder, 1, 4000, *extra, cli=then)
        for _ in range(args.rounds):
            for what in variants:
                c, t = cpu(), time.perf_counter()
                if what == "bare":
                    mb = bare_pass(files, fn)
                elif what == "then":
                    stage_pass(folder, 1, 4000, *extra, cli=then)
                elif what == "ours":
                    stage_pass(folder, 1, 4000, *extra)
                else:
                    stage_pass(folder, 1 if what == "jobs1" else 2, per_part, *extra)
                walls[what].append(time.perf_counter() - t)
                cpus[what].append(cpu() - c)
        n = len(files)
        loads = f"{load:4.1f}-{os.getloadavg()[0]:<4.1f}"
        if args.scaling:
            one, two = (statistics.median(walls[k]) for k in ("jobs1", "jobs2"))
            c1, c2 = (statistics.median(cpus[k]) for k in ("jobs1", "jobs2"))
            others = (peers.machine_busy_s() - busy - (cpu() - own)) / (time.perf_counter() - began)
            table.append(f"{fmt:7} {n / one:10.1f} {n / two:10.1f} {one / two:5.2f} {1e3 * c1 / n:9.3f} "
                         f"{c2 / c1:7.2f} {loads:>9} {others:6.2f}")
            print(table[-1], flush=True)
            continue
        bare, ours, before = (statistics.median(cpus[k]) / n if cpus.get(k) else 0.0 for k in ("bare", "ours", "then"))
        if fmt == "txt":  # the plain-text baseline: what the stage costs beyond read + shingle, whatever the format
            base = (bare, ours, before)
        # the format's own cost (its ms/file beyond plain text's), nearDup's against the bare library's
        own = (ours - base[1]) / (bare - base[0]) - 1 if fmt != "txt" else 0.0
        extra_us = 1e6 * ((ours - base[1]) - (bare - base[0]))
        own_then = (before - base[2]) / (bare - base[0]) - 1 if fmt != "txt" else 0.0
        print(f"{fmt:7} {label:28} {1e3 * bare:8.3f} {1e3 * ours:8.3f} {100 * (ours / bare - 1):+6.0f}% "
              f"{100 * own:+7.0f}% {extra_us:+7.1f} "
              + (f"{1e3 * before:8.3f} {100 * own_then:+7.0f}% " if then else "")
              + f"{mb / 1e6 / statistics.median(walls['ours']):6.2f} {loads:>9}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.scaling:
        write_scaling(args, table)


SCALING = ("<!-- bench/formats.py --scaling: begin -->", "<!-- bench/formats.py --scaling: end -->")


def write_scaling(args, table: list[str]) -> None:
    """The --scaling table, with when, where and how, into args.results between the markers SCALING."""
    cores = len(os.sched_getaffinity(0))
    fill = functools.partial(textwrap.fill, width=116, break_on_hyphens=False)
    section = "\n".join([
        SCALING[0], "### `--jobs 2` scaling per format (written by the command below)", "",
        fill(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {cores} usable cores, "
             f"Python {platform.python_version()}; {args.docs} files a format, median of {args.rounds} alternating "
             "passes of the whole shingle stage (`--jobs 1`, `--jobs 2`, ...), both over the same 8 partitions. "
             "Command:"), "",
        f"    python bench/formats.py --scaling --docs {args.docs} --rounds {args.rounds} --out {args.out}", "",
        fill("x: files/s with `--jobs 2` over `--jobs 1` (wall time); j1 CPU ms: CPU a file with `--jobs 1`; j2 "
             "CPU: a `--jobs 2` pass's CPU (its workers included) over a `--jobs 1` pass's; load: the 1-minute "
             "load average at the start and end of the format's passes; others: the CPU the rest of the machine "
             "used meanwhile, in cores (/proc/stat). On a machine whose other cores are busy, x says how much a "
             "second process gets of them, not what two free cores give."), "", "```", *table, "```", SCALING[1]])
    common.replace_section(args.results, *SCALING, section)
    print(f"written to {args.results}")


if __name__ == "__main__":
    main()
