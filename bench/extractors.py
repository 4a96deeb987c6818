"""Which library should read each document format: speed, fidelity, licence and size of the candidates.

    python bench/extractors.py [--docs 60] [--repeat 3] [--out bench/out/formats]

Fixtures are made here, not shipped: the first --docs articles of /work/shared/corpora/bbcnews.jsonl.gz become .txt
files, which LibreOffice (headless, one invocation per target format) saves as PDF, DOCX and ODT and pandoc as EPUB
and HTML; a second HTML set wraps each article in two site templates (navigation, header, sidebar, footer) for the
main-content extractors; .eml, .gz, .bz2, .xz and .zst are made with the standard library and zstandard. Needs
`apt-get install libreoffice-writer-nogui pandoc poppler-utils` and the candidates (pip install, see
RESULTS-formats.md).

For each candidate: median wall time of --repeat passes over all files of its format (files/s, MB/s of extracted
text), and the fidelity of its words: the exact Jaccard of word 5-shingles (tests/conftest.py's reference_shingles)
between the extracted text and the source .txt, mean and minimum over the files. Main-content extractors are also
scored on discrimination: the same article under two templates should stay alike, two articles under one template
should not. nearDup's own extract() is timed beside the bare library it wraps: the difference is its overhead.
"""
from __future__ import annotations

import argparse
import bz2
import email.message
import gzip
import itertools
import json
import lzma
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
from conftest import reference_shingles  # noqa: E402

CORPUS = "/work/shared/corpora/bbcnews.jsonl.gz"

TEMPLATES = {
    "a": ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title} | Daily Planet</title>"
          "<style>body{{font-family:serif}}</style><script>var tracking = 'pageview';</script></head><body>"
          "<header><div class='logo'>The Daily Planet</div><nav><ul><li><a href='/'>Home</a></li>"
          "<li><a href='/world'>World news from every continent</a></li><li><a href='/business'>Business and "
          "markets today</a></li><li><a href='/sport'>Sport results and fixtures</a></li></ul></nav></header>"
          "<main><article><h1>{title}</h1>{body}</article></main>"
          "<aside><h2>Most read this week</h2><ul><li><a href='/1'>Ten things you did not know about the city "
          "council</a></li><li><a href='/2'>Weather warning issued for the whole region this weekend</a></li>"
          "</ul></aside><footer><p>Copyright 2024 The Daily Planet. All rights reserved. Read our privacy policy "
          "and cookie settings before you subscribe to the newsletter.</p></footer></body></html>"),
    "b": ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title} - News Online</title>"
          "<script src='/ads.js'></script></head><body><div id='top'><span>News Online</span>"
          "<div class='menu'><a href='/'>Front page</a> | <a href='/uk'>United Kingdom politics</a> | "
          "<a href='/tech'>Technology and science coverage</a> | <a href='/weather'>Local weather forecast</a>"
          "</div></div><div id='content'><div class='story'><h1>{title}</h1>{body}</div>"
          "<div class='share'>Share this story on social media with your friends and family</div></div>"
          "<div id='sidebar'><h3>Related stories</h3><p><a href='/x'>Minister announces review of rail fares "
          "across the network</a></p><p><a href='/y'>Local school wins national award for science teaching"
          "</a></p></div><div id='footer'>News Online is not responsible for the content of external sites. "
          "Terms of use. About us. Contact the newsroom. Accessibility help.</div></body></html>"),
}


# --------------------------------------------------------------------------------------------------- fixtures

