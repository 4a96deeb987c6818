"""The options, one definition each, as decorators the commands share: names, defaults and help never drift.

The common options (-w, --jobs, --print, --format, ...) are accepted before the stages or on any of them: their
callbacks collect them into the App of the command line (app.py).
"""
from __future__ import annotations

import math

import click
from click.core import ParameterSource

from ..config import (
    DEFAULT_RULES,
    DEFAULT_THRESHOLD,
    JOIN_METHODS,
    METHODS,
    METRICS,
    RULES,
    UNITS,
    CandidateParams,
    ClusterParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    default_jobs,
)
from ..report.printer import FORMATS, SELECTIONS
from ..report.script import ACTIONS
from .app import app_of
from .extract import formats_options

SHINGLE_DEFAULTS = ShingleParams()
SIGNATURE_DEFAULTS = SignatureParams()
SOURCE_DEFAULTS = SourceParams()


def _setter(attr: str):
    def callback(ctx, param, value):
        if value is not None and value is not False:
            app_of(ctx).options[attr] = value
        return value
    return callback


def _quarantine(ctx, param, value):
    if value is not None and not value.strip():  # '' would make every move a skip, or a move into the cwd
        raise click.BadParameter("needs a folder, not an empty name", ctx, param)
    return _setter("quarantine")(ctx, param, value)


