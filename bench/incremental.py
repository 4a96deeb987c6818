"""The incremental index (#6): what adding 1,000 documents to a 100,000-document index costs, against a run from
scratch over the same 101,000 documents.

    python bench/incremental.py [--docs 100000] [--new 1000] [--reps 3]

The base corpus is the scale corpus (corpora.build_scale), the new documents another scale corpus (seed 2), a
tenth of them edited copies of base documents, so the incremental run finds new duplicates. Per repetition: a
run from scratch over base + new (into a fresh work dir), and an incremental run on a fresh copy of the base
index with the new documents moved into the folder (cron's situation). Both print every verified pair; their
stdout must be byte-identical, or the benchmark fails. Medians of wall and CPU seconds (user + sys of the child
processes) are reported, and the section between the markers in bench/RESULTS.md is replaced.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "incremental")
sys.path.insert(0, HERE)
import corpora  # noqa: E402

import nearDup  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402

BEGIN, END = "<!-- incremental: bench/incremental.py -->", "<!-- /incremental -->"


def timed(args: list[str]) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout) of one whole neardup process."""
    return common.timed([sys.executable, "-m", "nearDup", *args])


def floors(docs: str, reps: int) -> dict:
    """Median (wall s, CPU s) of what any run that checks every file must pay, measured the same way: find(1)
    stat-ing every file (size, mtime, inode) in C, and the interpreter with nearDup's CLI imported."""
    commands = {"find": ["find", docs, "-type", "f", "-printf", "%s %T@ %i\n"],
                "start-up": [sys.executable, "-c", "import nearDup.cli"]}
    out = {}
    for name, cmd in commands.items():
        runs = [common.timed(cmd)[:2] for _ in range(reps)]
        out[name] = [statistics.median(r[i] for r in runs) for i in (0, 1)]
    return out


def build(n_docs: int, n_new: int) -> tuple[str, str]:
    """The base corpus folder and the folder of new documents (built once, kept in bench/out/incremental)."""
    base = os.path.join(OUT, f"base-{n_docs}")
    if not os.path.exists(os.path.join(base, "docs")):
        corpora.build_scale(base, n_docs, seed=1)
    new = os.path.join(OUT, f"new-{n_new}")
    if not os.path.exists(new):
        tmp = new + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        corpora.build_scale(tmp, n_new, seed=2)
        rng = random.Random(3)
        names = sorted(os.listdir(os.path.join(base, "docs", "0000")))
        vocab, _ = corpora.imdb_vocabulary()
        docs = os.path.join(tmp, "docs")
        for i, path in enumerate(sorted(os.path.join(d, f) for d, _, fs in os.walk(docs) for f in fs)):
            if i % 10 == 0:  # an edited copy of a base document: a new near-duplicate
                with open(os.path.join(base, "docs", "0000", rng.choice(names))) as f:
                    text = corpora.edit_words(f.read(), 0.02, rng, vocab)
                with open(path, "w") as f:
                    f.write(text)
        os.rename(docs, new)
        shutil.rmtree(tmp)
    return os.path.join(base, "docs"), new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=1_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    docs, new = build(args.docs, args.new)
    bench_run.compile_package(os.path.dirname(nearDup.__file__))  # as installed: see compile_package
    moved = os.path.join(docs, "zz-new")
    if os.path.exists(moved):  # left by an interrupted benchmark
        os.rename(moved, new)
    index = os.path.join(OUT, "index")
    shutil.rmtree(index, ignore_errors=True)
    base_wall, base_cpu, _ = timed(["run", docs, "--index", index, "-q"])
    print(f"base index of {args.docs} documents: {base_wall:.1f} s wall, {base_cpu:.1f} s CPU", file=sys.stderr)
    full, incremental = [], []
    for rep in range(args.reps):
        os.rename(new, moved)
        try:
            scratch = os.path.join(OUT, "scratch")
            shutil.rmtree(scratch, ignore_errors=True)
            wall, cpu, expected = timed(["-w", scratch, "run", docs])
            full.append((wall, cpu))
            copy = os.path.join(OUT, "index-copy")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(index, copy)
            wall, cpu, got = timed(["run", docs, "--index", copy])
            incremental.append((wall, cpu))
            if got != expected:
                sys.exit("the incremental run's result differs from the run from scratch")
            new_only = timed(["run", docs, "--index", copy, "--new-only"])[2]  # reported already: nothing new
            if new_only:
                sys.exit("a second --new-only run reported pairs again")
        finally:
            os.rename(moved, new)
        print(f"rep {rep + 1}: full {full[-1][0]:.1f} s wall / {full[-1][1]:.1f} s CPU; incremental "
              f"{incremental[-1][0]:.2f} s wall / {incremental[-1][1]:.2f} s CPU; {len(expected.splitlines())} "
              f"pairs, identical", file=sys.stderr)
    med = {name: [statistics.median(v[i] for v in runs) for i in (0, 1)]
           for name, runs in (("full", full), ("incremental", incremental))}
    os.rename(new, moved)
    try:
        med.update(floors(docs, max(args.reps, 3)))
    finally:
        os.rename(moved, new)
    report(args, med, base_wall, base_cpu, len(expected.splitlines()))


def report(args, med: dict, base_wall: float, base_cpu: float, pairs: int) -> None:
    load = os.getloadavg()[0]
    lines = [BEGIN, "", "## Incremental index: adding documents to an index", "",
             f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; `python bench/incremental.py --docs {args.docs} --new {args.new} "
             f"--reps {args.reps}` (load average at the end {load:.2f}).", "",
             f"An index of {args.docs:,} scale documents (built in {base_wall:.1f} s wall, {base_cpu:.1f} s CPU), "
             f"then {args.new:,} new documents (a tenth of them edited copies of indexed ones) moved into the "
             f"folder. The run from scratch reads all {args.docs + args.new:,}; the incremental run only the "
             f"new ones. Both print the same {pairs} pairs, byte for byte (checked every repetition).", "",
             "| run | median wall s | median CPU s | share of the full run (wall / CPU) |", "|---|---|---|---|",
             f"| from scratch, {args.docs + args.new:,} documents | {med['full'][0]:.2f} | {med['full'][1]:.2f} "
             f"| 100% |",
             f"| incremental, +{args.new:,} documents | {med['incremental'][0]:.2f} | {med['incremental'][1]:.2f} "
             f"| {100 * med['incremental'][0] / med['full'][0]:.1f}% / "
             f"{100 * med['incremental'][1] / med['full'][1]:.1f}% |",
             *(f"| floor: {label} | {med[name][0]:.2f} | {med[name][1]:.2f} | "
               f"{100 * med[name][0] / med['full'][0]:.1f}% / {100 * med[name][1] / med['full'][1]:.1f}% |"
               for name, label in (
                   ("find", f"`find` stat-ing the {args.docs + args.new:,} files (C, no Python)"),
                   ("start-up", "`python -c 'import nearDup.cli'`"))), "",
             "The floors are what any run that notices edits must pay: a stat of every file (an edited file keeps "
             "its name and its folder's mtime, so nothing cheaper finds it) and the interpreter with numpy. Their "
             "sum is the least an incremental run can cost on this machine, whatever it does after.", "", END]
    section = "\n".join(lines)
    common.replace_section(args.out, BEGIN, END, section)
    print(section)


if __name__ == "__main__":
    main()