def make_fixtures(out: Path, n: int) -> dict[str, str]:
    """{stem: source text}; files under out/<format>/<stem>.<ext>, made once (reused when present)."""
    src = out / "txt"
    src.mkdir(parents=True, exist_ok=True)
    texts = {}
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            texts[f"d{i:03d}"] = json.loads(line)["text"]
    for stem, text in texts.items():
        path = src / f"{stem}.txt"
        if not path.exists():
            path.write_text(text, encoding="utf-8")
    for fmt in ("epub", "html", "frag"):
        (out / fmt).mkdir(exist_ok=True)
    pandoc = []
    for stem, text in texts.items():
        title = text.split("\n", 1)[0]
        md = str(src / f"{stem}.txt")
        for fmt, args in (("epub", ["-t", "epub", "--metadata", f"title={title}"]),
                          ("html", ["-t", "html", "-s", "--metadata", f"title={title}"]),
                          ("frag", ["-t", "html"])):
            target = out / fmt / f"{stem}.{'html' if fmt == 'frag' else fmt}"
            if not target.exists():
                pandoc.append(["pandoc", "-f", "markdown", *args, "-o", str(target), md])
    with ThreadPoolExecutor(3) as pool:  # pandoc (mostly its start-up's waiting) beside LibreOffice
        done = pool.map(lambda cmd: subprocess.run(cmd, check=True), pandoc)
        for fmt in ("pdf", "docx", "odt"):
            folder = out / fmt
            folder.mkdir(exist_ok=True)
            # only the missing files, in batches: a 2,200-file set takes LibreOffice about an hour, so an interrupted
            # build resumes where it stopped
            missing = [str(src / f"{stem}.txt") for stem in sorted(texts) if not (folder / f"{stem}.{fmt}").exists()]
            for i in range(0, len(missing), 100):
                subprocess.run(["soffice", "--headless", "--convert-to", fmt, "--outdir", str(folder),
                                *missing[i:i + 100]], check=True, capture_output=True)
        for _ in done:
            pass
    for stem, text in texts.items():
        title = text.split("\n", 1)[0]
        for name, template in TEMPLATES.items():
            folder = out / f"site_{name}"
            folder.mkdir(exist_ok=True)
            body = (out / "frag" / f"{stem}.html").read_text(encoding="utf-8")
            (folder / f"{stem}.html").write_text(template.format(title=title, body=body), encoding="utf-8")
        msg = email.message.EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "desk@example.org", "reader@example.org", title
        msg.set_content(text.split("\n", 1)[1] if "\n" in text else "")
        (out / "eml").mkdir(exist_ok=True)
        (out / "eml" / f"{stem}.eml").write_bytes(bytes(msg))
        raw = text.encode("utf-8")
        for ext, pack in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress),
                          ("zst", _zstd)):
            (out / ext).mkdir(exist_ok=True)
            (out / ext / f"{stem}.txt.{ext}").write_bytes(pack(raw))
    return texts


def _zstd(data: bytes) -> bytes:
    import zstandard
    return zstandard.ZstdCompressor().compress(data)


# ------------------------------------------------------------------------------------------------ candidates

def _visible_lxml(data) -> str:
    from nearDup.text.extract import html_text
    return html_text(data if isinstance(data, str) else data.decode("utf-8", "replace"))


def pdf_pypdf(path):
    from pypdf import PdfReader
    return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def pdf_pdfminer(path):
    from pdfminer.high_level import extract_text
    return extract_text(path)


def pdf_pypdfium2(path):
    import pypdfium2 as pdfium
    doc = pdfium.PdfDocument(path)
    out = []
    for i in range(len(doc)):
        page = doc[i]
        textpage = page.get_textpage()
        out.append(textpage.get_text_range())
        textpage.close()
        page.close()
    doc.close()
    return "\n".join(out)


def pdf_pymupdf(path):
    import pymupdf
    with pymupdf.open(path) as doc:
        return "\n".join(page.get_text() for page in doc)


def pdf_pdftotext(path):
    return subprocess.run(["pdftotext", "-enc", "UTF-8", path, "-"], capture_output=True, check=True).stdout.decode()


def docx_python_docx(path):
    import docx
    document = docx.Document(path)
    out = [p.text for p in document.paragraphs]
    for table in document.tables:
        out.extend(cell.text for row in table.rows for cell in row.cells)
    return "\n".join(out)


def docx_docx2txt(path):
    import docx2txt
    return docx2txt.process(path)


def odt_odfpy(path):
    from odf import teletype
    from odf import text as odftext
    from odf.opendocument import load
    doc = load(path)
    return "\n".join(teletype.extractText(p) for tag in (odftext.H, odftext.P) for p in doc.getElementsByType(tag))


