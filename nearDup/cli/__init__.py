"""The command line: one chained Click group whose subcommands are the pipeline's stages, plus run, tune, inspect.

Thin by design: parse options into parameter objects, call a stage, print. Errors become one line on stderr and
exit status 2 in one place (NearDupGroup.main).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import traceback

import click
from click.core import ParameterSource

from .. import __version__, pipeline
from ..config import (
    DEFAULT_THRESHOLD,
    METHODS,
    UNITS,
    CandidateParams,
    ClusterParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    VerifyParams,
    default_jobs,
)
from ..engine import local as local_engine
from ..engine import make_engine
from ..errors import InputError, NearDupError
from ..kernels import lsh
from ..pipeline.band import choose_bands, describe_bands
from ..pipeline.driver import Runner
from ..pipeline.groups import DEFAULT_RULES, RULES, KeeperRules
from ..pipeline.index import check_fixed_parameters, check_query_parameters, mark_reported
from ..pipeline.results import inherited_threshold, resolved_params
from ..pipeline.shingle import shingle_content
from ..report.pairs import read_pairs
from ..report.printer import FORMATS, SELECTIONS, Printer, plural, text_stream
from ..report.results import JSONL_SCRIPT, PATH_LISTS, Results, summary_line
from ..report.script import ACTIONS, make_script
from ..store.cache import absolute, default_workdir, record_use
from ..store.workdir import STAGES, WorkDir
from ..text.read import STREAM_BYTES
from .admin import COMMANDS, evict
from .extract import extract_command, formats_line, formats_options
from .settings import given, load

SHINGLE_DEFAULTS = ShingleParams()
SIGNATURE_DEFAULTS = SignatureParams()
SOURCE_DEFAULTS = SourceParams()



class StageCommand(click.Command):
    """A chained subcommand that takes its options anywhere among its arguments and stops at the next stage.

    Click parses chained subcommands with allow_interspersed_args=False (so `run docs/ --format jsonl` would fail),
    and a variadic PATH... argument would swallow the names of the stages that follow it. Here the arguments are
    cut at the first token naming a sibling command (values of options are skipped; `--` ends the cutting, so
    `shingle -- band` reads a file called band), and the command's own part is parsed with interspersing on.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        group = ctx.parent.command if ctx.parent is not None else None
        siblings = set(group.commands) if isinstance(group, click.Group) else set()
        takes_value = {name for p in self.params if isinstance(p, click.Option) and not p.is_flag and not p.count
                       for name in p.opts}
        i = 0
        while i < len(args):
            token = args[i]
            if token == "--":
                i = len(args)
                break
            if token in siblings:
                break
            i += 2 if token in takes_value else 1
        own, rest = args[:i], args[i:]
        ctx.allow_interspersed_args = True
        super().parse_args(ctx, own)
        ctx.args = [*ctx.args, *rest]
        return ctx.args


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM, carried past click's main, which answers a KeyboardInterrupt with a blank line."""


class _ClosedPipe(BaseException):
    """A closed stdout, carried past click's main, which exits 1 for it: --exit-code's "duplicates found"."""


