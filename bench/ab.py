"""A/B of two commits of nearDup on one corpus: the way to show what a change of nearDup alone is worth on this
shared machine, whose speed drifts by a third within an hour (so two separate benchmark runs cannot).

    python bench/ab.py REV_A REV_B [--corpus edited] [--jobs 1] [--reps 9]

Both commits are exported (bench/run.py's snapshots) and run as whole `neardup run DOCS --threshold 0.8
--num-perm 128 --bands 9 --rows 13 -w <fresh dir> --jobs J` processes, alternating A, B, A, B, ... so that the
machine's drift hits both alike. Reports the median and minimum CPU seconds (user + sys of the process tree) and
the median wall seconds of each, and the change of the median CPU. Fails if the two commits print different
stdout. The corpus is one built by bench/run.py in bench/out/corpora/.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--corpus", default="edited", help="a corpus folder name under bench/out/corpora/")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    docs = os.path.join(HERE, "out", "corpora", args.corpus, "docs")
    if not os.path.isdir(docs):
        raise SystemExit(f"{docs}: no such corpus; build it with python bench/run.py first")
    sides = {}
    for label, rev in (("A", args.rev_a), ("B", args.rev_b)):
        source, sha = bench_run.neardup_snapshot(rev)
        sides[label] = {"sha": sha, "env": peers.neardup_env(source), "runs": [], "stdout": None}
    peers.warm_cache(docs)
    parent = tempfile.mkdtemp(prefix="neardup-ab-")
    try:
        for _rep in range(args.reps):
            for label, side in sides.items():
                work = os.path.join(parent, label)
                shutil.rmtree(work, ignore_errors=True)
                cmd = ["neardup", "run", docs, "--threshold", str(common.THRESHOLD), "--num-perm",
                       str(common.NUM_PERM), "--bands", str(common.BANDS), "--rows", str(common.ROWS), "-w", work,
                       "--jobs", str(args.jobs)]
                wall, cpu, out = common.timed(cmd, side["env"])
                side["runs"].append((wall, cpu))
                side["stdout"] = side["stdout"] or hashlib.sha256(out).hexdigest()
                if hashlib.sha256(out).hexdigest() != side["stdout"] or side["stdout"] != sides["A"]["stdout"]:
                    raise SystemExit(f"{label} ({side['sha'][:12]}) printed other pairs than A did")
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    cpu_median = {}
    for label, side in sides.items():
        walls, cpus = [w for w, _ in side["runs"]], [c for _, c in side["runs"]]
        cpu_median[label] = statistics.median(cpus)
        print(f"{label} {side['sha'][:12]}: CPU median {cpu_median[label]:.3f} s (min {min(cpus):.3f}), wall median "
              f"{statistics.median(walls):.3f} s; {args.reps} runs, --jobs {args.jobs}, {args.corpus}")
    print(f"B - A: {100 * (cpu_median['B'] / cpu_median['A'] - 1):+.1f}% CPU (median); stdout identical")


if __name__ == "__main__":
    main()
