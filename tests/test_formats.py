"""Document formats end to end (issue 20): a run, compare, query, the index and `neardup extract` read PDF, DOCX,
ODT, HTML, EPUB, e-mail, mbox and compressed files as text; every bad file is one warning and exit 2; a base
install says once which formats it skipped; extracted texts are cached by content hash and extractor version.

Fixtures are made at test time: by LibreOffice (soffice --headless --convert-to) and pandoc when installed, as
users' files are made, else by the hand-made writers of tests/test_extract.py; once per session.
"""
from __future__ import annotations

import bz2
import contextlib
import ctypes
import email.message
import gzip
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_extract import (
    HAS_LXML,
    HAS_PDFIUM,
    HAS_TRAFILATURA,
    W_NS,
    esc,
    make_docx,
    make_epub,
    make_odt,
    make_pdf,
    paragraphs,
)

from nearDup.cli import cli
from nearDup.cli import extract as cli_extract
from nearDup.config import ShingleParams, SourceParams
from nearDup.pipeline import compare
from nearDup.text import extract as ex
from nearDup.text import inputs, read

from conftest import REPO

needs_extra = pytest.mark.skipif(not (HAS_PDFIUM and HAS_LXML),
                                 reason="the formats extra is not installed (pip install 'nearDup[formats]')")
TEXTS = 3  # distinct texts, each saved in every format


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def pairs_of(tsv: str) -> set[tuple[str, str]]:
    return {tuple(sorted(line.split("\t")[1:3])) for line in tsv.splitlines() if line}  # type: ignore[misc]


def _soffice(src: list[Path], fmt: str, out: Path, profile: Path) -> bool:
    """Convert with LibreOffice, as a user's office suite saves a file; False if it is not installed or fails."""
    if not shutil.which("soffice"):
        return False
    done = subprocess.run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", fmt,
                           "--outdir", str(out), *map(str, src)], capture_output=True, timeout=180)
    return done.returncode == 0 and all((out / f"{p.stem}.{fmt}").exists() for p in src)


@pytest.fixture(scope="session")
def formats_corpus(tmp_path_factory) -> tuple[Path, dict[str, str], list[str]]:
    """TEXTS texts, each as .txt and in every format: (folder, {file name: its text}, how each was made)."""
    root = tmp_path_factory.mktemp("formats")
    src, folder = root / "src", root / "docs"
    src.mkdir()
    folder.mkdir()
    texts, made = {}, []
    sources = []
    for t in range(TEXTS):
        paras = paragraphs(100 + t, 6)
        text = "\n\n".join(paras)
        texts[f"t{t}"] = text
        (src / f"t{t}.txt").write_text(text + "\n", encoding="utf-8")
        shutil.copy(src / f"t{t}.txt", folder / f"t{t}.txt")
        (folder / f"t{t}.txt.gz").write_bytes(gzip.compress(text.encode()))
        (folder / f"t{t}.html.bz2").write_bytes(bz2.compress(
            ("<html><body>" + "".join(f"<p>{esc(p)}</p>" for p in paras) + "</body></html>").encode()))
        msg = email.message.EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "a@example.org", "b@example.org", "report"
        msg.set_content(text)
        (folder / f"t{t}.eml").write_bytes(bytes(msg))
        sources.append(src / f"t{t}.txt")
    for fmt in ("pdf", "docx", "odt"):
        if _soffice(sources, fmt, folder, root / "profile"):
            made.append(f"{fmt}: soffice")
            continue
        made.append(f"{fmt}: hand-made")
        for t in range(TEXTS):
            paras = texts[f"t{t}"].split("\n\n")
            if fmt == "pdf":
                (folder / f"t{t}.pdf").write_bytes(make_pdf(paras))
            else:
                (make_docx if fmt == "docx" else make_odt)(folder / f"t{t}.{fmt}", paras)
    for fmt in ("epub", "html"):
        if shutil.which("pandoc"):
            for t in range(TEXTS):
                subprocess.run(["pandoc", "-f", "markdown", "-s", "--metadata", "title=t", str(sources[t]), "-o",
                                str(folder / f"t{t}.{fmt}")], check=True, capture_output=True, timeout=60)
            made.append(f"{fmt}: pandoc")
        else:
            made.append(f"{fmt}: hand-made")
            for t in range(TEXTS):
                paras = texts[f"t{t}"].split("\n\n")
                if fmt == "epub":
                    make_epub(folder / f"t{t}.epub", paras)
                else:
                    (folder / f"t{t}.html").write_text("<html><body>" + "".join(f"<p>{esc(p)}</p>" for p in paras)
                                                       + "</body></html>", encoding="utf-8")
    return folder, texts, made