class NearDupGroup(click.Group):
    command_class = StageCommand

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None
        except BrokenPipeError:
            raise _ClosedPipe from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Run the chain; turn every failure into one line on stderr and an exit status (2 errors, 130 Ctrl-C or
        SIGTERM, 141 a closed stdout)."""
        args = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in args
        _stop_on_sigterm()
        try:
            code = super().main(args, prog_name or "neardup", complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else 0
        except (click.exceptions.Abort, KeyboardInterrupt, _Interrupted):
            _abort_output()
            # even with -q: why it stopped; on a terminal, after the ^C it echoed
            click.echo(f"{chr(10) if sys.stderr.isatty() else ''}neardup: interrupted; the next run resumes", err=True)
            code = 130
        except click.ClickException as e:
            ctx = getattr(e, "ctx", None)  # a UsageError's
            where = f"{ctx.command_path}: " if ctx is not None else "neardup: "
            click.echo(f"{where}error: {' '.join(e.format_message().split())}", err=True)
            code = 2
        except NearDupError as e:
            if debug:
                traceback.print_exc()
            click.echo(f"neardup: error: {e}", err=True)
            code = e.exit_code
        except (BrokenPipeError, _ClosedPipe):  # the reader stopped reading (`| head`); the work is kept (_finish)
            _silence_stdout()
            code = CLOSED_PIPE
        except Exception as e:  # a bug: still one line, unless --debug asks for the traceback
            if debug:
                traceback.print_exc()
            click.echo(f"neardup: internal error: {type(e).__name__}: {e} (re-run with --debug for a traceback)",
                       err=True)
            code = 2
        if standalone_mode:
            sys.exit(code)
        return code


CLOSED_PIPE = 141  # 128 + SIGPIPE, as the shell reports a command killed by a closed pipe; never --exit-code's 1


def _stop_on_sigterm() -> None:
    """SIGTERM stops a run like Ctrl-C: cleanly, with exit status 130 (when this is the main thread)."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


_ACTIVE: list[App] = []  # the App of the command line being run, for closing its output on Ctrl-C


def _abort_output() -> None:
    """Ctrl-C or SIGTERM: close a started JSONL stream with a summary that says it was aborted."""
    for app in _ACTIVE:
        if app.printer is not None and not app.finished:
            try:
                if not app.printer.started:  # the results were not reached: the parameters as given
                    app.printer.header(__version__, app.select or "pairs", app.given)
                app.printer.summary({}, aborted=True)
                app.printer.stream.flush()
            except (OSError, ValueError):
                pass


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


@dataclasses.dataclass
class App:
    """Settings that any command of the chain may give (-w, --jobs, ...), and the runner they open."""

    workdir: str | None = None
    jobs: int | None = None
    scheduler: str | None = None
    scheduler_file: str | None = None
    force: bool = False
    wait_lock: float = 0.0
    progress: bool | None = None
    debug: bool = False
    runner: Runner | None = None
    # what to print, and how
    select: str | None = None
    fmt: str | None = None
    null: bool = False
    color: str = "auto"
    quiet: bool = False
    exit_code: bool = False
    reference_only: bool = False
    action: str = "remove"
    quarantine: str | None = None
    printer: Printer | None = None
    given: dict = dataclasses.field(default_factory=dict)  # the options given, for the JSONL header
    finished: bool = False
    last: str | None = None  # the last stage whose result can be printed: verify or cluster
    index: bool = False  # the work dir is an --index: one transaction per run, parameters fixed
    new_only: bool = False  # report only what involves a document added or changed since the last report
    cached: bool = False  # the work dir is run's default one, in the cache (evicted from by size after the run)

    def output_format(self) -> str:
        return self.fmt or ("human" if sys.stdout.isatty() else "tsv")

    def use_color(self) -> bool:
        if self.color != "auto":
            return self.color == "always"
        return (sys.stdout.isatty() and "NO_COLOR" not in os.environ
                and os.environ.get("TERM", "") != "dumb")

    def start_output(self, params: dict) -> None:
        """Open stdout for results. The JSONL header is written with the results, when every parameter is
        resolved (an abort before then writes it with the options given, and closes the stream)."""
        _check_output(self)
        if self.printer is None and not self.quiet:
            fmt = "tsv" if self.select == "script" else self.output_format()  # a script is a script
            self.printer = Printer(text_stream(sys.stdout.buffer), fmt, self.null, self.use_color())
            self.given = params
            _ACTIVE.append(self)

    def open(self, default: str | None = None, command: str = "") -> Runner:
        if self.runner is None:
            path = self.workdir or default
            if path is None:
                raise click.UsageError(f"{command} needs a work dir: pass -w/--workdir DIR (or use `neardup run`)")
            work = WorkDir(path, cache=self.workdir is None)
            work.lock(self.wait_lock)
            click.get_current_context().find_root().call_on_close(work.release)  # on errors too
            log = (lambda message: None) if self.quiet else _log
            if self.force:
                work.clear()
            elif self.workdir is None and not work.usable():  # the cache under ~/.cache holds derived data only
                log(f"work dir: {work.root} was written by another nearDup version or is damaged; rebuilding it")
                work.clear()
            if self.index or work.read_manifest().get("index"):
                self.index = True
                work.begin()  # committed once the results are reported: an interrupted run changes nothing
                work.set(index=True)
            progress = self.progress if self.progress is not None else sys.stderr.isatty() and not self.quiet
            engine = make_engine(self.jobs, progress, self.scheduler, self.scheduler_file, work.root, log)
            click.get_current_context().find_root().call_on_close(engine.close)
            self.runner = Runner(work, engine, log)
            ctx = click.get_current_context()
            self.start_output({k: v for k, v in ctx.params.items()  # where and how work is done never shows
                               if v not in (None, (), False) and k not in ("partition_docs", "index", "rebuild")})
        return self.runner


