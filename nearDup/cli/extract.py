"""`neardup extract FILE...`: the text nearDup reads from each file (what it shingles, before normalising), so a
user can see why two documents did or did not match; and the --formats and --html source options.
"""
from __future__ import annotations

import click
import numpy as np

from ..config import DOCUMENT_FORMATS, HTML_MODES, SourceParams
from ..text.inputs import list_items
from ..text.read import missing_extras_note, read_documents
from .admin import Command

_CHOICES = DOCUMENT_FORMATS


def _formats(ctx, param, value) -> tuple[str, ...]:
    """--formats pdf,docx,text: the formats read (empty: all), checked and in a fixed order (it is fingerprinted)."""
    if not value:
        return ()
    asked = {f.strip().lower() for f in value.split(",") if f.strip()}
    unknown = sorted(asked - set(_CHOICES))
    if unknown:
        raise click.BadParameter(f"unknown format {', '.join(unknown)}; choose from {', '.join(_CHOICES)}")
    return tuple(f for f in _CHOICES if f in asked)


formats_options = (
    click.option("--formats", metavar="LIST", callback=_formats,
                 help=f"Read only files of these formats, comma-separated: {', '.join(_CHOICES)} (gz, bz2, xz, "
                      f"zst: compressed files, whatever they hold) [default: all]."),
    click.option("--html", type=click.Choice(HTML_MODES),  # None (visible) keeps it out of headers
                 help="HTML pages: all visible text, or only the main content (no navigation, headers, footers; "
                      "trafilatura) [default: visible]."),
)


@click.command("extract", cls=Command)
@click.argument("paths", nargs=-1, required=True, type=str)
@formats_options[0]
@formats_options[1]
@click.pass_context
def extract_command(ctx, paths, formats, html):
    """Print the text nearDup reads from each FILE (or from the files of a folder): the extracted text of a PDF,
    office document, HTML page, e-mail or compressed file, the decoded text of a plain one. With several
    documents, each is headed by `==> ID <==`. Exit 2 if a file could not be read."""
    source = SourceParams(formats=formats, html=html or SourceParams.html)
    problems: dict = {}
    items = list_items(list(paths), source).items
    documents = [doc for _, doc in read_documents(items, source, problems)]
    for i, doc in enumerate(documents):
        if len(documents) > 1:
            click.echo(f"{'' if i == 0 else chr(10)}==> {doc.id} <==")
        text = doc.text if doc.text is not None else "".join(doc.pieces or ())
        click.echo(text.rstrip("\n"))
    for message in problems.get("messages", []):
        click.echo(f"neardup: warning: {message}", err=True)
    for doc_id in problems.get("binary_ids", ()):
        click.echo(f"neardup: warning: {doc_id}: binary, not a format nearDup reads: skipped", err=True)
    if problems.get("other_format"):
        click.echo(f"neardup: warning: {problems['other_format']} file(s) of other formats skipped (--formats)",
                   err=True)
    if (note := missing_extras_note(problems)) is not None:
        click.echo(f"neardup: warning: {note}", err=True)
    bad = problems.get("unreadable", 0) + problems.get("vanished", 0)
    ctx.exit(2 if bad or not documents else 0)


def formats_line(catalog, jsonl: bool) -> str | None:
    """inspect's line of live documents per format (a catalog row's item column holds the format of a file whose
    text was extracted, "" for plain text), or None for JSONL input or plain text only."""
    if jsonl:
        return None
    counts: dict[str, int] = {}
    items = catalog["item"]
    for n in np.flatnonzero(catalog.live).tolist():
        counts[items[n] or "text"] = counts.get(items[n] or "text", 0) + 1
    if set(counts) <= {"text"}:
        return None
    from ..text.extract import LABELS

    return "  formats: " + ", ".join(f"{LABELS.get(fmt, fmt)} {n}" for fmt, n in sorted(counts.items()))