def html_selectolax(path):
    from selectolax.lexbor import LexborHTMLParser  # selectolax 1.0 dropped the Modest engine
    tree = LexborHTMLParser(Path(path).read_bytes())
    tree.strip_tags(["script", "style", "noscript", "template", "head"])
    return tree.body.text(separator="\n") if tree.body else ""


def html_bs4_parser(path, parser="html.parser"):
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(Path(path).read_bytes(), parser)
    for el in soup(["script", "style", "noscript", "template", "head"]):
        el.decompose()
    return soup.get_text("\n")


def html_bs4_html5lib(path):
    return html_bs4_parser(path, "html5lib")


def html_stdlib(path):
    from html.parser import HTMLParser

    class Visible(HTMLParser):
        def __init__(self):
            super().__init__()
            self.out, self.skip = [], 0

        def handle_starttag(self, tag, attrs):
            if tag in ("script", "style", "noscript", "template", "head"):
                self.skip += 1
            self.out.append("\n")

        def handle_endtag(self, tag):
            if tag in ("script", "style", "noscript", "template", "head"):
                self.skip -= 1
            self.out.append("\n")

        def handle_data(self, data):
            if not self.skip:
                self.out.append(data)

    parser = Visible()
    parser.feed(Path(path).read_bytes().decode("utf-8", "replace"))
    return "".join(parser.out)


def html_lxml(path):
    return _visible_lxml(Path(path).read_bytes())


def main_trafilatura(path):
    import trafilatura
    return trafilatura.extract(Path(path).read_text(encoding="utf-8"), include_comments=False,
                               include_tables=True) or ""


def main_readability(path):
    from readability import Document
    return _visible_lxml(Document(Path(path).read_text(encoding="utf-8")).summary())


def main_justext(path):
    import justext
    paragraphs = justext.justext(Path(path).read_bytes(), justext.get_stoplist("English"))
    return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)


def epub_ebooklib(path):
    import ebooklib  # noqa: F401
    from ebooklib import epub
    book = epub.read_epub(path, options={"ignore_ncx": True})
    out = []
    for idref, _ in book.spine:
        item = book.get_item_with_id(idref)
        if item is not None:
            out.append(_visible_lxml(item.get_content()))
    return "\n".join(out)


def bare_gzip(path):
    return gzip.decompress(Path(path).read_bytes()).decode("utf-8")


def bare_bz2(path):
    return bz2.decompress(Path(path).read_bytes()).decode("utf-8")


def bare_xz(path):
    return lzma.decompress(Path(path).read_bytes()).decode("utf-8")


def bare_zstd(path):
    import zstandard
    return zstandard.ZstdDecompressor().decompressobj().decompress(Path(path).read_bytes()).decode("utf-8")


def bare_email(path):
    import email as stdlib_email
    import email.policy
    msg = stdlib_email.message_from_bytes(Path(path).read_bytes(), policy=email.policy.default)
    return msg["subject"] + "\n" + msg.get_body(("plain", "html")).get_content()


def neardup(main=False):
    from nearDup.text.extract import ExtractOptions, extract

    options = ExtractOptions(html_main=main)

    def run(path):
        return "\n".join(text for _, text in extract(path, None, options))
    return run


