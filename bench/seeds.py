"""Recall against exact-Jaccard ground truth over several seeds, for every tool at the same b and r.

    python bench/seeds.py [--corpus edited] [--seeds 1 2 3 ...] [--out bench/out/seeds.json]

One run of a MinHash LSH pipeline finds a pair of Jaccard s with probability 1 - (1 - s^r)^b; with b = 9, r = 13
that is ~0.5 at s = 0.82, so on a corpus whose true pairs sit near the threshold a single seed's recall is noisy.
This runs each tool with every seed (nearDup: `--seed S` on one work dir, so the shingles are reused and the
signature stage onwards recomputed; nearDup also with `--minhash permutation`; datasketch: MinHash(seed=S);
rensa: RMinHash.from_token_sets(..., seed=S)) and reports each tool's mean recall, its standard deviation and
range over the seeds. Only recall is measured here (no timings): the peers shingle once per process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402


def neardup_pairs(docs: str, work: str, seed: int, method: str) -> set:
    cmd = ["neardup", "run", docs, "--threshold", str(common.THRESHOLD), "--num-perm", str(common.NUM_PERM),
           "--bands", str(common.BANDS), "--rows", str(common.ROWS), "-w", work, "--seed", str(seed),
           "--minhash", method]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
    prefix = docs.rstrip("/") + "/"
    pairs = set()
    for line in out.splitlines():
        _, a, b = line.split("\t")
        a, b = a.removeprefix(prefix), b.removeprefix(prefix)
        pairs.add((min(a, b), max(a, b)))
    return pairs


def peer_pairs(tool: str, ids: list[str], sets: list[set], keep: list[int], seed: int) -> set:
    """The verified pairs of datasketch or rensa (MinHash LSH, b x r banding, exact Jaccard) with this seed."""
    candidates = set()
    if tool == "datasketch":
        from datasketch import MinHash, MinHashLSH

        first = MinHash(num_perm=common.NUM_PERM, seed=seed)
        mhs = {}
        for i in keep:
            m = MinHash(num_perm=common.NUM_PERM, seed=seed, permutations=first.permutations, scheme=first.scheme)
            m.update_batch(list(sets[i]))
            mhs[i] = m
        lsh = MinHashLSH(threshold=common.THRESHOLD, num_perm=common.NUM_PERM, params=(common.BANDS, common.ROWS))
        for i in keep:
            lsh.insert(i, mhs[i])
        for i in keep:
            candidates.update((min(i, j), max(i, j)) for j in lsh.query(mhs[i]) if j != i)
    else:
        from rensa import RMinHash, RMinHashLSH

        num_perm = common.BANDS * common.ROWS
        mhs = RMinHash.from_token_sets([list(sets[i]) for i in keep], num_perm, seed)
        lsh = RMinHashLSH(common.THRESHOLD, num_perm, common.BANDS)
        lsh.insert_many(mhs)
        for qi, found in enumerate(lsh.query_all(mhs)):
            i = keep[qi]
            candidates.update((min(i, keep[k]), max(i, keep[k])) for k in found if keep[k] != i)
    return {(min(ids[i], ids[j]), max(ids[i], ids[j])) for i, j in candidates
            if common.jaccard(sets[i], sets[j]) >= common.THRESHOLD}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="edited", help="a corpus built by run.py under bench/out/corpora/")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "seeds.json"))
    args = ap.parse_args(argv)
    root = os.path.join(HERE, "out", "corpora", args.corpus)
    docs = os.path.join(root, "docs")
    truth = set(common.read_pairs(os.path.join(root, "truth.tsv")))
    recall = {}
    with tempfile.TemporaryDirectory(prefix="neardup-seeds-") as tmp:
        for method in ("oph", "permutation"):
            tool = "nearDup" if method == "oph" else "nearDup --minhash permutation"
            recall[tool] = [len(neardup_pairs(docs, os.path.join(tmp, method), s, method) & truth) / len(truth)
                            for s in args.seeds]
            print(tool, recall[tool], file=sys.stderr, flush=True)
    files = common.list_corpus(docs)
    ids = [i for i, _ in files]
    sets = [common.shingles(common.read_text(p)) for _, p in files]
    keep = [i for i, s in enumerate(sets) if s]
    for tool in ("rensa", "datasketch"):
        recall[tool] = [len(peer_pairs(tool, ids, sets, keep, s) & truth) / len(truth) for s in args.seeds]
        print(tool, recall[tool], file=sys.stderr, flush=True)
    summary = {tool: {"seeds": args.seeds, "recall": r, "mean": statistics.mean(r), "stdev": statistics.stdev(r),
                      "min": min(r), "max": max(r)} for tool, r in recall.items()}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"corpus": args.corpus, "truth_pairs": len(truth), "tools": summary}, f, indent=1)
    print("| tool | mean recall | std dev | min - max | seeds |\n|---|---|---|---|---|")
    for tool, s in summary.items():
        print(f"| {tool} | {s['mean']:.4f} | {s['stdev']:.4f} | {s['min']:.4f} - {s['max']:.4f} | "
              f"{len(s['seeds'])} ({s['seeds'][0]}-{s['seeds'][-1]}) |")


if __name__ == "__main__":
    main()
