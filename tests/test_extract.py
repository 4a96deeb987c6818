"""Text extraction (nearDup.text.extract): every format gives back the words of its source text, and every bad
input gets its one-line typed error with bounded memory.

Fixtures are built at test time: by hand with the standard library (zip+XML DOCX/ODT/EPUB, HTML, e-mail, a PDF
written object by object, compressed wrappers), so the core runs everywhere; and by LibreOffice and pandoc, as a
person's office software would save them, when those programs are installed.
"""
from __future__ import annotations

import bz2
import email.message
import gzip
import importlib.util
import io
import lzma
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nearDup.text import extract as ex

from conftest import REPO, reference_shingles

HAS_PDFIUM = importlib.util.find_spec("pypdfium2") is not None
HAS_LXML = importlib.util.find_spec("lxml") is not None
HAS_TRAFILATURA = importlib.util.find_spec("trafilatura") is not None
HAS_ZSTD = importlib.util.find_spec("zstandard") is not None
EXTRA = "the formats extra is not installed (pip install 'nearDup[formats]')"
needs_pdf = pytest.mark.skipif(not HAS_PDFIUM, reason=f"PDF: {EXTRA}")
needs_lxml = pytest.mark.skipif(not HAS_LXML, reason=f"HTML/EPUB: {EXTRA}")
needs_main = pytest.mark.skipif(not HAS_TRAFILATURA, reason=f"--html main: {EXTRA}")
needs_zstd = pytest.mark.skipif(not HAS_ZSTD, reason=f".zst: {EXTRA}")

WORDS = ("market profit shares council river garden winter station report price engine island letter summer "
         "doctor museum bridge forest signal harbour village orbit ticket window silver thunder élan Straße "
         "naïve café").split()


def paragraphs(seed: int, n: int = 8, ascii_only: bool = False) -> list[str]:
    rng = random.Random(seed)
    vocab = [w for w in WORDS if w.isascii()] if ascii_only else WORDS
    vocab = vocab + [f"w{i}" for i in range(400)]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(25, 45))) + "." for _ in range(n)]


def jaccard(a: str, b: str) -> float:
    sa, sb = reference_shingles(a), reference_shingles(b)
    return len(sa & sb) / len(sa | sb)


def text_of(path, fmt=None, options=ex.ExtractOptions(), warn=None) -> str:
    return "\n".join(text for _, text in ex.extract(str(path), fmt, options, warn))


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ------------------------------------------------------------------------------------ hand-made fixtures

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(path: Path, paras: list[str], cells: list[str] = (), footnote: str = "", deleted: str = "") -> None:
    """A minimal Word document: paragraphs (the first split over two runs), a table, a tracked deletion, a
    footnote; what Word needs, nothing more."""
    def p(text):
        half = len(text) // 2
        cut = text.rfind(" ", 0, half) + 1 or half
        return (f'<w:p><w:r><w:t xml:space="preserve">{esc(text[:cut])}</w:t></w:r>'
                f'<w:r><w:t>{esc(text[cut:])}</w:t></w:r></w:p>')
    body = "".join(p(t) for t in paras)
    if deleted:
        body += f"<w:p><w:del><w:r><w:delText>{esc(deleted)}</w:delText></w:r></w:del></w:p>"
    if cells:
        body += "<w:tbl><w:tr>" + "".join(f"<w:tc>{p(c)}</w:tc>" for c in cells) + "</w:tr></w:tbl>"
    if footnote:
        body += '<w:p><w:r><w:footnoteReference w:id="1"/></w:r></w:p>'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                   'package/2006/content-types"/>')
        z.writestr("word/document.xml", f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W_NS}">'
                   f"<w:body>{body}</w:body></w:document>")
        if footnote:
            z.writestr("word/footnotes.xml", f'<w:footnotes xmlns:w="{W_NS}"><w:footnote w:type="separator" '
                       f'w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote><w:footnote w:id="1">'
                       f"{p(footnote)}</w:footnote></w:footnotes>")


ODF = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
       'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
       'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
       'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"')


def make_odt(path: Path, paras: list[str], cells: list[str] = (), footnote: str = "", encrypted=False) -> None:
    """ODT with spans, runs of spaces (text:s), a heading, a table and a footnote inside the first paragraph
    (where ODF keeps it), and an annotation that is not body text."""
    def p(text, note=""):
        a, _, b = text.partition(" ")
        return (f'<text:p><text:span>{esc(a)}</text:span><text:s text:c="2"/>{esc(b)}{note}</text:p>')
    note = (f'<text:note text:note-class="footnote"><text:note-citation>1</text:note-citation><text:note-body>'
            f"{p(footnote)}</text:note-body></text:note>") if footnote else ""
    body = f"<text:h>{esc(paras[0])}</text:h>" + p(paras[1], note)
    body += "".join(p(t) for t in paras[2:])
    body += "<text:p><office:annotation><text:p>reviewer remark zzz</text:p></office:annotation></text:p>"
    if cells:
        body += ("<table:table><table:table-row>" + "".join(f"<table:table-cell>{p(c)}</table:table-cell>"
                                                            for c in cells) + "</table:table-row></table:table>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")  # stored, first
        z.writestr("content.xml", f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF}>'
                   f"<office:body><office:text>{body}</office:text></office:body></office:document-content>")
        entry = '<manifest:encryption-data/>' if encrypted else ""
        z.writestr("META-INF/manifest.xml", f'<manifest:manifest {ODF}><manifest:file-entry '
                   f'manifest:full-path="content.xml">{entry}</manifest:file-entry></manifest:manifest>')


