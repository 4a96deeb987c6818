"""The per-shard bookkeeping every index run pays, whatever it adds: what a run of an index of many shards does
once per shard, timed alone, for this checkout and (--compare) another commit, in the same run.

    python bench/bookkeeping.py [--shards 2530] [--reps 9] [--rounds 3] [--compare d875de3]

2,530 shards is an index of 10M JSONL records (shards of 4,000 documents), which an index run checks in three
stages. A synthetic work dir of that many shards is made once, by this checkout's writers, under
bench/out/bookkeeping-N (each stage's files in their shapes, tiny but for the band digests, 32 KB a shard as at
10M: 80 MB); each side then runs in its own process (the other commit as an exported snapshot, bench/run.py) and
times the CPU seconds (user + sys of the process, time.process_time: these are milliseconds inside one process,
which common.timed's whole processes cannot isolate) of: part_done of every shard of the shingle, signature and
band stages; the band digests of every shard as copies.copy_classes reads them; collect_garbage of the stage
folders (nothing to remove); the per-shard keys of the signature and band stages; and 10 part() paths a shard.
The median of --reps within a process, then the median over --rounds processes a side, the sides alternating
(A B, B A, ...) so that the machine's drift hits both. Writes bench/RESULTS.md's section.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402

ROWS = 4000  # documents a shard
FILES = {"shingle": ("docs.npz", "values.npy", "offsets.npy"), "signature": ("npy",), "band": ("npy", "digest.npy")}
SECTION = ("<!-- bench/bookkeeping.py: begin -->", "<!-- bench/bookkeeping.py: end -->")


def shard_keys(stage: str, shards: int) -> list[str]:
    return [f"{stage[:2]}{n:030d}" for n in range(shards)]


def make(root: str, shards: int) -> None:
    """The synthetic work dir (once: a file `made` says it is complete)."""
    import numpy as np

    from nearDup.store.workdir import WorkDir

    if os.path.exists(os.path.join(root, "made")):
        return
    work = WorkDir(root)
    digest = np.random.default_rng(0).integers(0, 2**63, ROWS).astype(np.uint64)
    for stage, files in FILES.items():
        keys = shard_keys(stage, shards)
        for n in range(shards):
            for suffix in files:
                path = work.part(stage, n, suffix)
                if suffix == "digest.npy":
                    work.save_array(path, digest)
                elif suffix.endswith(".npz"):
                    work.save_table(path, {"id": np.arange(3)})
                else:
                    work.save_array(path, np.arange(16, dtype=np.uint32))
            work.mark_part_done(stage, n, keys[n], {"docs": ROWS}, files)
    open(os.path.join(root, "made"), "w").close()


def child(root: str, shards: int, reps: int) -> None:
    """Time each step reps times in this process (whichever nearDup PYTHONPATH gives); print the medians (JSON)."""
    from nearDup.config import BandParams, SignatureParams
    from nearDup.pipeline import band, copies, signature
    from nearDup.store.workdir import WorkDir

    work, numbers = WorkDir(root, create=False), list(range(shards))
    keys = {stage: shard_keys(stage, shards) for stage in FILES}
    shingle_record = types.SimpleNamespace(shard_numbers=numbers, shard_docs=[ROWS] * shards)
    records = {stage: types.SimpleNamespace(key="0" * 32, files={}, shard_numbers=numbers, next_shard=shards)
               for stage in FILES}

    def part_done():
        for stage, files in FILES.items():
            for n, key in zip(numbers, keys[stage]):
                assert work.part_done(stage, n, key, files) is not None

    def stage_keys():
        for stage, params, upstream in ((signature.STAGE, SignatureParams(), keys["shingle"]),
                                        (band.STAGE, BandParams(bands=14, rows=9, threshold=0.8), keys["signature"])):
            if hasattr(stage, "keys"):
                stage.keys(params, upstream)
            else:  # (before it: a digest a shard)
                [stage.key(params, key) for key in upstream]

    steps = {"part_done, 3 stages": part_done,
             "band digests of every shard": lambda: copies._band_digest(work, shingle_record),
             "collect_garbage": lambda: work.collect_garbage(records),
             "per-shard keys, 2 stages": stage_keys,
             "part() x 10 a shard": lambda: [work.part("band", n, "npy") for n in numbers for _ in range(10)]}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            start = time.process_time()
            step()
            times[name].append(time.process_time() - start)
    print(json.dumps({name: statistics.median(t) for name, t in times.items()}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=2530)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", help="another commit, run from an exported snapshot")
    ap.add_argument("--child", nargs=3, metavar=("ROOT", "SHARDS", "REPS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]), int(args.child[2]))
    root = os.path.join(bench_run.OUT, f"bookkeeping-{args.shards}")
    make(root, args.shards)
    sides: dict[str, dict | None] = {"this": None}
    if args.compare:
        source, sha = bench_run.neardup_snapshot(args.compare)
        sides[sha[:12]] = peers.neardup_env(source)
    load = os.getloadavg()[0]
    got: dict[str, list[dict]] = {side: [] for side in sides}
    for r in range(args.rounds):
        for side, env in (sides.items() if r % 2 == 0 else reversed(sides.items())):
            common.settle()
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", root, str(args.shards),
                                   str(args.reps)], env=env, capture_output=True, text=True, cwd="/")
            if done.returncode:
                sys.exit(f"{side}: {done.stderr[-2000:]}")
            got[side].append(json.loads(done.stdout))
    med = {side: {name: statistics.median(m[name] for m in runs) for name in runs[0]} for side, runs in got.items()}
    labels = list(sides)
    rows = ["| CPU ms | " + " | ".join(labels) + (f" | this / {labels[1]} |" if len(labels) > 1 else " |"),
            "|---" * (len(labels) + 1 + (len(labels) > 1)) + "|"]
    for name in [*med["this"], "total"]:
        values = [sum(med[side].values()) if name == "total" else med[side][name] for side in labels]
        cells = [f"{v * 1e3:.1f}" for v in values] + ([f"{values[0] / values[1]:.2f}x"] if len(values) > 1 else [])
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(rows)
    print(table)
    section = (f"{SECTION[0]}\n## The per-shard bookkeeping of an index run ({args.shards:,} shards)\n\n"
               f"`python bench/bookkeeping.py --shards {args.shards} --reps {args.reps} --rounds {args.rounds}"
               f"{' --compare ' + args.compare if args.compare else ''}`: CPU ms of each step of what an index run "
               f"does once per shard, in a synthetic work dir of {args.shards:,} shards of {ROWS:,} documents (an "
               f"index of {args.shards * ROWS / 1e6:.1f}M records); median of {args.reps} in a process, then of "
               f"{args.rounds} processes a side, the sides alternating. Load average before: {load:.2f}, after: "
               f"{os.getloadavg()[0]:.2f} (2 cores).\n\n{table}\n{SECTION[1]}")
    common.replace_section(os.path.join(HERE, "RESULTS.md"), *SECTION, section)


if __name__ == "__main__":
    main()