def _log(message: str) -> None:
    click.echo(message, err=True)


def _check_output(app: App) -> None:
    """Refuse a --format that the selection would ignore."""
    if app.select == "script" and app.fmt:
        raise click.UsageError(f"--print script writes a sh script: --format {app.fmt} does not apply; drop it")
    if app.select in PATH_LISTS and app.fmt in ("csv", "fdupes"):
        raise click.UsageError(f"--print {app.select} prints one path per line: --format {app.fmt} does not apply; "
                               f"use --format jsonl or tsv, or no --format")
    if app.fmt == "fdupes" and app.select == "pairs":
        raise click.UsageError("--format fdupes prints groups, as fdupes does: drop --print pairs")


def _app(ctx: click.Context) -> App:
    return ctx.find_root().ensure_object(App)


def _setter(attr: str):
    def callback(ctx, param, value):
        if value is not None and value is not False:
            setattr(_app(ctx), attr, value)
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


def _without(*names: str):
    """Leave out of a command the common options that do nothing for it (its help does not list them, and given
    to it they are "No such option"); given before the command, they are refused by _refuse_common."""
    def apply(f):
        f.__click_params__ = [p for p in f.__click_params__ if p.name not in names]
        return f
    return apply


def _refuse_common(ctx: click.Context, command: str, names: tuple[str, ...]) -> None:
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
    click.option("--jsonl", is_flag=True, help="Each PATH is a JSONL file (.gz allowed; - for stdin) of records."),
    click.option("--id-field", default=SOURCE_DEFAULTS.id_field, show_default=True, help="JSONL field of the id."),
    click.option("--text-field", default=SOURCE_DEFAULTS.text_field, show_default=True,
                 help="JSONL field of the text."),
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


def _source(jsonl, id_field, text_field, strict, include, exclude, hidden, follow_links, partition_docs,
            null, formats=(), html=None) -> SourceParams:
    return SourceParams(jsonl=jsonl, id_field=id_field, text_field=text_field, strict=strict,
                        include=tuple(include), exclude=tuple(exclude), hidden=hidden, follow_links=follow_links,
                        null=null, partition_docs=partition_docs, formats=formats, html=html or SOURCE_DEFAULTS.html)


def _cluster_params(link, keep, prefer) -> ClusterParams:
    rules = KeeperRules.parse(keep, prefer)
    return ClusterParams(link, rules.order, rules.prefer)