SUFFIXES = (".txt", ".txt.gz", ".html.bz2", ".eml", ".pdf", ".docx", ".odt", ".epub", ".html")


@needs_extra
def test_same_text_in_every_format_reads_as_the_plain_text(formats_corpus):
    """Exact Jaccard (compare, the sets a run stores) of each format against the .txt it was made from >= 0.95,
    and a run pairs exactly the files of the same text: 3 x C(9, 2) = 108 pairs, none across texts."""
    folder, _, made = formats_corpus
    for t in range(TEXTS):
        for suffix in SUFFIXES[1:]:
            result = compare.run(str(folder / f"t{t}.txt"), str(folder / f"t{t}{suffix}"), ShingleParams())
            assert result["jaccard"] >= 0.95, (suffix, result["jaccard"], made)
    r = invoke("run", folder, "-w", folder.parent / "w", "--jobs", "1", "-t", "0.9", "--format", "tsv")
    assert r.exit_code == 0, r.output
    expected = {tuple(sorted((str(folder / f"t{t}{a}"), str(folder / f"t{t}{b}"))))
                for t in range(TEXTS) for a, b in itertools.combinations(SUFFIXES, 2)}
    assert pairs_of(r.stdout) == expected
    shown = invoke("inspect", "-w", folder.parent / "w")
    assert (f"  formats: bzip2 {TEXTS}, DOCX {TEXTS}, e-mail {TEXTS}, EPUB {TEXTS}, gzip {TEXTS}, HTML {TEXTS}, "
            f"ODT {TEXTS}, PDF {TEXTS}, text {TEXTS}") in shown.stdout


@needs_extra
def test_formats_option_reads_only_the_formats_given(formats_corpus, tmp_path):
    folder, _, _ = formats_corpus
    r = invoke("run", folder, "-w", tmp_path / "w", "--jobs", "1", "-t", "0.9", "--format", "tsv",
               "--formats", "pdf,docx")
    assert r.exit_code == 0, r.output
    assert pairs_of(r.stdout) == {(str(folder / f"t{t}.docx"), str(folder / f"t{t}.pdf")) for t in range(TEXTS)}
    assert f"{len(SUFFIXES) * TEXTS - 2 * TEXTS} files of other formats skipped (--formats)" in r.stderr
    assert "unknown format doc" in invoke("run", folder, "--formats", "pdf,doc").output
    assert cli_extract._CHOICES == ex.FORMATS  # written out there, to keep the start of the CLI fast


def _page(article: list[str], template: int) -> str:
    """An article inside a site template: navigation, header, sidebar and footer, each longer than the article
    would make two articles under one template look alike to a reader of all visible text."""
    rng = paragraphs(900 + template, 4)
    nav = "".join(f'<li><a href="/s{i}">{w}</a></li>' for i, w in enumerate(rng[0].split()))
    return (f"<html><head><title>site {template}</title><script>var x = 'tracking code';</script></head><body>"
            f"<header><h1>Site {template}</h1><p>{rng[1]}</p></header><nav><ul>{nav}</ul></nav>"
            f"<main><article><h2>Article</h2>{''.join(f'<p>{p}</p>' for p in article)}</article></main>"
            f"<aside><p>{rng[2]}</p></aside><footer><p>{rng[3]}</p></footer></body></html>")