# (format folder, candidate name, function, distributions it needs (for licence and size))
CANDIDATES = [
    ("pdf", "pypdf", pdf_pypdf, ["pypdf"]),
    ("pdf", "pdfminer.six", pdf_pdfminer, ["pdfminer.six"]),
    ("pdf", "pypdfium2", pdf_pypdfium2, ["pypdfium2"]),
    ("pdf", "PyMuPDF", pdf_pymupdf, ["pymupdf"]),
    ("pdf", "pdftotext (poppler CLI)", pdf_pdftotext, []),
    ("pdf", "nearDup (pypdfium2)", neardup(), ["pypdfium2"]),
    ("docx", "python-docx", docx_python_docx, ["python-docx"]),
    ("docx", "docx2txt", docx_docx2txt, ["docx2txt"]),
    ("docx", "nearDup (stdlib zip+ElementTree)", neardup(), []),
    ("odt", "odfpy", odt_odfpy, ["odfpy"]),
    ("odt", "nearDup (stdlib zip+ElementTree)", neardup(), []),
    ("html", "selectolax", html_selectolax, ["selectolax"]),
    ("html", "BeautifulSoup + html.parser", html_bs4_parser, ["beautifulsoup4"]),
    ("html", "BeautifulSoup + html5lib", html_bs4_html5lib, ["beautifulsoup4", "html5lib"]),
    ("html", "stdlib html.parser", html_stdlib, []),
    ("html", "lxml (nearDup's walker, bare)", html_lxml, ["lxml"]),
    ("html", "nearDup (lxml + charset)", neardup(), ["lxml", "charset-normalizer"]),
    ("site_a", "visible text (nearDup, lxml)", neardup(), ["lxml"]),
    ("site_a", "trafilatura", main_trafilatura, ["trafilatura"]),
    ("site_a", "readability-lxml", main_readability, ["readability-lxml"]),
    ("site_a", "jusText", main_justext, ["justext"]),
    ("site_a", "nearDup --html main (trafilatura)", neardup(main=True), ["trafilatura"]),
    ("epub", "ebooklib (+ lxml walker)", epub_ebooklib, ["ebooklib", "lxml"]),
    ("epub", "nearDup (stdlib zip + lxml walker)", neardup(), ["lxml"]),
    ("eml", "stdlib email (bare)", bare_email, []),
    ("eml", "nearDup (stdlib email)", neardup(), []),
    ("gz", "gzip.decompress (bare)", bare_gzip, []),
    ("gz", "nearDup (streamed, limited)", neardup(), []),
    ("bz2", "bz2.decompress (bare)", bare_bz2, []),
    ("bz2", "nearDup (streamed, limited)", neardup(), []),
    ("xz", "lzma.decompress (bare)", bare_xz, []),
    ("xz", "nearDup (streamed, limited)", neardup(), []),
    ("zst", "zstandard (bare)", bare_zstd, ["zstandard"]),
    ("zst", "nearDup (streamed, limited)", neardup(), ["zstandard"]),
]
MAIN = {"trafilatura": main_trafilatura, "readability-lxml": main_readability, "jusText": main_justext,
        "visible text (no main mode)": None}


# ---------------------------------------------------------------------------------------------- measurement

def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def measure(files: list[Path], candidates: list[tuple[str, object]], truth: dict[str, set], repeat: int) -> dict:
    """{name: result} for the candidates of one format. Passes are interleaved (candidate 1, 2, ..., then again)
    so that the load of a shared machine falls alike on the rows compared, nearDup's and its bare library's."""
    results, times, texts = {}, {}, {}
    for name, fn in candidates:
        try:
            fn(str(files[0]))  # imports and caches out of the timing
        except Exception as exc:  # a candidate that cannot run is reported, not fatal
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:80]}
        else:
            times[name], texts[name] = [], {}
    for _ in range(repeat):
        for name, fn in candidates:
            if name not in times:
                continue
            start = time.perf_counter()
            for path in files:
                texts[name][path.name] = fn(str(path))
            times[name].append(time.perf_counter() - start)
    for name in times:
        seconds = statistics.median(times[name])
        scores = [jaccard(reference_shingles(texts[name][p.name]), truth[p.name.split(".")[0]]) for p in files]
        results[name] = {"seconds": seconds, "files_s": len(files) / seconds,
                         "mb_s": sum(len(t.encode()) for t in texts[name].values()) / seconds / 1e6,
                         "j_mean": statistics.mean(scores), "j_min": min(scores)}
    return results


OVERHEAD = [("pdf", pdf_pypdfium2), ("docx", docx_docx2txt), ("html", html_lxml), ("site_a", main_trafilatura),
            ("epub", epub_ebooklib), ("eml", bare_email), ("gz", bare_gzip), ("zst", bare_zstd)]