class Finite(click.FloatRange):
    """A float option that refuses nan and inf: click.FloatRange lets nan through (every comparison with nan is
    false), and it reached the kernels as an internal error."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def common_options(f):
    """Options accepted before the stages or on any of them: where to work, and what to print how."""
    for decorator in reversed([
        click.option("-w", "--workdir", type=click.Path(file_okay=False), callback=_setter("workdir"),
                     expose_value=False, help="Work dir holding every stage's results (default for run: a "
                                              "cache dir keyed by the inputs)."),
        click.option("-j", "--jobs", type=click.IntRange(1), callback=_setter("jobs"), expose_value=False,
                     help=f"Worker processes [default: all cores, here {default_jobs()}]."),
        click.option("--scheduler", metavar="ADDRESS", callback=_setter("scheduler"), expose_value=False,
                     help="Run the stages on a Dask cluster: its scheduler's tcp://HOST:PORT, or local:N for a local "
                          "cluster of N workers (needs nearDup[dask]; the work dir must be shared)."),
        click.option("--scheduler-file", type=click.Path(dir_okay=False), callback=_setter("scheduler_file"),
                     expose_value=False, help="Run on the Dask cluster whose scheduler wrote this file (`dask "
                                              "scheduler --scheduler-file PATH`)."),
        click.option("--force", is_flag=True, default=None, callback=_setter("force"), expose_value=False,
                     help="Forget stored results and recompute every stage."),
        click.option("--wait-lock", type=Finite(0), callback=_setter("wait_lock"), expose_value=False,
                     help="Seconds to wait for another run on the same work dir [default: 0]."),
        click.option("--progress/--no-progress", default=None, callback=_setter("progress"), expose_value=False,
                     help="Progress bars on stderr [default: only when stderr is a terminal]."),
        click.option("--debug", is_flag=True, default=None, callback=_setter("debug"), expose_value=False,
                     help="Show a traceback on errors."),
        click.option("--print", "select", type=click.Choice(SELECTIONS), callback=_setter("select"),
                     expose_value=False, help="What to print: pairs [default], groups, or one path per line of the "
                                              "dupes, keepers or uniques."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), callback=_setter("fmt"), expose_value=False,
                     help="tsv, jsonl (typed records: header, records, summary), csv, human, fdupes [default: human "
                          "on a terminal, else tsv]."),
        click.option("-0", "--null", is_flag=True, default=None, callback=_setter("null"), expose_value=False,
                     help="NUL-terminated records on stdout (and NUL-separated paths read from stdin)."),
        click.option("--color", type=click.Choice(["auto", "never", "always"]), callback=_setter("color"),
                     expose_value=False, help="Colour in the human format [default: auto: only on a terminal, "
                                              "not with NO_COLOR or TERM=dumb]."),
        click.option("-q", "--quiet", is_flag=True, default=None, callback=_setter("quiet"), expose_value=False,
                     help="Print nothing (errors excepted); only set the exit status."),
        click.option("--exit-code", is_flag=True, default=None, callback=_setter("exit_code"), expose_value=False,
                     help="Exit 1 when duplicates were found (0 when none; 2 on errors)."),
        click.option("--reference-only", is_flag=True, default=None, callback=_setter("reference_only"),
                     expose_value=False, help="Report only groups that contain a --reference document."),
    ]):
        f = decorator(f)
    return f


def without(*names: str):
    """Leave out of a command the common options that do nothing for it (its help does not list them, and given
    to it they are "No such option"); given before the command, they are refused by refuse_common."""
    def apply(f):
        f.__click_params__ = [p for p in f.__click_params__ if p.name not in names]
        return f
    return apply


def refuse_common(ctx: click.Context, command: str, names: tuple[str, ...]) -> None:
    """A common option given before a command it does nothing for (`neardup -j 4 query ...`) is an error."""
    root = ctx.find_root()
    for param in root.command.params:
        if param.name in names and root.get_parameter_source(param.name) not in (None, ParameterSource.DEFAULT):
            raise click.UsageError(f"{param.opts[-1]} does not apply to {command}; drop it")


def _options(*decorators):
    def apply(f):
        for decorator in reversed(decorators):
            f = decorator(f)
        return f
    return apply


source_options = _options(
    click.option("--jsonl", is_flag=True,
                 help="Each PATH is a JSONL file (.gz, .zst, .bz2, .xz allowed; - for stdin) of records."),
    click.option("--parquet", is_flag=True, help="Each PATH is a Parquet file or a dataset folder of .parquet "
                                                 "files (PATHs all ending in .parquet are read so without it)."),
    click.option("--id-field", default=SOURCE_DEFAULTS.id_field, show_default=True,
                 help="JSONL field (Parquet column) of the id."),
    click.option("--text-field", default=SOURCE_DEFAULTS.text_field, show_default=True,
                 help="JSONL field (Parquet column) of the text."),
    click.option("--strict", is_flag=True, help="Stop at a malformed JSONL line instead of skipping it."),
    click.option("--include", multiple=True, metavar="GLOB", help="Only files whose name or relative path matches."),
    click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files whose name or relative path matches."),
    click.option("--hidden", is_flag=True, help="Also read hidden files and folders (names starting with '.')."),
    click.option("--follow-links", is_flag=True, help="Follow symbolic links inside folders (loops are detected)."),
    click.option("--partition-docs", type=click.IntRange(1), default=SOURCE_DEFAULTS.partition_docs, hidden=True,
                 help="Documents per partition (the unit of parallel work and of resume)."),
    *formats_options,
)
shingle_options = _options(
    click.option("--unit", type=click.Choice(UNITS), default=SHINGLE_DEFAULTS.unit, show_default=True,
                 help="Shingle words (runs of \\w) or characters."),
    click.option("-k", type=click.IntRange(1, 64), default=SHINGLE_DEFAULTS.k, show_default=True,
                 help="Tokens per shingle."),
    click.option("--whitespace", type=click.Choice(["collapse", "remove"]), default=SHINGLE_DEFAULTS.whitespace,
                 show_default=True, help="For char shingles: whitespace runs become one blank, or are removed."),
    click.option("--strip-punct", is_flag=True, help="Remove Unicode punctuation before shingling."),
)
signature_options = _options(
    click.option("--num-perm", type=click.IntRange(1, 8192), default=SIGNATURE_DEFAULTS.num_perm,
                 show_default=True, help="MinHash rows (signature length)."),
    click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=SIGNATURE_DEFAULTS.seed, show_default=True,
                 help="Seed of the random permutations."),
    click.option("--minhash", type=click.Choice(METHODS), default=SIGNATURE_DEFAULTS.method, show_default=True,
                 help="oph: one-permutation hashing with optimal densification; permutation: (a*x+b) mod p "
                      "per row (MMDS 3.3.5)."),
)
threshold_option = click.option(
    "-t", "--threshold", type=Finite(0, 1, min_open=True),
    help=f"Jaccard similarity threshold [default: {DEFAULT_THRESHOLD}, or what the band stage used].")
band_options = _options(
    threshold_option,
    click.option("--bands", type=click.IntRange(1), help="Number of bands b (default: chosen from --threshold)."),
    click.option("--rows", type=click.IntRange(1), help="Rows per band r (default: chosen from --threshold)."),
    click.option("--recall", type=click.FloatRange(0, 1, min_open=True, max_open=True), metavar="R",
                 help="Choose b and r so that a pair at the threshold is a candidate with probability >= R (with the "
                      "fewest false candidates); if --num-perm is too small for that, say how large it must be."),
)
candidate_options = _options(
    click.option("--max-bucket", type=click.IntRange(2), default=CandidateParams().max_bucket, show_default=True,
                 help="A bucket with more documents is paired with its first document only (star), and reported."),
    click.option("--min-shingles", type=click.IntRange(0), default=CandidateParams().min_shingles, metavar="N",
                 show_default=True, help="Never pair documents with fewer shingles (stubs, licence headers); "
                                         "counted on stderr. Lower it for short texts such as titles."),
    click.option("--min-size", type=click.IntRange(0), default=CandidateParams().min_size, metavar="BYTES",
                 show_default=True, help="Never pair documents of fewer bytes of text; counted on stderr."),
)
method_option = click.option(
    "--method", type=click.Choice(JOIN_METHODS),  # default None, so that it is not in the JSONL header unless given
    help="How candidates are found: lsh (MinHash bands, fast, recall by the S-curve), exact (every pair with "
         "Jaccard >= --threshold, by an exact set-similarity join: recall 1), auto (whichever costs less; said on "
         f"stderr) [default: {CandidateParams().method}].")
metric_option = click.option(
    "--metric", type=click.Choice(METRICS),  # default None, so that it is not in the JSONL header unless given
    help="jaccard: shared shingles / shingles of either >= --threshold; containment: shared shingles / shingles "
         "of the smaller document >= --threshold, pairs directed contained -> container, the container the keeper "
         "of what it contains (--method exact) [default: jaccard].")
cluster_options = _options(
    click.option("--link", type=click.Choice(["keeper", "connected"]), default=ClusterParams().link,
                 show_default=True, help="keeper: every member is >= the threshold against its keeper; connected: "
                                         "connected components of the verified pairs."),
    click.option("--keep", default=",".join(DEFAULT_RULES), show_default=True, metavar="RULES",
                 help=f"Keeper rules in order, comma-separated: {', '.join(RULES)}."),
    click.option("--prefer", metavar="REGEX", help="Prefer keepers whose path matches (rule 'prefer', first "
                                                   "unless placed in --keep)."),
)
script_options = _options(
    click.option("--action", type=click.Choice(ACTIONS), callback=_setter("action"), expose_value=False,
                 help="What the script does to each duplicate: remove, move (to --quarantine), or link (replace "
                      "by a hard link to its keeper) [default: remove]."),
    click.option("--quarantine", type=click.Path(file_okay=False), callback=_quarantine,
                 expose_value=False, help="Folder the script moves duplicates into (--action move)."),
)
reference_option = click.option("--reference", "references", multiple=True, metavar="PATH",
                                help="Also read PATH; its documents are always keepers, never proposed for removal.")