def _report(app: App, results: Results) -> int:
    """Print the results as --print asks (default: pairs after verify, groups after cluster); return the exit
    status."""
    select = app.select or ("groups" if app.last == "cluster" or app.fmt == "fdupes" else "pairs")
    if select == "script" and results.params.get("jsonl"):
        raise InputError(JSONL_SCRIPT)
    pairs = results.pairs
    all_groups = results.groups() if select != "pairs" or app.reference_only else None
    groups = all_groups
    if app.reference_only:
        assert all_groups is not None  # computed for --reference-only
        groups = [g for g in all_groups if any(m["reference"] for m in g["members"])]
    counts = {"pairs": len(pairs)}
    if groups is not None:
        counts.update(groups=len(groups), duplicates=sum(m["role"] == "duplicate" for g in groups
                                                          for m in g["members"]))
    printer = app.printer
    if printer is not None:
        given = {k: v for k, v in app.given.items() if k not in results.params}
        printer.header(__version__, select, {**results.params, **given})  # resolved first, then the rest given
        if select == "pairs":
            printer.pairs(pairs)
        else:
            assert all_groups is not None and groups is not None  # computed for every --print but pairs
            if select == "groups":
                printer.groups(groups)
            elif select == "script":
                docs = {d["id"]: d for d in results.docs()}
                printer.text(make_script(groups, docs, app.action, app.quarantine))
            elif select == "uniques":
                grouped = {m["id"] for g in all_groups for m in g["members"]}
                printer.paths([d["id"] for d in results.docs() if d["id"] not in grouped], "unique")
            else:
                role = {"dupes": "duplicate", "keepers": "keeper"}[select]
                printer.paths([m["id"] for g in groups for m in g["members"] if m["role"] == role], role)
        printer.summary(counts)
        printer.stream.flush()
    app.finished = True
    if not app.quiet:
        _log("summary: " + summary_line(pairs, groups, results.size_of))
    if results.soft_errors:
        return 2
    return 1 if app.exit_code and (groups if groups is not None else pairs) else 0



@click.group(cls=NearDupGroup, chain=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--config", type=click.Path(dir_okay=False), envvar="NEARDUP_CONFIG", is_eager=True,
              expose_value=False, callback=load,
              help="Option defaults from this TOML file [default: $XDG_CONFIG_HOME/neardup/config.toml, if it exists]; "
                   "the environment (NEARDUP_THRESHOLD=0.9) overrides it, the command line both.")
@common_options
@click.version_option(__version__, prog_name="nearDup")
@click.pass_context
def cli(ctx):
    """Find near-duplicate documents: shingle -> signature -> band -> candidates -> verify.

    \b
      neardup run docs/                          verified pairs on stdout
      neardup -w work/ shingle docs/ signature band --threshold 0.7 candidates verify
      neardup -w work/ verify --threshold 0.9    re-run one stage on stored results
      neardup tune --threshold 0.8               the chosen bands and rows, and their S-curve
    """
    ctx.ensure_object(App)


@cli.result_callback()
@click.pass_context
def _finish(ctx, results):
    """Exit status: 2 when some input could not be read (results for the rest were printed), else 0."""
    app = _app(ctx)
    if app.runner is None:
        return 0
    app.runner.engine.finish()
    if app.last is None:
        app.runner.work.commit()
        return 2 if app.runner.soft_errors else 0
    closed = None
    try:
        code = _report(app, Results.of_workdir(app.runner, app.last, app.new_only))
    except BrokenPipeError as e:  # the reader chose to stop reading (`| head -50 | mail`): the results count as
        closed = e                # reported, and the index keeps this run's work
    mark_reported(app.runner.work)
    app.runner.work.commit()
    if app.cached:
        evict(ctx, app.runner.work.root, app.runner.log)
    if closed is not None:
        raise closed
    return code


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=str)
@source_options
@reference_option
@shingle_options
@common_options
@click.pass_context
def shingle(ctx, paths, unit, k, whitespace, strip_punct, references, **source):
    """Read documents (files, folders, - for a path list on stdin, or JSONL) into sets of hashed k-shingles."""
    app = _app(ctx)
    runner = app.open(command="shingle")
    pipeline.shingle.run(runner, list(paths), _source(null=app.null, **source),
                   ShingleParams(unit, k, whitespace, strip_punct), references=references)


@cli.command()
@signature_options
@common_options
@click.pass_context
def signature(ctx, num_perm, seed, minhash):
    """MinHash signatures of the shingle sets."""
    pipeline.signature.run(_app(ctx).open(command="signature"), SignatureParams(num_perm, seed, minhash))