def overhead(out: Path, rounds: int) -> None:
    """nearDup's extract() against the bare library call, in alternating passes (bare, nearDup, bare, ...), so
    a shared machine's load drift falls on both: the ratio of the median passes."""
    print(f"\nnearDup over the bare library, median of {rounds} alternating passes")
    for folder, bare in OVERHEAD:
        files = sorted((out / folder).iterdir())
        ours = neardup(main=folder == "site_a")
        times = {bare: [], ours: []}
        for _ in range(rounds):
            for fn in (bare, ours):
                start = time.perf_counter()
                for path in files:
                    fn(str(path))
                times[fn].append(time.perf_counter() - start)
        a, b = statistics.median(times[bare]), statistics.median(times[ours])
        print(f"  {folder:7} bare {1e3 * a / len(files):7.3f} ms/file   nearDup {1e3 * b / len(files):7.3f} ms/file   "
              f"{100 * (b / a - 1):+5.0f}%", flush=True)


def dist_info(names: list[str]) -> tuple[str, float]:
    """Licences of the distributions and installed size (MB) of them with their dependency closure."""
    seen, licences = set(), []
    todo = list(names)
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo.extend(r for r in dist.requires or [] if "extra ==" not in r)
    size = 0
    for name in seen:
        dist = metadata.distribution(name)
        size += sum(f.size or 0 for f in dist.files or [])
    for name in names:
        try:
            meta = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            licences.append("?")
            continue
        lic = meta.get("License-Expression") or ""
        if not lic:
            classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License")]
            lic = ", ".join(classifiers) or (meta.get("License") or "?").split("\n")[0][:30]
        licences.append(f"{name}: {lic}")
    return "; ".join(licences) or "stdlib", size / 1e6


def discrimination(out: Path, stems: list[str], fn) -> tuple[float, float]:
    """Mean J(article under template a, same article under b) and mean J(article i, article i+1 under a)."""
    def shingles(folder, stem):
        return reference_shingles(fn(str(out / folder / f"{stem}.html")))
    a = {s: shingles("site_a", s) for s in stems}
    b = {s: shingles("site_b", s) for s in stems}
    same = statistics.mean(jaccard(a[s], b[s]) for s in stems)
    other = statistics.mean(jaccard(a[s], a[t]) for s, t in itertools.pairwise(stems))
    return same, other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "formats"))
    ap.add_argument("--only", default="", help="comma-separated format folders to measure")
    args = ap.parse_args()
    out = Path(args.out)
    start = time.perf_counter()
    texts = make_fixtures(out, args.docs)
    print(f"fixtures: {args.docs} texts x 11 forms in {out} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    truth = {stem: reference_shingles(text) for stem, text in texts.items()}
    only = set(filter(None, args.only.split(",")))
    print(f"{'format':7} {'candidate':36} {'files/s':>8} {'MB/s':>6} {'J mean':>6} {'J min':>6} "
          f"{'MB inst':>7}  licence")
    folders = [f for f in dict.fromkeys(c[0] for c in CANDIDATES) if not only or f in only]
    for folder in folders:
        rows = [c for c in CANDIDATES if c[0] == folder]
        files = sorted((out / folder).iterdir())
        results = measure(files, [(name, fn) for _, name, fn, _ in rows], truth, args.repeat)
        for _, name, _fn, dists in rows:
            result = results[name]
            licence, size = dist_info(dists)
            if "error" in result:
                print(f"{folder:7} {name:36} {result['error']}")
                continue
            print(f"{folder:7} {name:36} {result['files_s']:8.1f} {result['mb_s']:6.2f} {result['j_mean']:6.3f} "
                  f"{result['j_min']:6.3f} {size:7.1f}  {licence}", flush=True)
    overhead(out, max(args.repeat, 5))
    if not only or "site_a" in only:
        stems = sorted(texts)[:20]
        print("\nmain content: mean J(same article, templates a and b) / mean J(two articles, template a)")
        for name, fn in MAIN.items():
            same, other = discrimination(out, stems, fn or neardup())
            print(f"  {name:30} same {same:.3f}   different {other:.3f}", flush=True)


if __name__ == "__main__":
    main()