def make_epub(path: Path, chapters: list[str]) -> None:
    """EPUB whose manifest lists the chapters in reverse: reading order must come from the spine."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:'
                   'names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" '
                   'media-type="application/oebps-package+xml"/></rootfiles></container>')
        items = "".join(f'<item id="c{i}" href="text/ch%20{i}.xhtml" media-type="application/xhtml+xml"/>'
                        for i in reversed(range(len(chapters))))
        spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
        z.writestr("OEBPS/content.opf", f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                   f'version="3.0"><manifest>{items}</manifest><spine>{spine}</spine></package>')
        for i, chapter in enumerate(chapters):
            z.writestr(f"OEBPS/text/ch {i}.xhtml", '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://'
                       f'www.w3.org/1999/xhtml"><head><title>toc title</title><style>p {{}}</style></head><body>'
                       f"<p>{esc(chapter)}</p></body></html>")


def make_pdf(pages: list[str]) -> bytes:
    """A PDF written object by object (Helvetica, one text line per 12 words): a text layer with no PDF library.
    The text is written in Latin-1, so the font says WinAnsiEncoding (Latin-1's letters at the same codes): without
    it a reader takes the font's StandardEncoding, where 0xE9 is Ø, not é (PDFium 5.15 does)."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", None,
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    kids = []
    for text in pages:
        words = text.split()
        lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
        ops = "".join(f"({line.replace(chr(92), '').replace('(', '').replace(')', '')}) Tj T* " for line in lines)
        stream = f"BT /F1 10 Tf 12 TL 40 800 Td {ops}ET".encode("latin-1")
        objs.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {len(objs)} 0 R "
                    "/Resources << /Font << /F1 3 0 R >> >> >>")
        kids.append(f"{len(objs)} 0 R")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + (obj if isinstance(obj, bytes) else obj.encode()) + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_eml(subject: str, body: str, html: str = "", attachment: str = "") -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "ann@example.org", "bob@example.org", subject
    msg["Date"] = "Mon, 01 Jan 2024 10:00:00 +0000"
    if body:
        msg.set_content(body)
        if html:
            msg.add_alternative(html, subtype="html")
    else:
        msg.set_content(html, subtype="html")
    if attachment:
        msg.add_attachment(attachment.encode(), maintype="text", subtype="plain", filename="notes.txt")
    return bytes(msg)


def page(title: str, body: str, template: int) -> str:
    """An article inside one of two site templates (navigation, header, sidebar, footer, scripts)."""
    nav = [" ".join(paragraphs(900 + template, 1)[0].split()[:12]) for _ in range(1)]
    chrome = paragraphs(1000 + template, 4, ascii_only=True)
    return (f"<!DOCTYPE html><html><head><title>{title}</title><script>var t = 'secretscript';</script>"
            f"<style>.x {{color: red}}</style></head><body><header><nav><a href='/'>{nav[0]}</a></nav>"
            f"<div class='banner'>{chrome[0]}</div></header><main><article><h1>{title}</h1>"
            + "".join(f"<p>{p}</p>" for p in body.split("\n"))
            + f"</article></main><aside><h3>Related</h3><ul><li><a href='/r'>{chrome[1]}</a></li></ul></aside>"
            f"<footer><p>{chrome[2]}</p><p>{chrome[3]}</p></footer></body></html>")


# ----------------------------------------------------------------------------------------------- detection

def test_detect_by_content_not_extension(tmp_path):
    paras = paragraphs(1)
    make_docx(tmp_path / "a.docx", paras)
    make_odt(tmp_path / "a.odt", paras)
    make_epub(tmp_path / "a.epub", paras)
    heads = {
        "docx": (tmp_path / "a.docx").read_bytes(), "odt": (tmp_path / "a.odt").read_bytes(),
        "epub": (tmp_path / "a.epub").read_bytes(), "pdf": make_pdf(paras),
        "gz": gzip.compress(b"x"), "bz2": bz2.compress(b"x"), "xz": lzma.compress(b"x"),
        "zst": b"\x28\xb5\x2f\xfd\x00\x00", "ole": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100),
        "html": b"\xef\xbb\xbf  \n<!DOCTYPE html><p>hi</p>", "eml": make_eml("Hello", "body"),
        "mbox": b"From ann@example.org Mon Jan  1 10:00:00 2024\n" + make_eml("Hello", "body"),
        "binary": b"\x00\x01\x02 elf", "text": b"Note: one header-like line is not an e-mail\n\nbody",
    }
    for fmt, data in heads.items():
        assert ex.detect(data[:ex.HEAD], "misleading.txt") == fmt, fmt
    assert ex.detect(b"<?xml version='1.0'?><html xmlns='http://www.w3.org/1999/xhtml'>", "x") == "html"
    assert ex.detect(b"plain words then <b>bold</b>", "page.html") == "html"  # extension breaks the tie only
    assert ex.detect(b"plain words then <b>bold</b>", "notes.txt") == "text"
    assert ex.detect(b"<abbr>x</abbr>", "notes.txt") == "text"  # <a prefix alone is not a tag