@cli.command()
@band_options
@common_options
@click.pass_context
def band(ctx, threshold, bands, rows):
    """LSH band keys: b bands of r rows, chosen from --threshold or given."""
    pipeline.band.run(_app(ctx).open(command="band"), threshold, bands, rows)


@cli.command()
@candidate_options
@common_options
@click.pass_context
def candidates(ctx, max_bucket, min_shingles, min_size):
    """Pairs of documents sharing a bucket in at least one band."""
    pipeline.candidates.run(_app(ctx).open(command="candidates"), CandidateParams(max_bucket, min_shingles, min_size))


@cli.command()
@threshold_option
@common_options
@click.pass_context
def verify(ctx, threshold):
    """Exact Jaccard of each candidate pair; print those >= --threshold."""
    app = _app(ctx)
    runner = app.open(command="verify")
    pipeline.verify.run(runner, VerifyParams(inherited_threshold(runner.work, threshold)))
    app.last = "verify"


@cli.command()
@cluster_options
@common_options
@click.pass_context
def cluster(ctx, link, keep, prefer):
    """Duplicate groups from the verified pairs, each with a keeper chosen by --keep rules; print them."""
    app = _app(ctx)
    pipeline.cluster.run(app.open(command="cluster"), _cluster_params(link, keep, prefer))
    app.last = "cluster"


@cli.command()
@click.argument("paths", nargs=-1, type=str)
@source_options
@reference_option
@shingle_options
@signature_options
@band_options
@candidate_options
@cluster_options
@click.option("--groups", is_flag=True, help="Print duplicate groups (the same as --print groups).")
@click.option("--index", type=click.Path(file_okay=False), metavar="DIR",
              help="Keep the work dir DIR as an index across runs (for cron): only new and changed documents are "
                   "read; parameters are fixed at creation; a run changes DIR all at once or not at all.")
@click.option("--new-only", is_flag=True, help="Report only pairs and groups that involve a document added or "
                                               "changed since the last run that reported.")
@click.option("--rebuild", is_flag=True, help="Rebuild the index with this run's parameters.")
@click.option("--replay", type=click.Path(dir_okay=False), metavar="PAIRS.jsonl",
              help="Re-filter, re-group and re-print saved pairs (jsonl output, or a work dir's "
                   "verify/KEY.pairs.jsonl) without reading any document.")
