"""Reading document formats through the wired pipeline: files/s and MB/s per format, nearDup's overhead over the
bare extraction library, and --jobs 2 scaling (issue 20).

    python bench/formats.py [--docs 60] [--rounds 5] [--out bench/out/formats]

Fixtures: bench/extractors.py's (the first --docs BBC articles saved by LibreOffice as PDF, DOCX, ODT, by pandoc as
EPUB and HTML, and as .eml and .txt.gz; made once, reused). Per format, in alternating passes (bare, nearDup,
bare, ...) so that a shared machine's load drift falls on both:

- bare: the extraction library's own call on each file (pypdfium2's page loop, lxml's tree walk, trafilatura,
  email, gzip; for DOCX, ODT and EPUB, which nearDup reads with the standard library, nearDup's extract()
  itself), then nearDup's shingling of the texts (text.shingles.shingle_documents): the work any tool must do.
- nearDup: the shingle stage over the format's folder into a fresh work dir (`neardup -w W shingle DIR --jobs 1`,
  in process): listing, detection, hashing, the time-limit thread, the extraction cache, the shard files.
- --jobs 2: the same stage with two worker processes, the folder cut into 4 partitions (--partition-docs).

Reported: the median pass's wall time as files/s and MB/s of extracted text; the overhead of the whole stage over
bare (wall, and CPU time: user + system of this process and its children over all passes); "fmt ovh", the
overhead on the format's own cost, its ms/file beyond plain text's (the txt row: read + decode against the stage
on .txt files), which leaves out what the stage costs for any file (listing, shard files, catalog, manifest).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import extractors  # noqa: E402

from nearDup.config import ShingleParams  # noqa: E402
from nearDup.text.extract import extract  # noqa: E402
from nearDup.text.read import Document  # noqa: E402
from nearDup.text.shingles import shingle_documents  # noqa: E402


def _ours(path: str) -> str:
    return "\n".join(text for _, text in extract(path))


BARE = [("txt", lambda p: Path(p).read_text(encoding="utf-8"), "read + decode"),
        ("pdf", extractors.pdf_pypdfium2, "pypdfium2"), ("docx", _ours, "nearDup extract (stdlib)"),
        ("odt", _ours, "nearDup extract (stdlib)"), ("epub", _ours, "nearDup extract (stdlib + lxml)"),
        ("html", extractors.html_lxml, "lxml walk"), ("site_a", extractors.main_trafilatura, "trafilatura"),
        ("eml", extractors.bare_email, "stdlib email"), ("gz", extractors.bare_gzip, "gzip.decompress")]


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bare_pass(files: list[Path], fn) -> int:
    texts = [fn(str(p)) for p in files]
    docs = ((Document(str(p), t, len(t), 0, "", False), {}) for p, t in zip(files, texts))
    shingle_documents(docs, ShingleParams(), {})
    return sum(len(t.encode("utf-8")) for t in texts)


def stage_pass(folder: Path, jobs: int, partition_docs: int, *extra: str) -> None:
    from click.testing import CliRunner

    from nearDup.cli import cli
    work = Path(tempfile.mkdtemp(prefix="nd-bench-"))
    try:
        r = CliRunner().invoke(cli, ["-w", str(work / "w"), "shingle", str(folder), "--jobs", str(jobs),
                                     "--partition-docs", str(partition_docs), *extra])
        if r.exit_code != 0:
            raise SystemExit(f"{folder}: {r.output}")
    finally:
        shutil.rmtree(work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "formats"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    out = Path(args.out)
    extractors.make_fixtures(out, args.docs)
    only = set(filter(None, args.only.split(",")))
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at start; {args.docs} files a format, "
          f"median of {args.rounds} alternating passes")
    print(f"{'format':7} {'bare library':28} {'bare f/s':>9} {'nearDup f/s':>11} {'MB/s':>6} {'overhead':>8} "
          f"{'CPU ovh':>7} {'fmt ovh':>8} {'jobs 2 f/s':>10} {'x':>5}")
    base = (0.0, 0.0)
    for fmt, fn, label in BARE:
        if only and fmt not in only:
            continue
        folder = out / fmt
        if fmt == "txt":
            folder = out / "txt"
        files = sorted(folder.iterdir())[:args.docs]
        walls: dict[str, list[float]] = {"bare": [], "ours": [], "jobs2": []}
        cpus: dict[str, float] = {"bare": 0.0, "ours": 0.0, "jobs2": 0.0}
        mb = 0
        extra = ("--html", "main") if fmt == "site_a" else ()
        bare_pass(files, fn)  # warm: imports, the page cache
        stage_pass(folder, 1, 4000, *extra)
        for _ in range(args.rounds):
            for what in ("bare", "ours", "jobs2"):
                c, t = cpu(), time.perf_counter()
                if what == "bare":
                    mb = bare_pass(files, fn)
                else:
                    stage_pass(folder, 1 if what == "ours" else 2,
                               4000 if what == "ours" else max(1, len(files) // 4), *extra)
                walls[what].append(time.perf_counter() - t)
                cpus[what] += cpu() - c
        bare, ours, two = (statistics.median(walls[k]) for k in ("bare", "ours", "jobs2"))
        n = len(files)
        if fmt == "txt":  # the plain-text baseline: what the stage costs beyond read + shingle, whatever the format
            base = (bare / n, ours / n)
        # the format's own cost (its ms/file beyond plain text's), nearDup's against the bare library's
        own = (ours / n - base[1]) / (bare / n - base[0]) - 1 if fmt != "txt" else 0.0
        print(f"{fmt:7} {label:28} {n / bare:9.1f} {n / ours:11.1f} {mb / 1e6 / ours:6.2f} "
              f"{100 * (ours / bare - 1):+7.0f}% {100 * (cpus['ours'] / max(cpus['bare'], 0.01) - 1):+6.0f}% "
              f"{100 * own:+7.0f}% {n / two:10.1f} {ours / two:5.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