@pytest.mark.skipif(not HAS_TRAFILATURA, reason="--html main: the formats extra is not installed")
def test_html_main_pairs_an_article_across_templates_not_two_articles_in_one(tmp_path):
    a, b = paragraphs(31, 4), paragraphs(32, 4)
    (tmp_path / "docs").mkdir()
    for name, article, template in (("a1.html", a, 1), ("a2.html", a, 2), ("b1.html", b, 1)):
        (tmp_path / "docs" / name).write_text(_page(article, template), encoding="utf-8")
    r = invoke("run", tmp_path / "docs", "-w", tmp_path / "w", "--jobs", "1", "--html", "main", "-t", "0.8",
               "--format", "tsv")
    assert r.exit_code == 0, r.output
    docs = tmp_path / "docs"
    assert pairs_of(r.stdout) == {(str(docs / "a1.html"), str(docs / "a2.html"))}
    # what --html main is for: read with all their visible text, two articles under one template share a lot
    visible = compare.run(str(docs / "a1.html"), str(docs / "b1.html"), ShingleParams())
    assert visible["jaccard"] > 0.3


def _encrypted_pdf(plain: Path, out: Path) -> bool:
    if shutil.which("qpdf"):
        subprocess.run(["qpdf", "--encrypt", "u", "o", "256", "--", str(plain), str(out)], check=True)
        return True
    if importlib.util.find_spec("pypdf"):
        from pypdf import PdfWriter
        writer = PdfWriter(clone_from=str(plain))
        writer.encrypt("u")
        writer.write(str(out))
        return True
    return False