@script_options
@common_options
@click.pass_context
def run(ctx, paths, unit, k, whitespace, strip_punct, num_perm, seed, minhash, threshold, bands, rows, max_bucket,
        min_shingles, min_size,
        references, link, keep, prefer, groups, index, new_only, rebuild, replay, **source):
    """All stages, from documents to verified pairs (or groups, or paths) on stdout."""
    app = _app(ctx)
    if index:
        if app.workdir and os.path.abspath(app.workdir) != os.path.abspath(index):
            raise click.UsageError("give either -w/--workdir or --index, not both")
        app.workdir, app.index = index, True
    app.new_only = new_only
    if groups and not given(ctx, "select"):  # --groups wins over a --print from the config or environment
        app.select = "groups"
    elif app.fmt == "fdupes" and app.select is None:  # fdupes prints groups, as fdupes does
        app.select = "groups"
    cluster_params = _cluster_params(link, keep, prefer)
    if replay:
        if paths:
            raise click.UsageError("--replay reads saved pairs: give no PATH")
        header: dict = {}
        saved = read_pairs(replay, None, header)
        lowest = min((p["jaccard"] for p in saved), default=None)
        t = threshold if threshold is not None else lowest if lowest is not None else DEFAULT_THRESHOLD
        floor = header.get("threshold", lowest)
        if isinstance(floor, (int, float)) and t < floor:  # what was not saved cannot be replayed
            basis = "the threshold of the run that saved them" if "threshold" in header else "the lowest saved"
            _log(f"warning: {replay} holds only pairs with Jaccard >= {floor} ({basis}); --threshold {t} finds no "
                 f"more: run `neardup run ... --threshold {t}` on the documents")
        app.last = "cluster" if app.select not in (None, "pairs") else "verify"
        app.start_output({"replay": replay, "threshold": t})
        ctx.exit(_report(app, Results.of_replay(saved, t, cluster_params, references)))
    if not paths:
        raise click.UsageError("give at least one PATH (a file, a folder, or - for paths on stdin), or --replay")
    source_params = _source(null=app.null, **source)
    if source_params.jsonl and app.select == "script":
        raise InputError(JSONL_SCRIPT)
    shingle_params = ShingleParams(unit, k, whitespace, strip_punct)
    for path in paths:  # before a cache work dir is made for them
        if path != "-" and not os.path.exists(path):
            raise NearDupError(f"{path}: no such file or directory")
    if bands or rows:  # too many for num_perm: said before a cache work dir is made
        choose_bands(num_perm, threshold, bands, rows)
    runner = app.open(default_workdir(list(paths), source_params, shingle_params), "run")
    if app.workdir is None:
        runner.log(f"work dir: {runner.work.root}")
        record_use(runner.work.root, absolute(paths))
        app.cached = True
    signature_params = SignatureParams(num_perm, seed, minhash)
    band_params = choose_bands(num_perm, threshold, bands, rows, runner.work)
    if not rebuild:
        check_fixed_parameters(runner.work, {
            "shingle": shingle_content(shingle_params, source_params),
            "signature": dataclasses.asdict(signature_params), "band": dataclasses.asdict(band_params)})
    pipeline.shingle.run(runner, list(paths), source_params, shingle_params, references=references, rebuild=rebuild,
                   then=(signature_params, band_params))
    pipeline.signature.run(runner, signature_params)
    pipeline.band.run(runner, threshold, bands, rows)
    pipeline.candidates.run(runner, CandidateParams(max_bucket, min_shingles, min_size))
    pipeline.verify.run(runner, VerifyParams(inherited_threshold(runner.work, threshold)))
    app.last = "verify"
    if (app.select or "pairs") != "pairs" or app.reference_only:
        pipeline.cluster.run(runner, cluster_params)
        app.last = "cluster"


@cli.command()
@script_options
@common_options
@click.pass_context
def script(ctx):
    """Print a reviewable sh script that removes, moves or hard-links the duplicates of the groups (never their
    keepers or reference documents); `sh script.sh -n` is a dry run."""
    app = _app(ctx)
    app.select = "script"
    app.open(command="script")
    app.last = "cluster"  # reads the stored groups; an error names the stage to run if there are none


COMPARE_IGNORES = ("workdir", "jobs", "scheduler", "scheduler_file", "force", "wait_lock", "progress", "select",
                   "fmt", "null", "exit_code", "reference_only")


@cli.command()
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@shingle_options
@threshold_option
@click.option("--explain", is_flag=True, help="Show A with the passages it shares with B highlighted.")
@_without(*COMPARE_IGNORES)
@common_options
@click.pass_context
def compare(ctx, a, b, unit, k, whitespace, strip_punct, threshold, explain):
    """Exact Jaccard and containment of two documents (files; - for the text on stdin); exit 0 if Jaccard >=
    --threshold, else 1."""
    app = _app(ctx)
    _refuse_common(ctx, "compare", COMPARE_IGNORES)
    threshold = threshold if threshold is not None else DEFAULT_THRESHOLD
    # "-": the text on stdin
    result = pipeline.compare.run(a, b, ShingleParams(unit, k, whitespace, strip_punct), explain and not app.quiet)
    if not app.quiet:
        lines = [f"jaccard\t{result['jaccard']:.4f}",
                 f"containment\t{result['containment_a_in_b']:.4f}\t(A in B)",
                 f"containment\t{result['containment_b_in_a']:.4f}\t(B in A)",
                 f"shingles\t{result['shingles_a']}\t{result['shingles_b']}\t{result['shared']} shared"]
        click.echo("\n".join(lines))
        if explain:
            _explain(app, result, unit)
    ctx.exit(0 if result["jaccard"] >= threshold else 1)


