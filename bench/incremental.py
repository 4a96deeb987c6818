"""The incremental index (#6, issue 23 item 4): what adding --new documents to a --docs-document index costs,
against a run from scratch over the same documents and against the floor any such run must pay.

    python bench/incremental.py [--docs 100000] [--new 1000] [--reps 3] [--compare REV] [--base-from DIR]
    python bench/incremental.py --docs 1000000 --new 10000 --reps 3 --base-from bench/out/corpora/scale-1m
    python bench/incremental.py --jsonl --docs 10000000 --new 100000 --reps 3 --scratch-reps 1

--jsonl: the base is the JSONL scale corpus of --docs records (bench/out/corpora/scale-N-jsonl, `python
bench/big.py build N`), hard-linked, not copied; the new documents are one more shard (shard-zz-new.jsonl, built
like it with seed 2, every tenth record an edited copy of a base record). The index copy of each repetition is
hard-linked too (nearDup replaces files, never writes into one: checked after every run), and --scratch-reps
bounds the runs from scratch (200 s at 10M).

The base corpus is the scale corpus (corpora.build_scale; --base-from copies one built already, such as
bench/out/corpora/scale-1m, instead of generating it), the new documents another scale corpus (seed 2), a tenth of
them edited copies of base documents, so the incremental run finds new duplicates. Per repetition: a run from
scratch over base + new (into a fresh work dir), an incremental run on a fresh copy of the base index with the new
documents moved into the folder (cron's situation) for this checkout and (--compare REV) for that commit's nearDup,
one after the other, this checkout's incremental run adding only the first hundredth of the new documents (what
does not grow with them), and the floors: find(1) stat-ing every file and the interpreter importing nearDup's CLI.
The full incremental runs' stdout must be byte-identical, or the benchmark fails. Medians of wall and CPU
seconds (user + sys of the process tree), the tree's peak RSS, the index's disk per document, and the CPU the rest
of the machine used meanwhile are reported; the section between the markers in bench/RESULTS.md (the 1M one from
1,000,000 documents) is replaced.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "incremental")
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import peers  # noqa: E402

import nearDup  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402

SECTIONS = {False: ("<!-- incremental: bench/incremental.py -->", "<!-- /incremental -->"),
            True: ("<!-- index at 1M: bench/incremental.py -->", "<!-- /index at 1M -->")}


def jsonl_section(docs: int) -> tuple[str, str]:
    """The markers of the --jsonl section for an index of `docs` records (one section a size)."""
    return (f"<!-- index of JSONL, {docs:,}: bench/incremental.py --jsonl -->", f"<!-- /index of JSONL, {docs:,} -->")
MB = 1 << 20


def measured(cmd: list[str], env: dict | None = None) -> tuple[dict, bytes]:
    """({wall, cpu, peak (tree RSS bytes), others (CPU s of the rest of the machine)}, stdout) of one process."""
    child = peers.Child(cmd, subprocess.PIPE, env)
    out, err = child.proc.communicate()
    m = child.ended()
    if child.proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed: {err.decode(errors='replace')[-2000:]}")
    return {"wall": m["wall"], "cpu": m["utime"] + m["stime"], "peak": m["tree_peak"],
            "others": m["others_cpu_s"]}, out


def neardup(args: list[str], env: dict | None = None) -> tuple[dict, bytes]:
    return measured([sys.executable, "-m", "nearDup", *args], env)


def floors(docs: str) -> dict:
    """What any run that checks every file must pay, measured the same way: find(1) stat-ing every file (size,
    mtime, inode) in C, and the interpreter with nearDup's CLI imported."""
    return {"find": measured(["find", docs, "-type", "f", "-printf", "%s %T@ %i\n"])[0],
            "start-up": measured([sys.executable, "-c", "import nearDup.cli"])[0]}


