"""Build the benchmark corpora (folders of files) into a destination folder given on the command line.

    python bench/corpora.py imdb   DEST [--limit N]
    python bench/corpora.py edited DEST [--docs 20000] [--copies-frac 0.1] [--seed 1]
    python bench/corpora.py scale  N DEST [--seed 1]

Every corpus is laid out the same way:

    DEST/docs/...        the documents, one file each (this folder is what the tools are run on)
    DEST/meta.json       kind, parameters, number of documents, total bytes
    DEST/injected.tsv    (edited, scale) the injected near-duplicate pairs: a <TAB> b <TAB> edit rate <TAB> exact
                         Jaccard of their word 5-shingles (common.py)

Ids (in injected.tsv and in every pair file of the harness) are paths relative to DEST/docs, with "/".

- imdb: /work/shared/corpora/imdb50k.jsonl.gz, each record {"id", "text"} written to docs/<id>.
- edited: base documents of 2-6 KB cut from the stream of consecutive imdb reviews (a review ends where the
  document's drawn size is reached, at a word boundary, and the rest of it starts the next document), plus ~10%
  edited copies of random base documents at word-edit rates 1/5/10/20% (each whitespace word is, with that
  probability, substituted by / followed by a random imdb word, or deleted). Deterministic for a seed.
- scale N: N documents of ~1 KB of words drawn independently from the imdb word-frequency distribution (top 50k
  words), ~1% of them edited copies (word-edit rates 0.5/1/2/4%) of earlier documents. Files go into subfolders
  of 1000 files each (docs/0000/000000.txt ...).
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import random
import re
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

IMDB = "/work/shared/corpora/imdb50k.jsonl.gz"
WORD = re.compile(r"\w+")
EDITED_RATES = (0.01, 0.05, 0.10, 0.20)
SCALE_RATES = (0.005, 0.01, 0.02, 0.04)


def imdb_records(limit: int | None = None):
    with gzip.open(IMDB, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            yield json.loads(line)


def imdb_vocabulary(size: int = 50_000, records: int = 20_000) -> tuple[list[str], np.ndarray]:
    """The `size` most frequent lower-cased \\w+ words of the first `records` imdb reviews, with their frequencies."""
    counts = collections.Counter()
    for rec in imdb_records(records):
        counts.update(WORD.findall(rec["text"].lower()))
    common = counts.most_common(size)
    words = [w for w, _ in common]
    freq = np.array([c for _, c in common], dtype=np.float64)
    return words, freq / freq.sum()


def edit_words(text: str, rate: float, rng: random.Random, vocab: list[str]) -> str:
    """Each whitespace word is, with probability `rate`, substituted, deleted, or followed by an inserted word."""
    out = []
    for w in text.split():
        if rng.random() < rate:
            op = rng.randrange(3)
            if op == 0:
                out.append(rng.choice(vocab))
            elif op == 1:
                continue
            else:
                out.append(w)
                out.append(rng.choice(vocab))
        else:
            out.append(w)
    return " ".join(out)


def _fresh(dest: str) -> str:
    docs = os.path.join(dest, "docs")
    if os.path.exists(docs):
        shutil.rmtree(docs)
    os.makedirs(docs)
    return docs


def _write(docs: str, rel: str, text: str) -> int:
    data = text.encode("utf-8")
    path = os.path.join(docs, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def _finish(dest: str, meta: dict, injected: list[tuple[str, str, float]] | None) -> dict:
    if injected is not None:
        docs = os.path.join(dest, "docs")
        with open(os.path.join(dest, "injected.tsv"), "w") as f:
            for a, b, rate in injected:
                a, b = min(a, b), max(a, b)
                j = common.jaccard(*(common.shingles(common.read_text(os.path.join(docs, x))) for x in (a, b)))
                f.write(f"{a}\t{b}\t{rate}\t{j:.4f}\n")
    with open(os.path.join(dest, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def build_imdb(dest: str, limit: int | None = None) -> dict:
    docs = _fresh(dest)
    n = total = 0
    for rec in imdb_records(limit):
        total += _write(docs, rec["id"], rec["text"])
        n += 1
    return _finish(dest, {"kind": "imdb", "limit": limit, "docs": n, "bytes": total}, None)


def build_edited(dest: str, n_docs: int = 20_000, copies_frac: float = 0.10, seed: int = 1) -> dict:
    rng = random.Random(seed)
    n_copies = int(round(n_docs * copies_frac))
    n_base = n_docs - n_copies
    vocab, _ = imdb_vocabulary()
    # base documents: the stream of consecutive reviews cut into pieces of 2-6 KB (sizes drawn triangular with
    # mode 2 KB, mean ~3.4 KB, so that 18,000 of them fit in one pass over the 65 MB of imdb text)
    bases: list[str] = []
    buf: list[str] = []
    buf_len = 0
    target = 0
    passes = 0

    def draw_target() -> int:
        return int(rng.triangular(2048, 6144, 2048))

    target = draw_target()
    while len(bases) < n_base:
        passes += 1
        for rec in imdb_records():
            for w in rec["text"].split():
                if buf_len + len(w) + 1 > target and buf_len >= 2048:
                    bases.append(" ".join(buf))
                    buf, buf_len = [], 0
                    target = draw_target()
                    if len(bases) >= n_base:
                        break
                buf.append(w)
                buf_len += len(w.encode("utf-8")) + 1
            if len(bases) >= n_base:
                break
            buf.append("\n\n")  # review boundary: a paragraph break
            buf_len += 2
    names = [f"doc_{i:06d}.txt" for i in range(n_docs)]
    rng.shuffle(names)  # copies are not next to their originals in listing order
    docs = _fresh(dest)
    total = 0
    for i, text in enumerate(bases):
        total += _write(docs, names[i], text)
    injected = []
    originals = rng.sample(range(n_base), n_copies)
    for j, orig in enumerate(originals):
        rate = EDITED_RATES[j % len(EDITED_RATES)]
        copy = edit_words(bases[orig], rate, rng, vocab)
        name = names[n_base + j]
        total += _write(docs, name, copy)
        injected.append((names[orig], name, rate))
    meta = {"kind": "edited", "docs": n_docs, "base_docs": n_base, "copies": n_copies, "rates": EDITED_RATES,
            "seed": seed, "bytes": total, "imdb_passes": passes}
    return _finish(dest, meta, injected)


class Copies:
    """The edited copies of a scale corpus, decided document by document in order: with probability dup_frac a
    document is an edited copy (a word-edit rate drawn from SCALE_RATES) of one of a reservoir of earlier
    documents (the first 5,000, then each later one replaces a random one with probability 1%), else its own
    text. injected: (copied name, copy's name, rate) of every copy made; copied: the text the last document is an
    edited copy of (None: its own text)."""

    def __init__(self, rng: random.Random, vocab: list[str], dup_frac: float):
        self.rng, self.vocab, self.dup_frac = rng, vocab, dup_frac
        self.kept: list[tuple[str, str]] = []
        self.injected: list[tuple[str, str, float]] = []
        self.copied: str | None = None

    def next(self, name: str, own) -> str | None:
        """The text of the next document, named name, if it is an edited copy; else None (its own text, which
        own() gives: called only when the reservoir keeps it)."""
        rng, kept = self.rng, self.kept
        self.copied = None
        if kept and rng.random() < self.dup_frac:
            src_name, self.copied = kept[rng.randrange(len(kept))]
            rate = rng.choice(SCALE_RATES)
            self.injected.append((src_name, name, rate))
            return edit_words(self.copied, rate, rng, self.vocab)
        if len(kept) < 5000:
            kept.append((name, own()))
        elif rng.random() < 0.01:
            kept[rng.randrange(len(kept))] = (name, own())
        return None


def build_scale(dest: str, n: int, seed: int = 1, dup_frac: float = 0.01) -> dict:
    vocab, p = imdb_vocabulary()
    vocab_arr = np.array(vocab, dtype=object)
    gen = np.random.Generator(np.random.PCG64(seed))
    rng = random.Random(seed)
    docs = _fresh(dest)
    total = 0
    copies = Copies(rng, vocab, dup_frac)
    batch = 1000
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        lengths = gen.integers(150, 221, size=hi - lo)  # ~180 words ~ 1 KB
        idx = gen.choice(len(vocab), size=int(lengths.sum()), p=p)
        words = vocab_arr[idx]
        pos = 0
        sub = os.path.join(docs, f"{lo // 1000:04d}")
        os.makedirs(sub, exist_ok=True)
        for i in range(lo, hi):
            length = int(lengths[i - lo])
            name = f"{lo // 1000:04d}/{i:06d}.txt"
            own = " ".join(words[pos:pos + length])
            text = copies.next(name, lambda: own)  # noqa: B023 (called at once)
            text = own if text is None else text
            pos += length
            data = text.encode("utf-8")
            with open(os.path.join(docs, name), "wb") as f:
                f.write(data)
            total += len(data)
    return _finish(dest, {"kind": "scale", "docs": n, "seed": seed, "dup_frac": dup_frac, "rates": SCALE_RATES,
                          "bytes": total}, copies.injected)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("imdb")
    p.add_argument("dest")
    p.add_argument("--limit", type=int, help="only the first N records")
    p = sub.add_parser("edited")
    p.add_argument("dest")
    p.add_argument("--docs", type=int, default=20_000)
    p.add_argument("--copies-frac", type=float, default=0.10)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("scale")
    p.add_argument("n", type=int)
    p.add_argument("dest")
    p.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    os.makedirs(args.dest, exist_ok=True)
    if args.kind == "imdb":
        meta = build_imdb(args.dest, args.limit)
    elif args.kind == "edited":
        meta = build_edited(args.dest, args.docs, args.copies_frac, args.seed)
    else:
        meta = build_scale(args.dest, args.n, args.seed)
    print(f"{args.kind}: {meta['docs']} documents, {meta['bytes'] / 1e6:.1f} MB in {args.dest}/docs "
          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