def _explain(app: App, result: dict, unit: str) -> None:
    from rich.console import Console
    from rich.text import Text

    tokens, sep = result["tokens_a"], " " if unit == "word" else ""
    if tokens is None:  # streamed: its tokens are never all in memory
        _log(f"--explain: {result['a']} is larger than {STREAM_BYTES >> 20} MB; its shared passages are shown "
             f"for smaller files only")
        return
    text, position = Text(), 0
    for start, end in result["passages"] + [(len(tokens), len(tokens))]:
        text.append(sep.join(tokens[position:start]) + (sep if start > position else ""))
        if end > start:
            shared = sep.join(tokens[start:end])
            text.append(shared if app.use_color() else f"[[{shared}]]", style="bold yellow")
            text.append(sep)
        position = end
    click.echo(f"shared passages of A: {len(result['passages'])} (covering "
               f"{sum(e - s for s, e in result['passages'])} of {plural(len(tokens), unit)})")
    Console(force_terminal=app.use_color(), no_color=not app.use_color(), highlight=False, soft_wrap=True,
            emoji=False).print(text, markup=False)


QUERY_IGNORES = ("workdir", "jobs", "scheduler", "scheduler_file", "force", "progress", "reference_only")


@cli.command()
@click.argument("paths", nargs=-1, type=str)
@click.option("--index", type=click.Path(file_okay=False), metavar="DIR", required=True,
              help="The index (or any work dir) to search.")
@shingle_options
@signature_options
@band_options
@_without(*QUERY_IGNORES)
@common_options
@click.pass_context
def query(ctx, paths, index, threshold, **fixed):
    """Near-duplicates in an index of the given files (or of the text on stdin, with no PATH or -), with their
    scores; the index is only read. Each pair is (query document, indexed document). Shingle, signature and band
    options are those of the index: given (a cron script's option list), they must equal its own."""
    app = _app(ctx)
    _refuse_common(ctx, "query", QUERY_IGNORES)
    if app.select not in (None, "pairs") or app.fmt == "fdupes":
        raise click.UsageError("query prints pairs: --print pairs is the only choice, and --format fdupes (groups) "
                               "does not apply")
    work = WorkDir(index, create=False)
    work.lock(app.wait_lock, shared=True)  # waits only for a run writing the index
    ctx.find_root().call_on_close(work.release)
    check_query_parameters(work, {name: value for name, value in fixed.items()
                                         if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)})
    pairs, problems = pipeline.query.run(work, list(paths), None, threshold)
    for message in problems.get("messages", []):
        _log(f"warning: {message}")
    if problems.get("queried") == 0:  # as run: a query whose every input is unusable is an error
        raise NearDupError(f"{' '.join(paths)}: no readable text documents (binary: {problems.get('binary', 0)}, "
                           f"unreadable: {problems.get('unreadable', 0) + problems.get('vanished', 0)})")
    app.last = "verify"
    app.start_output({k: v for k, v in ctx.params.items() if v not in (None, (), False) and k != "index"})
    soft = problems.get("unreadable", 0) + problems.get("vanished", 0)
    resolved = {**resolved_params(work, "band"), "threshold": inherited_threshold(work, threshold)}
    ctx.exit(_report(app, Results(pairs, list, list, soft, resolved)))


@cli.command()
@band_options
@click.option("--num-perm", type=click.IntRange(1, 8192), default=SIGNATURE_DEFAULTS.num_perm, show_default=True)
def tune(threshold, bands, rows, num_perm):
    """Show the bands and rows chosen for a threshold, and the S-curve P(s) = 1 - (1 - s^r)^b behind them."""
    params = choose_bands(num_perm, threshold, bands, rows)
    b, r = params.bands, params.rows
    t = params.threshold
    lines = [f"num_perm {num_perm}: b = {plural(b, 'band')} x r = {plural(r, 'row')}"
             + (f", chosen for threshold {t}" if t else "")]
    lines.append(describe_bands(params, num_perm))
    if t:
        fp, fn = lsh.error_areas(min(t, 0.99), [b], [r])
        lines.append(f"false-positive area (s < {t}) {fp[0]:.4f}; false-negative area (s >= {t}) {fn[0]:.4f}")
    lines.append("s\tP(candidate)")
    for i in range(1, 10):
        lines.append(f"{i / 10:.1f}\t{float(lsh.s_curve(i / 10, b, r)):.4f}")
    click.echo("\n".join(lines))