def disk(folder: str) -> dict[str, int]:
    """Bytes of the files below folder by top folder (each file once, however many hard links name it)."""
    seen, out = set(), {}
    for top, _, names in os.walk(folder):
        part = os.path.relpath(top, folder).split(os.sep)[0].replace(".", "manifest and lock")
        for name in names:
            st = os.stat(os.path.join(top, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                out[part] = out.get(part, 0) + st.st_size
    return out


def build(n_docs: int, n_new: int, base_from: str | None = None) -> tuple[str, str]:
    """The base corpus folder and the folder of new documents (built once, kept in bench/out/incremental; the base
    copied from base_from, a scale corpus of n_docs documents and seed 1, if given: the same files)."""
    base = os.path.join(OUT, f"base-{n_docs}")
    if not os.path.exists(os.path.join(base, "docs")):
        if base_from:
            with open(os.path.join(base_from, "meta.json")) as f:
                meta = json.load(f)
            if (meta.get("kind"), meta.get("docs"), meta.get("seed")) != ("scale", n_docs, 1):
                sys.exit(f"{base_from}: not a scale corpus of {n_docs} documents, seed 1")
            shutil.rmtree(base + ".tmp", ignore_errors=True)
            os.makedirs(OUT, exist_ok=True)  # (cp does not make the parent)
            subprocess.run(["cp", "-r", base_from, base + ".tmp"], check=True)  # the benchmark moves files in it
            os.rename(base + ".tmp", base)
        else:
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


def few_of(new: str, jsonl: bool) -> tuple[str, int]:
    """The first hundredth of the new documents (at least one), made once next to them: a folder of hard links
    to the first files in path order, or a shard of the first records (shard-zz-few.jsonl, next to the new shard:
    the base's glob matches it). Its incremental run measures the part of a run's cost that does not grow with the
    new documents."""
    few = os.path.join(os.path.dirname(new), "shard-zz-few.jsonl") if jsonl else new.rstrip(os.sep) + "-few"
    if jsonl:
        with open(new, "rb") as f:
            total = sum(1 for _ in f)
        count = max(1, total // 100)
        if not os.path.exists(few):
            with open(new, "rb") as f, open(few + ".tmp", "wb") as out:
                out.writelines(line for _, line in zip(range(count), f))
            os.rename(few + ".tmp", few)
        return few, count
    names = sorted(os.path.relpath(os.path.join(top, name), new) for top, _, names in os.walk(new) for name in names)
    count = max(1, len(names) // 100)
    if not os.path.exists(few):
        shutil.rmtree(few + ".tmp", ignore_errors=True)
        for name in names[:count]:
            os.makedirs(os.path.dirname(os.path.join(few + ".tmp", name)), exist_ok=True)
            os.link(os.path.join(new, name), os.path.join(few + ".tmp", name))
        os.rename(few + ".tmp", few)
    return few, count


def build_jsonl(n_docs: int, n_new: int) -> tuple[str, str]:
    """The base folder (hard links of the shards of bench/out/corpora/scale-N-jsonl) and the new shard's path (a
    JSONL scale corpus of n_new records, seed 2, every tenth record an edited copy of a base record), both made
    once in bench/out/incremental."""
    import big
    corpus = big.corpus_dir(os.path.join(HERE, "out", "corpora"), n_docs)
    if not os.path.exists(os.path.join(corpus, "meta.json")):
        sys.exit(f"{corpus}: build it first: python bench/big.py build {n_docs}")
    base = os.path.join(OUT, f"jsonl-base-{n_docs}")
    if not os.path.exists(base):
        os.makedirs(base + ".tmp", exist_ok=True)
        for name in sorted(os.listdir(corpus)):
            if name.startswith("shard-") and not os.path.exists(os.path.join(base + ".tmp", name)):
                os.link(os.path.join(corpus, name), os.path.join(base + ".tmp", name))
        os.rename(base + ".tmp", base)
    new = os.path.join(OUT, f"jsonl-new-{n_new}", "shard-zz-new.jsonl")
    if not os.path.exists(new):
        tmp = os.path.join(OUT, f"jsonl-new-{n_new}.tmp")
        big.build(n_new, tmp, seed=2)
        rng = random.Random(3)
        vocab, _ = corpora.imdb_vocabulary()
        with open(os.path.join(base, "shard-00000.jsonl"), "rb") as f:
            originals = [json.loads(line)["text"] for line in f]
        lines = []
        for shard in sorted(n for n in os.listdir(tmp) if n.startswith("shard-")):
            with open(os.path.join(tmp, shard), "rb") as f:
                for line in f:
                    record = json.loads(line)
                    if len(lines) % 10 == 0:  # an edited copy of a base record: a new near-duplicate
                        record["text"] = corpora.edit_words(rng.choice(originals), 0.02, rng, vocab)
                    lines.append(json.dumps({"id": f"new-{record['id']}", "text": record["text"]}) + "\n")
        os.makedirs(os.path.dirname(new), exist_ok=True)
        with open(new + ".tmp", "w") as f:
            f.writelines(lines)
        os.rename(new + ".tmp", new)
        shutil.rmtree(tmp)
    return base, new


def files_state(folder: str) -> list[tuple]:
    """(path, size, mtime_ns, inode) of every file below folder: what a run on a hard-linked copy must not change."""
    return sorted((os.path.relpath(os.path.join(top, name), folder), st.st_size, st.st_mtime_ns, st.st_ino)
                  for top, _, names in os.walk(folder) for name in names
                  for st in [os.stat(os.path.join(top, name))])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=1_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compare", metavar="REV", help="also time the incremental run of this commit's nearDup")
    ap.add_argument("--base-from", metavar="DIR", help="copy the base corpus (DIR/docs) from a scale corpus of "
                                                      "--docs documents built already instead of generating it")
    ap.add_argument("--jsonl", action="store_true", help="JSONL shards (see above)")
    ap.add_argument("--scratch-reps", type=int, help="runs from scratch (default: --reps)")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    scratch_reps = args.reps if args.scratch_reps is None else args.scratch_reps
    args.base_from = args.base_from and os.path.abspath(args.base_from)  # (the benchmark changes folder)
    started = time.time()
    load_before = os.getloadavg()[0]
    docs, new = build_jsonl(args.docs, args.new) if args.jsonl else build(args.docs, args.new, args.base_from)
    inputs = ["--jsonl", os.path.join(docs, "shard-*.jsonl")] if args.jsonl else [docs]
    os.chdir(OUT)  # not a checkout: `python -m` puts the working folder first on the path, before --compare's copy
    bench_run.compile_package(os.path.dirname(nearDup.__file__))  # as installed: see compile_package
    sides = {"this": None}
    if args.compare:
        source, sha = bench_run.neardup_snapshot(args.compare)
        sides[sha[:12]] = peers.neardup_env(source)
    moved = os.path.join(docs, os.path.basename(new) if args.jsonl else "zz-new")
    few, few_docs = few_of(new, args.jsonl)
    moved_few = os.path.join(docs, os.path.basename(few) if args.jsonl else "zz-few")
    for path, there in ((new, moved), (few, moved_few)):
        if os.path.exists(there):  # left by an interrupted benchmark
            os.rename(there, path)
    prefix = "jsonl-" if args.jsonl else ""  # (the two modes' indexes side by side)
    base = {}
    for side, env in sides.items():  # each side's own index of the base documents
        index = os.path.join(OUT, f"{prefix}index-{side}")
        shutil.rmtree(index, ignore_errors=True)
        base[side] = neardup(["run", *inputs, "--index", index, "-q"], env)[0]
        print(f"{side}: base index of {args.docs} documents: {base[side]['wall']:.1f} s wall, "
              f"{base[side]['cpu']:.1f} s CPU", file=sys.stderr)
    runs: dict[str, list[dict]] = {name: [] for name in ("full", *sides, "few", "find", "start-up")}
    sizes: dict[str, int] = {}
    printed: list[tuple[str, bytes]] = []  # (side, stdout) of the incremental runs, to compare with a scratch run's
    scratch = os.path.join(OUT, "scratch")

    def from_scratch() -> bytes:
        shutil.rmtree(scratch, ignore_errors=True)
        m, out = neardup(["-w", scratch, "run", *inputs])
        runs["full"].append(m)
        shutil.rmtree(scratch, ignore_errors=True)
        return out

    def index_copy(side: str) -> tuple[str, str]:
        """(a fresh copy of side's base index, the original)"""
        copy = os.path.join(OUT, f"{prefix}index-copy")
        shutil.rmtree(copy, ignore_errors=True)
        original = os.path.join(OUT, f"{prefix}index-{side}")
        if args.jsonl:  # 17 GB at 10M: hard links (checked below: the run replaced files, never wrote into one)
            subprocess.run(["cp", "-al", original, copy], check=True)
        else:
            shutil.copytree(original, copy)
        return copy, original

    expected, few_pairs = None, 0
    for rep in range(args.reps):
        os.rename(new, moved)
        try:
            # JSONL: the runs from scratch come last, once the indexes are deleted (10M: 17 GB of disk each)
            if not args.jsonl and rep < max(scratch_reps, 1):  # (at least once: what every run must print)
                expected = from_scratch()
            for side, env in (sides.items() if rep % 2 == 0 else reversed(sides.items())):  # A B, B A, ...
                before = files_state(os.path.join(OUT, f"{prefix}index-{side}")) if args.jsonl else None
                copy, original = index_copy(side)
                m, got = neardup(["run", *inputs, "--index", copy], env)
                runs[side].append(m)
                printed.append((side, got))
                if args.jsonl and files_state(original) != before:
                    sys.exit(f"{side}: the run on a hard-linked copy of the index changed the original's files")
                if side == "this":
                    sizes = disk(copy)
                    if neardup(["run", *inputs, "--index", copy, "--new-only"])[1]:  # reported already: nothing new
                        sys.exit("a second --new-only run reported pairs again")
            # the same run adding only the first hundredth of the new documents: what does not grow with them
            os.rename(moved, new)
            os.rename(few, moved_few)
            try:
                m, out = neardup(["run", *inputs, "--index", index_copy("this")[0]])
                runs["few"].append(m)
                few_pairs = len(out.splitlines())
                if few_docs >= 100 and (b"\tnew-" if args.jsonl else b"zz-few") not in out:  # (a tenth are copies)
                    sys.exit("the run adding the first hundredth of the new documents paired none of them")
            finally:
                os.rename(moved_few, few)
                os.rename(new, moved)
            for name, m in floors(docs).items():
                runs[name].append(m)
            if args.jsonl and rep == args.reps - 1:
                for side in (*sides, "copy"):
                    shutil.rmtree(os.path.join(OUT, f"{prefix}index-{side}"), ignore_errors=True)
                for _ in range(max(scratch_reps, 1)):
                    expected = from_scratch()
        finally:
            os.rename(moved, new)
        if expected is not None:  # (JSONL: after the last repetition)
            for side, got in printed:
                if got != expected:
                    sys.exit(f"{side}: the incremental run's result differs from the run from scratch")
            printed.clear()
        print(f"rep {rep + 1}: " + "; ".join(f"{name} {v[-1]['wall']:.2f} s wall / {v[-1]['cpu']:.2f} s CPU"
                                             for name, v in runs.items() if v) +
              (f"; {len(expected.splitlines())} pairs, identical" if expected is not None else ""), file=sys.stderr)
    assert expected is not None
    med = {name: {k: statistics.median(m[k] for m in v) for k in v[0]} for name, v in runs.items()}
    report(args, med, base, sizes, len(expected.splitlines()), load_before, time.time() - started, runs["full"],
           few_docs, few_pairs)


def report(args, med: dict, base: dict, sizes: dict, pairs: int, load_before: float, took: float,
           runs_full: list, few_docs: int, few_pairs: int) -> None:
    total = args.docs + args.new
    big = args.docs >= 1_000_000
    begin, end = jsonl_section(args.docs) if args.jsonl else SECTIONS[big]
    floor = med["find"]["cpu"] + med["start-up"]["cpu"]
    per_new = med["full"]["cpu"] / total * args.new  # what the new documents cost in a run from scratch
    marginal = (med["this"]["cpu"] - med["few"]["cpu"]) / max(1, args.new - few_docs)  # CPU s a new document
    sides = [name for name in med if name not in ("full", "few", "find", "start-up")]
    if args.jsonl:
        import big
        with open(os.path.join(big.corpus_dir(os.path.join(HERE, "out", "corpora"), args.docs), "meta.json")) as f:
            average = json.load(f)["bytes"] / args.docs
        files = len(os.listdir(os.path.join(OUT, f"jsonl-base-{args.docs}"))) + 1
    else:
        average = peers.corpus_size(os.path.join(OUT, f"base-{args.docs}", "docs"))[1] / args.docs
        files = total
    title = (f"## The incremental index of JSONL shards at {args.docs:,} records (issue 23, item 4)" if args.jsonl
             else "## The incremental index at 1M documents (issue 23, item 4)" if big
             else "## Incremental index: adding documents to an index")
    command = (f"`python bench/incremental.py --docs {args.docs} --new {args.new} --reps {args.reps}"
               + (f" --compare {args.compare}" if args.compare else "")
               + (f" --base-from {os.path.relpath(args.base_from, os.path.dirname(HERE))}" if args.base_from else "")
               + (" --jsonl" if args.jsonl else "")
               + (f" --scratch-reps {args.scratch_reps}" if args.scratch_reps is not None else "")
               + "`")
    lines = [begin, "", title, "",
             f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; {command}; load average {load_before:.2f} at the start and "
             f"{os.getloadavg()[0]:.2f} at the end, {took / 60:.0f} min in all.", "",
             f"An index of {args.docs:,} scale documents{' in JSONL shards of 100,000' if args.jsonl else ''} "
             f"(built in {base['this']['wall']:.1f} s wall, "
             f"{base['this']['cpu']:.1f} s CPU), then {args.new:,} new documents (a tenth of them edited copies of "
             f"indexed ones) moved into the folder{' as one more shard' if args.jsonl else ''}. The run from scratch "
             f"reads all {total:,}; the incremental run only the new ones. Every run printed the same {pairs} "
             f"pairs, byte for byte (checked every repetition). Medians of {args.reps} repetitions"
             f"{f' ({len(runs_full)} from scratch)' if len(runs_full) != args.reps else ''}, the runs of a "
             f"repetition one after the other "
             f"(sides alternating); `others`: the CPU seconds the rest of this shared machine used meanwhile.", "",
             "| run | wall s | CPU s | CPU / floor | peak RSS MB (tree) | others CPU s |", "|---|---|---|---|---|---|",
             f"| from scratch, {total:,} documents | {med['full']['wall']:.2f} | {med['full']['cpu']:.2f} | "
             f"{med['full']['cpu'] / floor:.1f} | {med['full']['peak'] / MB:.0f} | {med['full']['others']:.1f} |",
             *(f"| incremental, +{args.new:,} documents ({'this commit' if side == 'this' else side}) | "
               f"{med[side]['wall']:.2f} | {med[side]['cpu']:.2f} | {med[side]['cpu'] / floor:.1f} | "
               f"{med[side]['peak'] / MB:.0f} | {med[side]['others']:.1f} |" for side in sides),
             f"| incremental, +{few_docs:,} documents, the first hundredth of the new ones (this commit) | "
             f"{med['few']['wall']:.2f} | {med['few']['cpu']:.2f} | {med['few']['cpu'] / floor:.1f} | "
             f"{med['few']['peak'] / MB:.0f} | {med['few']['others']:.1f} |",
             *(f"| floor: {label} | {med[name]['wall']:.2f} | {med[name]['cpu']:.2f} | "
               f"{med[name]['cpu'] / floor:.2f} | {med[name]['peak'] / MB:.0f} | {med[name]['others']:.1f} |"
               for name, label in (("find", f"`find` stat-ing the {files:,} files (C, no Python)"),
                                   ("start-up", "`python -c 'import nearDup.cli'`"))), "",
             f"The floors are what any run that notices edits must pay: a stat of every file (an edited file keeps "
             f"its name and its folder's mtime, so nothing cheaper finds it) and the interpreter with numpy; their "
             f"sum here is {floor:.2f} CPU s. Issue 23's target for the incremental run is at most twice that plus "
             f"time proportional to the new documents; the run from scratch spends {per_new:.2f} CPU s on "
             f"{args.new:,} documents ({args.new:,} / {total:,} of its CPU), so the target is about "
             f"{2 * floor + per_new:.2f} CPU s, and this commit's incremental run took "
             f"{med['this']['cpu']:.2f} ({med['this']['cpu'] / (2 * floor + per_new):.2f}x the target).", "",
             f"The run that adds only the first {few_docs:,} of them shows the two parts of that cost: what does not "
             f"grow with the new documents, {med['few']['cpu']:.2f} CPU s (a run that still lists every pair of the "
             f"index: {few_pairs} of them), against twice the floor, {2 * floor:.2f}; and what does, "
             f"({med['this']['cpu']:.2f} - {med['few']['cpu']:.2f}) / ({args.new:,} - {few_docs:,}) = "
             f"{marginal * 1e6:.1f} us a new document, against {med['full']['cpu'] / total * 1e6:.1f} us a "
             f"document in the run from scratch.", "",
             f"Disk of the index after the incremental run: {sum(sizes.values()) / total:,.0f} bytes per document "
             f"({sum(sizes.values()) / MB:,.0f} MB; "
             + ", ".join(f"{part} {n / total:,.0f}" for part, n in sorted(sizes.items(), key=lambda kv: -kv[1])
                         if n / total >= 1) + " bytes per document); the documents average "
             f"{average:,.0f} bytes. "
             f"Memory: the incremental run's peak RSS over its process tree, "
             f"{med['this']['peak'] / MB:.0f} MB ({med['this']['peak'] / total:,.0f} bytes per indexed document).",
             "", end]
    section = "\n".join(lines)
    common.replace_section(args.out, begin, end, section)
    print(section)


if __name__ == "__main__":
    main()