def test_detection_on_bytes_agrees_with_detection_on_the_decoded_text(monkeypatch):
    # detect() tries HTML's tags on the head's bytes (_markup) before decoding it, and the plain-file reader
    # names compressed files by their magic numbers before calling detect(): both are shortcuts that must give
    # what the full tests give. Truth: detect() with the byte test switched off.
    from nearDup.text.read import document_format

    rng = random.Random(5)
    openings = [b"<!DOCTYPE html>", b"<!doctype HTML >", b"<html lang=en>", b"<HTML>", b"<head>", b"<body/>",
                b"<p>x", b"<b>bold", b"<br />", b"<a href=x>", b"<abbr>", b"<!-- c -->", b"<!--x", b"<div\tid=a>",
                b"<?xml version='1.0'?><html>", b"<?xml version='1.0'?><svg xmlns='x'/>", b"<htmlx>", b"<html",
                b"<p\xc3\xa9>", b"<", b"From: a@b\nTo: c@d\n\nhi", b"plain <html> text", b"\xc3\xa9<html>"]
    prefixes = [b"", b"\xef\xbb\xbf", b"  \n\t", b"\xef\xbb\xbf\r\n ", b"\xef\xbb\xbf\xef\xbb\xbf", b" \xef\xbb\xbf",
                b"\xff\xfe", b"x" * 1100]
    tails = [b"", b" body \xe2\x80\x99 words", b"\0 binary", b" " + "é".encode() * 2100, b" " + b"a" * 5000]
    heads = [(p + o + t)[:ex.HEAD] for p in prefixes for o in openings for t in tails]
    heads += [bytes(rng.choice(b"<>!-/ \tabhtml\xc3\xa9x?") for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    names = ("page.html", "notes.txt", "x", "mail.eml", "a.MD")
    fast = {(h, n): ex.detect(h, n) for h in heads for n in names}
    assert sum(ex._markup(h, n.endswith(".txt")) for h, n in fast) > 300  # the shortcut is taken, and often
    monkeypatch.setattr(ex, "_markup", lambda head, text_name: False)
    for (head, name), fmt in fast.items():
        assert ex.detect(head, name) == fmt, (head[:60], name)
    # compressed magic numbers in document_format, against detect() (before a PDF header; "BZh" then a digit)
    compressed = [gzip.compress(b"x"), bz2.compress(b"x"), lzma.compress(b"x"), b"\x28\xb5\x2f\xfd" + bytes(9),
                  b"BZhx not bzip2", b"BZh", b"\x1f\x8b" + b"%PDF-1.4", b"\xfd7zXZ", b"\x1f"]
    for head in compressed:
        expected = ex.detect(head, "a.txt")
        assert document_format(head, "a.txt") == (None if expected in ("text", "binary") else expected), head


def test_the_format_of_a_whole_file_is_detects_answer_for_its_head():
    """The plain-file reader hands document_format a whole file and names markup without copying its first HEAD
    bytes: what lies past them (a NUL, a PDF header) must not change the answer detect() gives for the head."""
    from nearDup.text.read import document_format

    openings = [b"<!DOCTYPE html>", b"<html>", b"<p>x", b"<b>bold", b"\xef\xbb\xbf <html>", b"  \n<body>", b"<abbr>",
                b"<?xml version='1.0'?><html>", b"%PDF-1.4 <html>", b"<html>%PDF-1.4", b"plain <html>", b"<"]
    fills = [0, 500, 1100, ex.HEAD - 40, ex.HEAD + 10]
    tails = [b"", b"\0", b"%PDF-1.7", b" words \xe2\x80\x99"]
    names = ("page.html", "notes.txt", "x")
    checked = markup = 0
    for opening in openings:
        for fill in fills:
            for tail in tails:
                data = opening + b" " * fill + tail + b" more words" * 200
                for name in names:
                    expected = ex.detect(data[:ex.HEAD], name)
                    assert document_format(data, name) == (None if expected in ("text", "binary") else expected), \
                        (opening, fill, tail, name)
                    checked += 1
                    markup += expected == "html"
    assert checked == 720 and markup > 200


def test_a_head_cut_inside_a_character_decodes_in_one_pass():
    text = "a é € 𝄞 z" * 3
    raw = text.encode()
    for cut in range(len(raw) + 1):
        head = raw[:cut]
        whole = ex._whole_chars(head)
        decoded = whole.decode("utf-8")  # never raises: no character is cut
        assert text.startswith(decoded) and len(head) - len(whole) <= 3
        assert whole == head or head.decode("utf-8", "replace").endswith("\ufffd")  # only a cut character goes
    assert ex._whole_chars(b"\xff\xfe" + "é".encode("utf-16-le")) == b"\xff\xfe" + "é".encode("utf-16-le")


# ------------------------------------------------------------------------------- fidelity, hand-made files

def _cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    """{case: (file, the plain text it holds)}."""
    paras = paragraphs(2)
    plain = "\n".join(paras)
    cells, note = paragraphs(3, 2), paragraphs(4, 1)[0]
    cases = {}
    make_docx(tmp / "doc.docx", paras, cells, note, deleted="deletedzzz words gone")
    cases["docx"] = (tmp / "doc.docx", "\n".join(paras + cells + [note]))
    make_odt(tmp / "doc.odt", paras, cells, note)
    cases["odt"] = (tmp / "doc.odt", "\n".join(paras + cells + [note]))
    (tmp / "page.html").write_text("<!DOCTYPE html><html><head><title>t</title><script>var secretscript;"
                                   "</script></head><body>" + "".join(
                                       f"<p>{esc(p[:20])}<b>{esc(p[20:])}</b></p><!-- comment zzz -->"
                                       for p in paras) + "<div hidden>hiddenzzz</div></body></html>",
                                   encoding="utf-8")
    if HAS_LXML:
        cases["html"] = (tmp / "page.html", plain)
    (tmp / "doc.eml").write_bytes(make_eml(paras[0], "\n".join(paras[1:]), html="<p>htmlzzz</p>",
                                           attachment="attachmentzzz"))
    cases["eml"] = (tmp / "doc.eml", plain)
    (tmp / "html.eml").write_bytes(make_eml(paras[0], "", html="".join(f"<p>{p}</p>" for p in paras[1:])))
    if HAS_LXML:
        cases["eml-html"] = (tmp / "html.eml", plain)
    raw = plain.encode("utf-8")
    for ext, pack in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        (tmp / f"doc.txt.{ext}").write_bytes(pack(raw))
        cases[ext] = (tmp / f"doc.txt.{ext}", plain)
    (tmp / "doc.docx.gz").write_bytes(gzip.compress(bz2.compress((tmp / "doc.docx").read_bytes())))
    cases["docx.bz2.gz"] = (tmp / "doc.docx.gz", cases["docx"][1])
    if HAS_LXML:
        make_epub(tmp / "book.epub", paras)
        cases["epub"] = (tmp / "book.epub", plain)
    if HAS_PDFIUM:
        ascii_paras = paragraphs(5, 12, ascii_only=True)
        (tmp / "doc.pdf").write_bytes(make_pdf(["\n".join(ascii_paras[i:i + 3]) for i in range(0, 12, 3)]))
        cases["pdf"] = (tmp / "doc.pdf", "\n".join(ascii_paras))
    if HAS_ZSTD:
        import zstandard
        (tmp / "doc.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
        cases["zst"] = (tmp / "doc.txt.zst", plain)
    return cases


def test_each_format_gives_back_its_words(tmp_path):
    cases = _cases(tmp_path)
    expected = {"docx", "odt", "eml", "gz", "bz2", "xz", "docx.bz2.gz"}  # the base install reads these
    assert expected <= set(cases)
    for case, (path, plain) in cases.items():
        text = text_of(path)
        assert jaccard(text, plain) >= 0.95, (case, jaccard(text, plain))
        for junk in ("<", "zzz", "w:t", "secretscript", "var "):  # no markup, scripts, comments, hidden or
            assert junk not in text, (case, junk)                # deleted text, annotations or attachments


def test_bytes_already_read_give_the_text_of_the_file(tmp_path, monkeypatch):
    # The shingle stage reads a file once and hands its bytes to the extractor: no format may open it again
    # (a PDF was opened by name a second time), and each must give what the file on disk gives.
    cases = _cases(tmp_path)
    gone = tmp_path / "gone"  # a path that does not exist: any second open fails
    for case, (path, _) in cases.items():
        data = path.read_bytes()
        fmt = ex.detect(data[:ex.HEAD], path.name)  # known, as the stage knows it
        from_bytes = "\n".join(t for _, t in ex.extract(str(gone / path.name), fmt, ex.ExtractOptions(), None, data))
        assert from_bytes == text_of(path), case
    # past IN_MEMORY uncompressed bytes, in-memory data is streamed to a spool like a file on disk: same text
    monkeypatch.setattr(ex, "IN_MEMORY", 1024)
    big = " ".join(paragraphs(9, 40)).encode()
    assert len(big) > 1024
    (tmp_path / "big.txt.gz").write_bytes(gzip.compress(big))
    data = (tmp_path / "big.txt.gz").read_bytes()
    assert "\n".join(t for _, t in ex.extract(str(gone / "big.txt.gz"), "gz", data=data)) == big.decode()


def test_streams_in_memory_follow_each_other_as_the_stdlib_readers_read_them(tmp_path):
    a, b = b"first stream words\n", b"second stream words\n"
    cases = {
        "members.txt.gz": (gzip.compress(a) + gzip.compress(b) + bytes(7), a + b),  # zero padding at the end
        "padded.txt.gz": (gzip.compress(a) + bytes(3) + gzip.compress(b), a + b),
        "streams.txt.bz2": (bz2.compress(a) + bz2.compress(b) + b"junk after", a + b),
        "streams.txt.xz": (lzma.compress(a) + lzma.compress(b), a + b),
    }
    for name, (data, truth) in cases.items():
        opener = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[name.rsplit(".", 1)[1]]
        (tmp_path / name).write_bytes(data)
        with opener(tmp_path / name) as f:
            assert f.read() == truth, name  # the stdlib reader agrees with the truth
        assert ex._decompressed(data, name.rsplit(".", 1)[1], ex._Budget(1 << 20)) == truth, name
        assert text_of(tmp_path / name) == truth.decode(), name
    for data, fmt in ((gzip.compress(a)[:-3], "gz"), (bz2.compress(a)[:-3], "bz2"), (lzma.compress(a)[:-3], "xz"),
                      (gzip.compress(a) + b"\x1f\x8b", "gz")):
        with pytest.raises(EOFError):
            ex._decompressed(data, fmt, ex._Budget(1 << 20))
    with pytest.raises(ex.Refused):
        ex._decompressed(gzip.compress(bytes(4096)), "gz", ex._Budget(4000))


def test_a_compressed_file_in_memory_is_read_as_the_same_file_on_disk(tmp_path, monkeypatch):
    # The stage hands the extractor a file's bytes, decompressed in one call (bounded by IN_MEMORY + 1 bytes); from
    # its path a file is streamed. Both must refuse the same bombs, report the same truncations and read the same
    # inner formats.
    limit = 64 << 10
    options = ex.ExtractOptions(max_bytes=limit)

    def outcomes(name: str, data: bytes, fmt: str) -> list:
        """What extract() gives for the file on disk and for its bytes in memory (at a path that does not exist):
        its text, or its one-line error."""
        (tmp_path / name).write_bytes(data)
        found = []
        for path, source in ((tmp_path / name, None), (tmp_path / "gone" / name, data)):
            try:
                found.append("".join(t for _, t in ex.extract(str(path), fmt, options, None, source)))
            except ex.ExtractError as exc:
                found.append(f"{type(exc).__name__}: {str(exc).replace(str(path), 'PATH')}")
        return found

    for fmt, pack in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        # every layer's bytes count, the decompressed text and the text read from it: the limit is at half
        for size in (limit // 2 - 1, limit // 2, limit // 2 + 1, limit + 1, 40 * limit):
            disk, memory = outcomes(f"a.txt.{fmt}", pack(b"a" * size), fmt)
            assert disk == memory and (memory == "Refused: PATH: expands past 64 KiB: refused") == (size > limit // 2)
        disk, memory = outcomes(f"cut.txt.{fmt}", pack(b"words " * 2000)[:-20], fmt)
        assert disk == memory == (f"Corrupt: PATH: corrupt or truncated {ex.LABELS[fmt]} (Compressed file ended before "
                                  "the end-of-stream marker was reached): skipped")
        if HAS_LXML:
            page = b"<!DOCTYPE html><html><body><p>visible words</p><script>var hidden;</script></body></html>"
            assert outcomes(f"p.html.{fmt}", pack(page), fmt) == ["visible words"] * 2
    # bounded: a file that expands past IN_MEMORY makes at most IN_MEMORY + 1 bytes in memory, then is streamed
    monkeypatch.setattr(ex, "IN_MEMORY", 4096)
    budget = ex._Budget(1 << 30)
    assert ex._decompressed(lzma.compress(bytes(1 << 20)), "xz", budget) is None
    assert budget.limit - budget.left == 4097


@needs_pdf
def test_a_compressed_pdf_that_shows_its_header_reads_as_the_pdf_inside(tmp_path):
    # gzip keeps incompressible data (all of it at level 0) in stored blocks, so a .pdf.gz may show the PDF's header
    # in its first 1024 bytes. Named a PDF (the header was tested before the magic numbers), PDFium was handed the
    # gzip file and read the stored blocks' headers into the text; named by its magic number, it is decompressed.
    from nearDup.text.read import document_format

    pdf = make_pdf(["\n".join(paragraphs(7, 400)[i:i + 10]) for i in range(0, 400, 10)])
    packed = gzip.compress(pdf, compresslevel=0)
    assert len(pdf) > 65535 and packed.find(b"%PDF-", 0, 1024) >= 0  # several stored blocks, the header shows
    (tmp_path / "doc.pdf").write_bytes(pdf)
    (tmp_path / "doc.pdf.gz").write_bytes(packed)
    assert text_of(tmp_path / "doc.pdf.gz") == text_of(tmp_path / "doc.pdf")  # not 5 bytes more inside
    assert ex.detect(packed[:ex.HEAD], "doc.pdf.gz") == document_format(packed, "doc.pdf.gz") == "gz"
    assert "\n".join(t for _, t in ex.extract(str(tmp_path / "doc.pdf.gz"), "gz", data=packed)) == \
        text_of(tmp_path / "doc.pdf")


def test_untidied_texts_give_the_shingles_of_the_tidied_ones(tmp_path):
    # The shingle stage skips the tidy pass (ExtractOptions.tidy): its shingles must not change, for any unit,
    # whitespace rule or punctuation setting, on every format and on blanks of every kind.
    from nearDup.config import ShingleParams
    from nearDup.text.read import Document
    from nearDup.text.shingles import shingle_documents

    texts = []
    for case, (path, _) in _cases(tmp_path).items():
        tidied, raw = (text_of(path, options=ex.ExtractOptions(tidy=t)) for t in (True, False))
        assert tidied == ex._tidy(raw), case
        texts.append((tidied, raw))
    assert any(t != r for t, r in texts)  # the pass does change the text of some formats
    rng = random.Random(5)
    alphabet = list("ab.́¨ \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000\ufeff")
    for _ in range(300):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        texts.append((ex._tidy(raw), raw))
    for params in (ShingleParams(), ShingleParams(unit="char", k=3), ShingleParams(unit="char", k=3, strip_punct=True),
                   ShingleParams(unit="char", k=2, whitespace="remove")):
        got = [shingle_documents([(Document("d", t, 0, 0, "", False), {})], params, {})[1].tolist() for pair in texts
               for t in pair]
        assert got[0::2] == got[1::2], params


def test_word_split_across_runs_and_spans_stays_whole(tmp_path):
    make_docx(tmp_path / "a.docx", ["alpha beta gamma delta epsilon"])
    assert text_of(tmp_path / "a.docx") == "alpha beta gamma delta epsilon"
    make_odt(tmp_path / "a.odt", ["heading here", "first  para", "alpha beta"])
    assert text_of(tmp_path / "a.odt").split("\n") == ["heading here", "first para", "alpha beta"]
    if HAS_LXML:
        (tmp_path / "a.html").write_text("<p>multi<b>word</b> x</p><p>next</p>", encoding="utf-8")
        assert text_of(tmp_path / "a.html") == "multiword x\nnext"


def test_epub_reads_in_spine_order(tmp_path):
    if not HAS_LXML:
        pytest.skip(f"EPUB: {EXTRA}")
    make_epub(tmp_path / "b.epub", ["first chapter", "second chapter", "third chapter"])
    assert text_of(tmp_path / "b.epub") == "first chapter\nsecond chapter\nthird chapter"


# --------------------------------------------------------------------------------------- LibreOffice, pandoc

@pytest.fixture(scope="session")
def office_files(tmp_path_factory):
    """Three texts saved by LibreOffice (PDF, DOCX, ODT: one invocation per format for all files) and pandoc
    (EPUB, HTML), as a person's software would write them."""
    if not shutil.which("soffice") or not shutil.which("pandoc"):
        pytest.skip("LibreOffice (soffice) or pandoc not installed: apt-get install libreoffice-writer-nogui pandoc")
    folder = tmp_path_factory.mktemp("office")
    texts = {}
    for i in range(3):
        texts[f"t{i}"] = "\n\n".join(paragraphs(20 + i, 6))
        (folder / f"t{i}.txt").write_text(texts[f"t{i}"], encoding="utf-8")
    sources = [str(folder / f"t{i}.txt") for i in range(3)]
    profile = folder / "profile"  # a private profile: no clash with another LibreOffice running
    for fmt in ("pdf", "docx", "odt"):
        subprocess.run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", fmt,
                        "--outdir", str(folder), *sources], check=True, capture_output=True, timeout=120)
    for stem in texts:
        for fmt, extra in (("epub", ["--metadata", "title=x"]), ("html", ["-s", "--metadata", "title=x"])):
            subprocess.run(["pandoc", "-f", "markdown", "-t", fmt, *extra, "-o", str(folder / f"{stem}.{fmt}"),
                            str(folder / f"{stem}.txt")], check=True, timeout=60)
    return folder, texts


@pytest.mark.parametrize("fmt", ["pdf", "docx", "odt", "epub", "html"])
def test_office_software_files_give_back_their_words(office_files, fmt):
    if (fmt == "pdf" and not HAS_PDFIUM) or (fmt in ("epub", "html") and not HAS_LXML):
        pytest.skip(f"{fmt}: {EXTRA}")
    folder, texts = office_files
    for stem, plain in texts.items():
        path = folder / f"{stem}.{fmt}"
        assert ex.detect(path.read_bytes()[:ex.HEAD], "renamed.bin") == fmt
        assert jaccard(text_of(path), plain) >= 0.95


# --------------------------------------------------------------------------------------------- HTML modes

@needs_main
def test_main_mode_sees_the_article_not_the_template(tmp_path):
    a1, a2 = "\n".join(paragraphs(30, 6, True)), "\n".join(paragraphs(31, 6, True))
    (tmp_path / "a1_t0.html").write_text(page("First story", a1, 0), encoding="utf-8")
    (tmp_path / "a1_t1.html").write_text(page("First story", a1, 1), encoding="utf-8")
    (tmp_path / "a2_t0.html").write_text(page("Second story", a2, 0), encoding="utf-8")
    main = ex.ExtractOptions(html_main=True)
    same = jaccard(text_of(tmp_path / "a1_t0.html", options=main), text_of(tmp_path / "a1_t1.html", options=main))
    other = jaccard(text_of(tmp_path / "a1_t0.html", options=main), text_of(tmp_path / "a2_t0.html", options=main))
    assert same >= 0.9 and other < 0.1, (same, other)
    # Without main mode the template is text too: that is what the option is for.
    assert jaccard(text_of(tmp_path / "a1_t0.html"), text_of(tmp_path / "a1_t1.html")) < same
    assert jaccard(text_of(tmp_path / "a1_t0.html", options=main), a1) >= 0.95
    # A page with too little text to tell content from template keeps its words (no empty document).
    (tmp_path / "short.html").write_text("<html><body><p>only three words</p></body></html>", encoding="utf-8")
    assert text_of(tmp_path / "short.html", options=main) == "only three words"


@needs_lxml
def test_html_charset_that_lies_or_is_missing(tmp_path):
    plain = "\n".join(paragraphs(40, 10))
    body = "".join(f"<p>{p}</p>" for p in plain.split("\n"))
    cases = {  # (bytes, what they are)
        "utf8-says-latin1": f"<html><head><meta charset='iso-8859-1'></head><body>{body}</body></html>"
                            .encode(),
        "cp1252-says-utf8": f"<html><head><meta http-equiv='Content-Type' content='text/html; charset=utf-8'>"
                            f"</head><body>{body}</body></html>".encode("cp1252"),
        "cp1252-no-meta": f"<html><body>{body}</body></html>".encode("cp1252"),
        "utf16-bom": f"<html><body>{body}</body></html>".encode("utf-16"),
    }
    for name, data in cases.items():
        (tmp_path / f"{name}.html").write_bytes(data)
        text = text_of(tmp_path / f"{name}.html")
        assert "Straße" in text and "café" in text and "Ã" not in text and "\ufffd" not in text, name
        assert jaccard(text, plain) >= 0.95, name


# ------------------------------------------------------------------------------------------------- e-mail

def test_mbox_one_document_per_message_malformed_counted(tmp_path):
    msgs = [make_eml(f"subject {i}", paragraphs(50 + i, 2)[0]) for i in range(4)]
    bad = b"this line is no header at all\nneither is this\n\nbody of a broken message\n"
    quoted = make_eml("quoted", "a body with\n\nFrom here a line that looks like a separator\n")
    quoted = quoted.replace(b"\nFrom here", b"\n>From here")  # mboxrd quoting, as mail tools write it
    parts = [msgs[0], bad, msgs[1], quoted, msgs[2], msgs[3]]
    data = b"".join(b"From someone@example.org Mon Jan  1 10:00:00 2024\n" + m.rstrip(b"\n") + b"\n\n"
                    for m in parts)
    (tmp_path / "box").write_bytes(data)
    assert ex.detect(data[:ex.HEAD], "box") == "mbox"
    notes = []
    got = dict(ex.extract(str(tmp_path / "box"), None, ex.ExtractOptions(), notes.append))
    assert list(got) == ["#1", "#3", "#4", "#5", "#6"]  # positions in the mbox, the broken #2 skipped
    assert got["#1"].startswith("subject 0\n") and jaccard(got["#1"], "subject 0 " + paragraphs(50, 2)[0]) >= 0.95
    assert "From here a line" in got["#4"]
    assert notes == [f"{tmp_path / 'box'}: 1 of 6 messages malformed, skipped"]


# ------------------------------------------------------------------------------------------------ bad input

def _error(path, cls, text, options=ex.ExtractOptions()):
    with pytest.raises(cls) as info:
        text_of(path, options=options)
    message = str(info.value)
    assert message == f"{path}: {info.value.reason}" and "\n" not in message
    assert text in message, message
    return info.value


def test_truncated_and_corrupt_files_of_each_format(tmp_path):
    cases = _cases(tmp_path)
    for case in ("docx", "odt", "epub", "pdf", "gz", "bz2", "xz", "zst", "docx.bz2.gz"):
        if case not in cases:
            continue
        path, _ = cases[case]
        data = path.read_bytes()
        cut = tmp_path / f"cut_{path.name}"
        cut.write_bytes(data[:len(data) // 2])
        _error(cut, ex.Corrupt, "corrupt or truncated")
    (tmp_path / "zip.docx").write_bytes(b"PK\x03\x04" + bytes(200))
    _error(tmp_path / "zip.docx", ex.Corrupt, "corrupt or truncated")
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:
        z.writestr("a.jpg", b"\xff\xd8")
    _error(tmp_path / "photos.zip", ex.Unsupported, "zip archive without a document in it: skipped")
    (tmp_path / "a.bin").write_bytes(b"\x7fELF\x00\x00")
    _error(tmp_path / "a.bin", ex.Unsupported, "binary, skipped")
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    _error(tmp_path / "old.doc", ex.Unsupported, "legacy MS Office format")


def test_read_error_of_the_disk_is_not_called_corrupt(tmp_path, monkeypatch):
    import errno
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"words " * 1000))
    real_open = open

    class Failing(io.BufferedReader):
        def read(self, *args):
            if self.tell() > 0:
                raise OSError(errno.EIO, "Input/output error")
            return super().read(*args)

    monkeypatch.setattr(ex, "open", lambda path, mode: Failing(real_open(path, "rb", buffering=0)), raising=False)
    with pytest.raises(OSError) as info:
        text_of(tmp_path / "a.txt.gz")
    assert info.value.errno == errno.EIO and not isinstance(info.value, ex.ExtractError)


def test_encrypted_office_files(tmp_path):
    # Word and LibreOffice save a password-protected .docx as an OLE file holding an EncryptedPackage stream.
    (tmp_path / "secret.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500)
                                           + "EncryptedPackage".encode("utf-16-le") + bytes(500))
    _error(tmp_path / "secret.docx", ex.Encrypted, "encrypted office document: skipped")
    make_odt(tmp_path / "secret.odt", paragraphs(6), encrypted=True)
    _error(tmp_path / "secret.odt", ex.Encrypted, "encrypted ODT: skipped")
    make_docx(tmp_path / "zipcrypto.docx", paragraphs(6))
    data = bytearray((tmp_path / "zipcrypto.docx").read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:  # set the "encrypted" bit of every central directory entry
        data[at + 8] |= 1
        at = data.find(b"PK\x01\x02", at + 4)
    (tmp_path / "zipcrypto.docx").write_bytes(bytes(data))
    _error(tmp_path / "zipcrypto.docx", ex.Encrypted, "encrypted zip members: skipped")


@needs_pdf
def test_encrypted_and_scanned_pdfs(tmp_path):
    plain = tmp_path / "plain.pdf"
    plain.write_bytes(make_pdf(paragraphs(7, 3, True)))
    secret = tmp_path / "secret.pdf"
    if shutil.which("qpdf"):
        subprocess.run(["qpdf", "--encrypt", "user-pw", "owner-pw", "256", "--", str(plain), str(secret)],
                       check=True)
    elif importlib.util.find_spec("pypdf"):
        from pypdf import PdfWriter
        writer = PdfWriter(clone_from=str(plain))
        writer.encrypt("user-pw")
        writer.write(str(secret))
    else:
        pytest.skip("no tool to encrypt a PDF: apt-get install qpdf or pip install pypdf")
    _error(secret, ex.Encrypted, "encrypted PDF: skipped")
    if importlib.util.find_spec("pypdf"):  # only an owner password (print/copy limits): the text is readable
        from pypdf import PdfWriter
        writer = PdfWriter(clone_from=str(plain))
        writer.encrypt("", "owner-pw")
        writer.write(str(tmp_path / "limited.pdf"))
        assert text_of(tmp_path / "limited.pdf") == text_of(plain) != ""
    (tmp_path / "scan.pdf").write_bytes(make_pdf(["", ""]))  # pages, no text (what a scanner's PDF reads as)
    _error(tmp_path / "scan.pdf", ex.NoText, "no text layer (scanned?): skipped")
    _error(plain, ex.Refused, "3 pages, more than the limit of 2: refused", ex.ExtractOptions(max_pages=2))


def _peak_rss_mib(code: str) -> tuple[float, str]:
    """Peak resident memory (MiB) of a fresh interpreter running code, and what it printed."""
    script = (f"import resource, sys\nsys.path.insert(0, {str(REPO)!r})\n{code}\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    *lines, peak = out.stdout.strip().split("\n")
    return float(peak), "\n".join(lines)


REFUSE = """
from nearDup.text import extract as ex
try:
    for _ in ex.extract({path!r}, None, ex.ExtractOptions(max_bytes=16 << 20)):
        print("read")
except ex.ExtractError as exc:
    print(type(exc).__name__, exc.reason)
"""


def test_zip_and_compression_bombs_refused_in_bounded_memory(tmp_path):
    mib = 1 << 20
    bomb = tmp_path / "bomb.docx"  # document.xml expands to 400 MiB: one run of text, the worst case to buffer
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(f'<w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>'.encode())
            chunk = b"a" * mib
            for _ in range(400):
                member.write(chunk)
    assert bomb.stat().st_size < 4 * mib
    gz = tmp_path / "bomb.txt.gz"
    with gzip.open(gz, "wb", compresslevel=1) as f:
        chunk = bytes(mib)
        for _ in range(400):
            f.write(chunk)
    nested = tmp_path / "bomb.docx.gz"  # within the limit as a .gz, a bomb once its zip is opened
    nested.write_bytes(gzip.compress(bomb.read_bytes()))
    baseline, _ = _peak_rss_mib("import nearDup.text.extract")
    for path, words in ((bomb, "Refused member word/document.xml expands past 16 MiB: refused"),
                        (gz, "Refused expands past 16 MiB: refused"),
                        (nested, "Refused member word/document.xml expands past")):
        peak, printed = _peak_rss_mib(REFUSE.format(path=str(path)))
        assert printed.startswith(words), printed
        assert peak - baseline < 80, (path.name, peak, baseline)  # 400 MiB expanded would show
    packers = [("bz2", bz2.compress), ("xz", lzma.compress)]
    if HAS_ZSTD:
        import zstandard
        packers.append(("zst", zstandard.ZstdCompressor().compress))
    for ext, pack in packers:
        (tmp_path / f"b.txt.{ext}").write_bytes(pack(bytes(20 * mib)))
        _error(tmp_path / f"b.txt.{ext}", ex.Refused, "expands past 16 MiB: refused",
               ex.ExtractOptions(max_bytes=16 * mib))


@needs_zstd
def test_zst_in_memory_in_one_call_when_its_frame_says_its_size(tmp_path, monkeypatch):
    # The stage hands the extractor a file's bytes: a .zst whose one frame declares a size within the limits is
    # decompressed in one call (it was streamed through _Zstd, 17 us a 2 KB file); anything else still streams.
    import zstandard

    raw = " ".join(paragraphs(21, 6)).encode()
    frames = {"sized": zstandard.ZstdCompressor().compress(raw),
              "unsized": zstandard.ZstdCompressor(write_content_size=False).compress(raw),
              "two frames": b"".join(zstandard.ZstdCompressor().compress(part) for part in (raw[:500], raw[500:]))}
    assert zstandard.frame_content_size(frames["sized"]) == len(raw)
    assert zstandard.frame_content_size(frames["unsized"]) == -1
    streamed = []

    class Spy(ex._Zstd):
        def __init__(self, *args):
            streamed.append(1)
            super().__init__(*args)

    monkeypatch.setattr(ex, "_Zstd", Spy)
    for case, data in frames.items():
        streamed.clear()
        text = "\n".join(t for _, t in ex.extract(str(tmp_path / "gone.txt.zst"), "zst", data=data))
        assert text == raw.decode(), case
        assert streamed == ([] if case == "sized" else [1]), case
        (tmp_path / "doc.txt.zst").write_bytes(data)
        assert text_of(tmp_path / "doc.txt.zst") == text, case  # from the file on disk (streamed): the same text

    # A frame that declares fewer bytes than it holds is refused by libzstd in the one call and by the stream:
    # corrupt, never more than declared. (Frame header: magic, descriptor 0x60 = single segment with a 2-byte
    # size field holding size - 256.)
    data = bytearray(frames["sized"])
    assert data[4] == 0x60 and int.from_bytes(data[5:7], "little") + 256 == len(raw)
    data[5:7] = (300 - 256).to_bytes(2, "little")
    (tmp_path / "lies.txt.zst").write_bytes(bytes(data))
    with pytest.raises(ex.Corrupt):
        list(ex.extract(str(tmp_path / "lies.txt.zst"), "zst", data=bytes(data)))

    # Bombs in memory: past the budget or IN_MEMORY, sized or not, refused by the bounded stream
    mib = 1 << 20
    for case, bomb in (("sized", zstandard.ZstdCompressor().compress(bytes(20 * mib))),
                       ("unsized", zstandard.ZstdCompressor(write_content_size=False).compress(bytes(20 * mib))),
                       ("within IN_MEMORY, past the budget", zstandard.ZstdCompressor().compress(bytes(mib)))):
        streamed.clear()
        with pytest.raises(ex.Refused, match="expands past 512 KiB: refused"):
            list(ex.extract("bomb.txt.zst", "zst", ex.ExtractOptions(max_bytes=mib // 2), data=bomb))
        assert streamed == [1], case


@needs_zstd
def test_zst_bomb_in_memory_bounded_whatever_its_frame_declares(tmp_path):
    # A 400 MiB frame of 13 KB, handed over as bytes as the stage does: its declared size is above the limit, so
    # it is never allocated for the one-shot call; the stream refuses it at the limit.
    import zstandard

    path = tmp_path / "bomb.txt.zst"
    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f, size=400 << 20) as w:
        for _ in range(400):
            w.write(bytes(1 << 20))
    assert path.stat().st_size < 1 << 20 and zstandard.frame_content_size(path.read_bytes()) == 400 << 20
    baseline, _ = _peak_rss_mib("import nearDup.text.extract")
    peak, printed = _peak_rss_mib(REFUSE.replace("None, ex.ExtractOptions", "'zst', ex.ExtractOptions").replace(
        "max_bytes=16 << 20)", f"max_bytes=16 << 20), data=open({str(path)!r}, 'rb').read()").format(path="b.zst"))
    assert printed == "Refused expands past 16 MiB: refused", printed
    assert peak - baseline < 80, (peak, baseline)


@needs_pdf
def test_long_pdf_is_read_page_by_page(tmp_path):
    words = paragraphs(8, 1, True)[0].split()[:24]
    for n in (100, 2000):
        (tmp_path / f"p{n}.pdf").write_bytes(make_pdf([f"page{i} " + " ".join(words) for i in range(n)]))
    code = ("from nearDup.text import extract as ex\n"
            "text = '\\n'.join(t for _, t in ex.extract({path!r}))\n"
            "print(text.count('page'), 'page1999' in text)")
    small, _ = _peak_rss_mib(code.format(path=str(tmp_path / "p100.pdf")))
    large, printed = _peak_rss_mib(code.format(path=str(tmp_path / "p2000.pdf")))
    assert printed == "2000 True"
    assert large - small < 40, (small, large)


def test_missing_extra_names_the_format_and_the_command(tmp_path, monkeypatch):
    for module in ("pypdfium2", "lxml", "lxml.html", "zstandard"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    (tmp_path / "a.pdf").write_bytes(make_pdf(["some words here"]))
    (tmp_path / "a.html").write_text("<p>some words</p>", encoding="utf-8")
    (tmp_path / "a.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))
    for name, fmt in (("a.pdf", "pdf"), ("a.html", "html"), ("a.txt.zst", "zst")):
        error = _error(tmp_path / name, ex.MissingExtra, "needs the formats extra: pip install 'nearDup[formats]'")
        assert error.format == fmt
    # Plain text, DOCX, ODT and gzip need no extra.
    make_docx(tmp_path / "a.docx", ["still read without extras"])
    assert text_of(tmp_path / "a.docx") == "still read without extras"


def test_version_changes_with_format_options_and_library():
    assert ex.version("docx") == "docx1"
    assert ex.version("html") != ex.version("html", ex.ExtractOptions(html_main=True))
    if HAS_PDFIUM:
        import pypdfium2
        assert ex.version("pdf").startswith("pdf1,pypdfium2-") and "pypdfium2" in ex.version("gz")
        assert pypdfium2 is not None


def test_a_text_file_that_starts_with_a_tag_stays_text():
    """IMDb's reviews are .txt files that begin with <br /><br />: read as text (markup words and all, as before
    formats existed), not as HTML pages; a page is HTML whatever its name, and a nameless fragment is HTML."""
    review = b"<br /><br />Summary: Not worth the film<br /><br />As an avid fan, I was disappointed."
    assert ex.detect(review, "test/neg/2258_1.txt") == "text"
    assert ex.detect(b"<p>one paragraph</p>", "notes.md") == "text"
    assert ex.detect(review, "review") == "html"  # no name that says text: the tag decides
    assert ex.detect(b"<!DOCTYPE html><p>a page</p>", "saved.txt") == "html"
    assert ex.detect(b"<html><body>a page</body></html>", "saved.txt") == "html"


def test_a_text_file_with_markup_is_compared_as_its_words(tmp_path):
    """End to end: two .txt reviews starting with <br /> score the brute-force Jaccard of all their words."""
    from conftest import reference_shingles

    words = [f"w{i}" for i in range(60)]
    a = "<br /><br />" + " ".join(words) + "<br /><br />the end"
    b = "<br /><br />" + " ".join(words[:30] + ["changed"] + words[31:]) + "<br /><br />the end"
    (tmp_path / "a.txt").write_text(a)
    (tmp_path / "b.txt").write_text(b)
    out = subprocess.run([sys.executable, "-m", "nearDup", "compare", str(tmp_path / "a.txt"), str(tmp_path / "b.txt")],
                         capture_output=True, text=True)
    sa, sb = reference_shingles(a), reference_shingles(b)
    assert out.stdout.splitlines()[0] == f"jaccard\t{len(sa & sb) / len(sa | sb):.4f}", out.stderr
