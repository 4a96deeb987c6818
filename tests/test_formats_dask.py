"""Document formats on a Dask cluster (issue 20): extraction runs in the workers, inside the shingle stage's
partitions, so a mixed-format folder must give the embedded run's bytes: the pairs, and `inspect`'s documents per
format. Clusters as in tests/test_dask.py: --scheduler local:2, and `dask scheduler` with two `dask worker`s on the
loopback interface, started as a user would, in another working directory (/)."""
from __future__ import annotations

import bz2
import gzip
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the dask extra is not installed (pip install -e '.[dask]')")

from test_dask import dask_processes, embedded, invoke, neardup  # noqa: F401  (dask_processes: a fixture)
from test_extract import HAS_LXML, HAS_PDFIUM, esc, make_docx, make_eml, make_epub, make_odt, make_pdf, paragraphs

pytestmark = pytest.mark.skipif(not (HAS_PDFIUM and HAS_LXML), reason="the formats extra is not installed "
                                                                      "(pip install 'nearDup[formats]')")
TEXTS = 3
FORMATS = ("pdf", "docx", "odt", "epub", "html", "eml", "txt.gz", "txt.bz2", "txt", "mbox")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """TEXTS texts, each in every format of FORMATS (the mbox holds it as its second of two messages), and one
    unrelated text per format: made by hand, no office suite needed."""
    folder = tmp_path_factory.mktemp("mixed") / "docs"
    folder.mkdir()
    for t in range(TEXTS + 1):
        for f, fmt in enumerate(FORMATS):
            paras = paragraphs(300 + t if t < TEXTS else 400 + f, 4, ascii_only=True)  # the last: all unrelated
            text, path = "\n".join(paras), folder / f"t{t}.{fmt}"
            if fmt == "pdf":
                path.write_bytes(make_pdf(paras[:2] + [" ".join(paras[2:])]))
            elif fmt == "docx":
                make_docx(path, paras)
            elif fmt == "odt":
                make_odt(path, paras)
            elif fmt == "epub":
                make_epub(path, paras)
            elif fmt == "html":
                path.write_text("<!DOCTYPE html><html><body>" + "".join(f"<p>{esc(p)}</p>" for p in paras)
                                + "</body></html>", encoding="utf-8")
            elif fmt == "eml":
                path.write_bytes(make_eml(f"text {t}", text))
            elif fmt == "txt.gz":
                path.write_bytes(gzip.compress(text.encode()))
            elif fmt == "txt.bz2":
                path.write_bytes(bz2.compress(text.encode()))
            elif fmt == "mbox":
                path.write_bytes(b"".join(b"From a@b Mon Jan  1 00:00:00 2024\n" + make_eml(f"m{i}", body) + b"\n"
                                          for i, body in enumerate(["a short note about lunch", text])))
            else:
                path.write_text(text, encoding="utf-8")
    return folder


def inspected(work: Path) -> str:
    """`inspect` of a work dir without what differs between two runs of the same input: times and the path."""
    result = invoke("-w", work, "inspect")
    assert result.exit_code == 0, result.stderr
    return re.sub(r"done at \S+", "done at T", result.stdout.replace(str(work), "W"))


def test_a_mixed_format_folder_on_a_local_cluster_gives_the_embedded_bytes(mixed, tmp_path):
    args = ["run", mixed, "--threshold", 0.7, "--format", "tsv", "--partition-docs", 7]
    truth = embedded(tmp_path / "e", *args)
    pairs = truth.decode().splitlines()
    assert len(pairs) == TEXTS * 45  # each text's 10 copies (9 files and an mbox message) pair with each other
    result = invoke("-w", tmp_path / "d", *args, "--scheduler", "local:2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == truth
    shown = inspected(tmp_path / "d")
    assert shown == inspected(tmp_path / "e")
    assert "  formats: bzip2 4, DOCX 4, e-mail 4, EPUB 4, gzip 4, HTML 4, mbox 8, ODT 4, PDF 4, text 4\n" in shown


def test_a_mixed_format_folder_on_dask_worker_processes_gives_the_embedded_bytes(
        mixed, tmp_path, dask_processes, monkeypatch):  # noqa: F811  (dask_processes: the fixture imported above)
    """Relative paths, as typed in a shell, while the workers run in /: each worker extracts what it is given."""
    scheduler_file, _ = dask_processes
    monkeypatch.chdir(tmp_path)
    args = ["run", os.path.relpath(mixed), "--threshold", 0.7, "--format", "jsonl", "--partition-docs", 6]
    truth = embedded("e", *args)
    result = neardup(*args, "-w", "d", "--scheduler-file", scheduler_file, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == truth
    assert inspected(tmp_path / "d") == inspected(tmp_path / "e")