@needs_extra
def test_every_bad_input_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    good = paragraphs(41, 5)
    (docs / "good.txt").write_text("\n".join(good), encoding="utf-8")
    make_docx(docs / "good.docx", good)
    (docs / "plain.pdf").write_bytes(make_pdf(paragraphs(42, 2, True)))
    bad = {"scanned.pdf": "no text layer (scanned?): skipped",
           "truncated.docx": "corrupt or truncated DOCX",
           "zipcrypto.docx": "encrypted zip members: skipped",
           "bomb.docx": "expands past 1 MiB: refused",
           "bomb.txt.gz": "expands past 1 MiB: refused",
           "hang.pdf": "still extracting after 0.5 s: skipped",
           "box.mbox": "1 of 3 messages malformed, skipped"}
    (docs / "scanned.pdf").write_bytes(make_pdf(["", ""]))
    whole = (docs / "good.docx").read_bytes()
    (docs / "truncated.docx").write_bytes(whole[:len(whole) // 2])
    data = bytearray(whole)
    at = data.find(b"PK\x01\x02")
    while at >= 0:  # the "encrypted" bit of every central directory entry
        data[at + 8] |= 1
        at = data.find(b"PK\x01\x02", at + 4)
    (docs / "zipcrypto.docx").write_bytes(bytes(data))
    with zipfile.ZipFile(docs / "bomb.docx", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", f'<w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>' + "a" * (4 << 20))
    (docs / "bomb.txt.gz").write_bytes(gzip.compress(bytes(4 << 20)))
    (docs / "hang.pdf").write_bytes(make_pdf(["never read"]))
    (docs / "box.mbox").write_bytes(b"From a@b Mon Jan  1 00:00:00 2024\nFrom: a@b\nTo: c@d\nSubject: one\n\n"
                                    b"first message body\n\nFrom x Mon Jan  1 00:00:00 2024\n\nno header at all\n\n"
                                    b"From a@b Mon Jan  1 00:00:00 2024\nFrom: a@b\nSubject: three\n\nthird body\n")
    (docs / "lying.html").write_bytes('<html><head><meta charset="iso-8859-1"></head><body><p>café Straße '
                                      'naïve</p></body></html>'.encode())  # UTF-8 that says latin-1: read right
    if _encrypted_pdf(docs / "plain.pdf", docs / "secret.pdf"):
        bad["secret.pdf"] = "encrypted PDF: skipped"
    monkeypatch.setattr(read, "EXTRACT_BYTES", 1 << 20)
    monkeypatch.setattr(read, "EXTRACT_SECONDS", 0.5)
    real = ex.extract

    def hanging(path, *args, **kwargs):
        if path.endswith("hang.pdf"):
            time.sleep(5)  # in the abandoned extraction thread: the run has gone on
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ex, "extract", hanging)
    r = invoke("run", docs, "-w", tmp_path / "w", "--jobs", "1", "--format", "tsv", "--min-shingles", "1")
    assert r.exit_code == 2, r.output
    assert pairs_of(r.stdout) == {(str(docs / "good.docx"), str(docs / "good.txt"))}
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    for name, reason in bad.items():
        mine = [line for line in warnings if f"{docs / name}" in line]
        assert len(mine) == 1 and reason in mine[0], (name, mine)
    assert len(warnings) == len(bad), warnings
    shown = invoke("extract", docs / "lying.html", docs / "box.mbox")
    assert shown.stdout.split("\n") == [f"==> {docs / 'box.mbox'}#1 <==", "one", "first message body", "",
                                        f"==> {docs / 'box.mbox'}#3 <==", "three", "third body", "",
                                        f"==> {docs / 'lying.html'} <==", "café Straße naïve", ""]
    assert shown.exit_code == 2 and "1 of 3 messages malformed" in shown.stderr


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_hang_inside_c_code_is_given_up_and_its_partition_read_again_without_it(tmp_path, monkeypatch, jobs):
    """The time limit must stop a hang that no Python signal handler can interrupt: a C call with the interpreter
    lock released, as PDFium's are. The run goes on after the limit, not after the call."""
    docs = tmp_path / "docs"
    docs.mkdir()
    text = "\n".join(paragraphs(61, 4)).encode()
    for name in ("a.txt.gz", "b.txt.gz", "c.txt.gz"):  # gzip: the standard library reads it; each its own
        (docs / name).write_bytes(gzip.compress(text + name.encode()))  # content (the cache is by content)
    (docs / "hang.txt.gz").write_bytes(gzip.compress(b"never read"))
    monkeypatch.setattr(read, "EXTRACT_SECONDS", 0.3)
    calls = tmp_path / "calls"
    real = ex.extract

    def hanging(path, *args, **kwargs):
        with open(calls, "a") as f:  # appended by forked workers too
            f.write(os.path.basename(path) + "\n")
        if path.endswith("hang.txt.gz"):
            ctypes.CDLL(None).sleep(8)  # libc's sleep: C code, the interpreter lock released
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ex, "extract", hanging)
    began = time.monotonic()
    r = invoke("run", docs, "-w", tmp_path / "w", "--jobs", jobs, "--partition-docs", "2", "--format", "tsv",
               "-t", "0.5")
    assert time.monotonic() - began < 6, "waited for the hung C call"
    assert r.exit_code == 2, r.output
    assert pairs_of(r.stdout) == {(str(docs / a), str(docs / b)) for a, b in itertools.combinations(
        ("a.txt.gz", "b.txt.gz", "c.txt.gz"), 2)}
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {docs / 'hang.txt.gz'}: still extracting after 0.3 s: skipped (a hung or very "
                        "slow gzip file)"]
    extracted = calls.read_text().split()
    assert extracted.count("hang.txt.gz") == 1  # remembered as hung: not tried again when its partition is re-read
    assert extracted.count("c.txt.gz") == 2  # c shares the partition of hang (2 files a partition): read again


def test_extraction_runs_in_the_reading_thread_under_a_task_time_limit(tmp_path, monkeypatch):
    """No handoff to another thread per file (30-50 us of CPU each, up to 0.7 ms of wall time on a busy machine):
    the thread that reads a partition extracts its files, and the time limit is a deadline its caller watches."""
    for i in range(5):
        (tmp_path / f"d{i}.txt.gz").write_bytes(gzip.compress(f"document number {i}".encode()))
    items = inputs.list_items([str(tmp_path)], SourceParams()).items
    extracting: list[int] = []
    real = ex.extract

    def recorded(*args, **kwargs):
        extracting.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(ex, "extract", recorded)

    def task(_):
        return threading.get_ident(), [doc.text for _, doc in read.read_documents(items, SourceParams(), {})]

    reader, texts = read.time_limited_task(task, None)
    assert texts == [f"document number {i}" for i in range(5)]
    assert extracting == [reader] * 5 and reader != threading.get_ident()


@needs_extra
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_kill_9_of_the_main_process_while_extracting_leaves_nothing_and_resumes_to_the_same_bytes(tmp_path):
    """Task threads, the time limit and the cache's SQLite file must not change what a kill -9 of the main
    process (timeout -s KILL, the OOM killer) leaves: no worker, and a resumed run that prints the same bytes."""
    from test_robustness import _session

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(60):  # PDFs take ~1 ms each: cached; gz files are not
        paras = paragraphs(700 + i // 2, 3, True)  # two files per text: pairs
        if i % 3:
            (docs / f"d{i:03d}.pdf").write_bytes(make_pdf(paras))
        else:
            (docs / f"d{i:03d}.txt.gz").write_bytes(gzip.compress("\n".join(paras).encode()))

    def args(w):
        return [sys.executable, "-m", "nearDup", "-w", str(w), "run", str(docs), "--partition-docs", "10", "--jobs",
                "2", "--format", "tsv", "-t", "0.5"]

    began = time.monotonic()
    reference = subprocess.run(args(tmp_path / "ref"), capture_output=True, timeout=120)
    duration = time.monotonic() - began
    assert reference.returncode == 0 and reference.stdout.count(b"\n") >= 20, reference.stderr
    w = tmp_path / "w"
    for share in (0.6, 0.3, 0.1):  # the machine's load changes: earlier if the run finished before the kill
        shutil.rmtree(w, ignore_errors=True)
        proc = subprocess.Popen(args(w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(share * duration)
        if proc.poll() is None:
            break
        proc.wait()
    else:
        pytest.fail("every run finished before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)  # the main process only, not its group
    assert proc.wait() == -signal.SIGKILL  # killed, not finished first
    deadline = time.monotonic() + 3
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _session(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the run left: {left}"
    resumed = subprocess.run(args(w), capture_output=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == reference.stdout


MISSING = """
import sys
for name in ("pypdfium2", "lxml", "lxml.html", "lxml.etree", "trafilatura", "zstandard", "charset_normalizer"):
    sys.modules[name] = None  # an import of it fails, as on a base install
sys.path.insert(0, {repo!r})
from nearDup.cli import main
sys.argv = ["neardup", *sys.argv[1:]]
main()
"""


def test_base_install_reads_text_and_says_once_which_formats_it_skipped(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    text = paragraphs(51, 4)
    for name in ("a.txt", "b.txt"):
        (docs / name).write_text("\n".join(text), encoding="utf-8")
    make_docx(docs / "c.docx", text)  # DOCX, ODT, e-mail and gzip need only the standard library
    for i in range(3):
        (docs / f"p{i}.pdf").write_bytes(make_pdf(paragraphs(52 + i, 2, True)))
    (docs / "d.html").write_text("<html><body><p>" + " ".join(text) + "</p></body></html>", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", MISSING.format(repo=str(REPO)), "run", str(docs), "-w",
                           str(tmp_path / "w"), "--jobs", "2", "--partition-docs", "2", "--format", "tsv"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert pairs_of(done.stdout) == {tuple(sorted((str(docs / a), str(docs / b))))
                                     for a, b in (("a.txt", "b.txt"), ("a.txt", "c.docx"), ("b.txt", "c.docx"))}
    notes = [line for line in done.stderr.splitlines() if "formats extra" in line]
    assert notes == ["warning: 4 files skipped: reading HTML (1), PDF (3) needs the formats extra; install it "
                     "with: pip install 'nearDup[formats]'"], done.stderr
    compared = subprocess.run([sys.executable, "-c", MISSING.format(repo=str(REPO)), "compare", str(docs / "p0.pdf"),
                               str(docs / "a.txt")], capture_output=True, text=True, timeout=60)
    assert compared.returncode == 2 and compared.stderr == (
        f"neardup: error: {docs / 'p0.pdf'}: 1 file skipped: reading PDF (1) needs the formats extra; install it "
        "with: pip install 'nearDup[formats]'\n")


@needs_extra
def test_extracted_text_is_cached_by_content_and_extractor_version(formats_corpus, tmp_path, monkeypatch):
    folder, _, _ = formats_corpus
    docs = tmp_path / "docs"
    shutil.copytree(folder, docs)
    calls: list[str] = []
    real = ex.extract

    def counted(path, *args, **kwargs):
        calls.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ex, "extract", counted)
    monkeypatch.setattr(read, "CACHE_SECONDS", 0)  # every extraction cached, however quick
    extracted = len(SUFFIXES[1:]) * TEXTS
    w = tmp_path / "w"
    assert invoke("-w", w, "run", docs, "--jobs", "1", "--partition-docs", "4").exit_code == 0
    assert len(calls) == extracted
    calls.clear()  # other shingle parameters: every document is read again, none extracted again
    assert invoke("-w", w, "run", docs, "--jobs", "1", "--partition-docs", "4", "-k", "4").exit_code == 0
    assert calls == []
    # an interrupted shingle stage resumes: its unfinished partitions are read again, from the cache
    assert invoke("-w", w, "shingle", docs, "--partition-docs", "4", "-k", "3", "--jobs", "1").exit_code == 0
    for marker in sorted((w / "shingle").glob("part-*.done.json"))[-3:]:
        marker.unlink()
    assert invoke("-w", w, "shingle", docs, "--partition-docs", "4", "-k", "3", "--jobs", "1").exit_code == 0
    assert calls == []
    # --html main changes what HTML gives: HTML files, and compressed ones (whose inner format may be HTML), only
    assert invoke("-w", w, "run", docs, "--jobs", "1", "--html", "main").exit_code == 0
    assert sorted(calls) == sorted(f"t{t}{s}" for t in range(TEXTS) for s in (".html", ".txt.gz", ".html.bz2"))
    calls.clear()  # an index: unchanged files are not opened; touched ones are recognised by their content hash
    idx = tmp_path / "idx"
    assert invoke("run", docs, "--index", idx, "--jobs", "1").exit_code == 0
    calls.clear()
    for path in docs.iterdir():
        os.utime(path, (time.time() + 5, time.time() + 5))
    again = invoke("run", docs, "--index", idx, "--jobs", "1", "--new-only", "--format", "tsv")
    assert again.exit_code == 0 and again.stdout == "" and calls == []


def test_the_extraction_cache_reads_the_cpu_clock_only_until_a_format_shows_itself_quick(tmp_path, monkeypatch):
    """An extraction is cached when it took CACHE_SECONDS of its thread's CPU time. That clock is a system call
    (1.1 us a file); a thread's CPU time over an interval is at most its wall time, so once a format's extraction
    took under a quarter of the limit, its next ones are decided by the wall clock while they stay under it."""
    now = {"wall": 100.0, "cpu": 5.0}
    reads: list[float] = []

    def thread_time() -> float:
        reads.append(now["cpu"])
        return now["cpu"]

    monkeypatch.setattr(read, "time", types.SimpleNamespace(monotonic=lambda: now["wall"], thread_time=thread_time))
    store = read._TextCache(str(tmp_path))

    def extraction(fmt: str, wall: float, cpu: float) -> tuple[bool, int]:
        """Whether an extraction of wall and CPU time (in CACHE_SECONDS) is kept, and the CPU clock's readings."""
        before = len(reads)
        began = store.clock(fmt)
        now["wall"] += wall * read.CACHE_SECONDS
        now["cpu"] += cpu * read.CACHE_SECONDS
        return store.keeps(fmt, began), len(reads) - before

    assert extraction("pdf", 3, 2.5) == (True, 2)  # slow: kept, by the CPU clock
    assert extraction("pdf", 3, 0.8) == (False, 2)  # it waited for a core: its CPU time decides
    assert extraction("pdf", 1, 0.9) == (False, 2) and "pdf" not in store.quick  # near the line: still timed
    assert extraction("xz", 0.2, 0.2) == (False, 1)  # quick: the wall clock says so, no second reading
    assert "xz" in store.quick and "pdf" not in store.quick
    assert [extraction("xz", 0.9, 0.9) for _ in range(20)] == [(False, 0)] * 20  # then no reading at all
    assert extraction("xz", 4, 0.2) == (False, 0) and "xz" not in store.quick  # long by the wall: not kept, timed
    assert extraction("xz", 40, 30) == (True, 2)  # timed again: a large file is kept
    assert extraction("xz", 4, 0.2) == (False, 2)  # it waited for a core: quick again
    assert extraction("xz", 0.1, 0.1) == (False, 0)


def test_an_extraction_cache_keyed_by_the_old_content_hash_is_emptied(tmp_path, monkeypatch):
    """The cache's keys are made of content hashes: entries of BLAKE2b's (user_version 0) can never be found
    again once the hash is SHA-256, and --force keeps the cache, so its first use empties it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = {"a": "one text about the harbour and its boats", "b": "another text about the mountains in spring"}
    for name, text in texts.items():
        (docs / f"{name}.txt.gz").write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(read, "CACHE_SECONDS", 0)  # every extraction cached, however quick
    w, cache = tmp_path / "w", tmp_path / "w" / "extract" / "texts.sqlite"
    assert invoke("-w", w, "shingle", docs, "--jobs", "1").exit_code == 0
    with contextlib.closing(sqlite3.connect(cache)) as db:
        first = {key for (key,) in db.execute("SELECT key FROM texts")}
    # as a format 5 work dir left it: BLAKE2b keys, user_version 0; --force rebuilds the work dir, keeps the cache
    old_key = read._cache_key(hashlib.blake2b((docs / "a.txt.gz").read_bytes(), digest_size=16).hexdigest(),
                              ex.version("gz", ex.ExtractOptions()))
    with contextlib.closing(sqlite3.connect(cache)) as db, db:
        db.execute("DELETE FROM texts")
        db.execute("INSERT INTO texts VALUES (?, ?)", (old_key, b'{"docs": [["", "stale"]], "notes": []}'))
        db.execute("PRAGMA user_version = 0")
    (w / "manifest.json").write_text(json.dumps({**json.loads((w / "manifest.json").read_text()), "format": 5}))
    assert invoke("-w", w, "shingle", docs, "--jobs", "1", "--force").exit_code == 0
    with contextlib.closing(sqlite3.connect(cache)) as db:
        keys = {key for (key,) in db.execute("SELECT key FROM texts")}
        assert db.execute("PRAGMA user_version").fetchone() == (read._TextCache.HASH_VERSION,)
    assert len(first) == 2 and keys == first  # the old entry dropped, the texts extracted again and kept


@needs_extra
def test_mbox_messages_compare_query_and_the_index(formats_corpus, tmp_path):
    folder, texts, _ = formats_corpus
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(folder / "t0.pdf", docs / "t0.pdf")
    box = b""
    for i, body in enumerate(["a note about lunch", texts["t1"], "another short note"]):
        msg = email.message.EmailMessage()
        msg["From"], msg["Subject"] = "a@example.org", f"m{i}"
        msg.set_content(body)
        box += b"From a@example.org Mon Jan  1 00:00:00 2024\n" + bytes(msg).replace(b"\nFrom ", b"\n>From ") + b"\n"
    (docs / "mail.mbox").write_bytes(box)
    shutil.copy(folder / "t1.odt", docs / "t1.odt")
    idx = tmp_path / "idx"
    r = invoke("run", docs, "--index", idx, "--jobs", "1", "-t", "0.9", "--format", "tsv", "--min-shingles", "1")
    assert r.exit_code == 0, r.output
    assert pairs_of(r.stdout) == {(f"{docs / 'mail.mbox'}#2", str(docs / "t1.odt"))}
    again = invoke("run", docs, "--index", idx, "--jobs", "1", "-t", "0.9", "--new-only", "--format", "tsv")
    assert again.exit_code == 0 and again.stdout == "" and "added" not in again.stderr, again.output  # kept
    found = invoke("query", folder / "t0.docx", folder / "t1.epub", "--index", idx, "-t", "0.9", "--format", "tsv")
    assert found.exit_code == 0, found.output
    assert pairs_of(found.stdout) == {tuple(sorted((str(folder / "t0.docx"), str(docs / "t0.pdf")))),
                                      tuple(sorted((str(folder / "t1.epub"), f"{docs / 'mail.mbox'}#2"))),
                                      tuple(sorted((str(folder / "t1.epub"), str(docs / "t1.odt"))))}
    same = invoke("compare", folder / "t2.pdf", folder / "t2.docx", "-t", "0.95")
    assert same.exit_code == 0 and same.stdout.startswith("jaccard\t")
    assert invoke("compare", folder / "t2.pdf", folder / "t1.docx").exit_code == 1