INSPECT_IGNORES = ("jobs", "scheduler", "scheduler_file", "force", "wait_lock", "progress", "select", "fmt", "null",
                   "color", "quiet", "exit_code", "reference_only")


@cli.command()
@click.argument("paths", nargs=-1, type=str)
@source_options
@shingle_options
@_without(*INSPECT_IGNORES)
@common_options
@click.pass_context
def inspect(ctx, paths, unit, k, whitespace, strip_punct, **source):
    """What each stage of the work dir holds, with which parameters, and whether it is up to date. The work dir
    is -w DIR, or the cache work dir `run PATH...` made for the same PATHs and source and shingle options."""
    app = _app(ctx)
    _refuse_common(ctx, "inspect", INSPECT_IGNORES)
    if app.workdir and paths:
        raise click.UsageError("give either -w/--workdir or the PATHs `run` was given, not both")
    if paths:
        found = default_workdir(list(paths), _source(null=app.null, **source),
                                       ShingleParams(unit, k, whitespace, strip_punct))
        if not os.path.isdir(found):
            raise click.UsageError(f"no cache work dir for {' '.join(paths)} with these options (looked for "
                                   f"{found}); run `neardup run {' '.join(paths)}` first, with the same options")
        app.workdir = found
    if not app.workdir:
        raise click.UsageError("inspect needs a work dir: pass -w/--workdir DIR, or the PATHs given to `run`")
    work = WorkDir(app.workdir, create=False)
    manifest = work.read_manifest()
    click.echo(f"work dir {work.root} (format {manifest['format']}, written by nearDup {manifest['version']})")
    previous = None
    for name in STAGES:
        record = manifest["stages"].get(name)
        if record is None:
            click.echo(f"{name}: not run")
            previous = None
            continue
        stale = name != "shingle" and (previous is None or record.get("upstream") != previous["key"])
        status = "out of date" if stale else "done"
        click.echo(f"{name}: {status} at {record.get('completed', '?')}, params {json.dumps(record['params'])}")
        if name == "shingle":
            s = record["stats"]
            click.echo(f"  {plural(s['docs'], 'document')} in {plural(len(record['partitions']), 'partition')}, "
                       f"{plural(s['bytes'], 'byte')}, {plural(s['shingles'], 'shingle')}, {s.get('short', 0)} too "
                       f"short, {s.get('binary', 0)} binary skipped, {s.get('replaced', 0)} with invalid UTF-8")
            dead = sum(record["docs"]) - s["docs"]
            click.echo(f"  run {record['run']}: {plural(s.get('added', 0), 'document')} added, "
                       f"{s.get('removed', 0)} removed, {s.get('renamed', 0)} renamed; "
                       f"{plural(dead, 'stored row')} of removed or changed documents; "
                       f"reported up to run {manifest.get('reported', 0)}"
                       + ("; an index (parameters fixed)" if manifest.get("index") else ""))
            if (line := formats_line(pipeline.shingle.load_catalog(work, record), record["source"]["jsonl"])):
                click.echo(line)
        elif "stats" in record:
            click.echo("  " + ", ".join(f"{k} {v}" for k, v in record["stats"].items()))
        previous = record


for _command in (*COMMANDS, extract_command):
    cli.add_command(_command)


def main() -> None:
    """The `neardup` program (not a library or test call: they keep their interpreter)."""
    code = cli.main(prog_name="neardup", standalone_mode=False)
    if local_engine.TORN_DOWN:  # see engine.local.TORN_DOWN: the work is committed or resumable, so skip the shutdown
        printers = [app.printer.stream for app in _ACTIVE if app.printer is not None]
        for stream in (*printers, sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)
