"""The command line's plumbing: one chained Click group whose subcommands are the pipeline's stages, the end of a
chain (print the results, commit, evict the cache), and the one place failures become a line on stderr and an exit
status (NearDupGroup.main). The commands are in commands.py and admin.py.
"""
from __future__ import annotations

import contextlib
import os
import sys
import traceback

import click

from .. import __version__
from ..engine import local as local_engine
from ..errors import NearDupError, OutputError
from ..pipeline.index import mark_reported
from ..report.results import Results
from ..text.read import finish_given_up_tasks
from .admin import evict
from .app import ACTIVE, App, app_of
from .options import common_options
from .settings import load


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
        try:
            with _interrupts_recorded():
                code = super().main(args, prog_name or "neardup", complete_var, standalone_mode=False, **extra)
                code = code if isinstance(code, int) else 0
        except (click.exceptions.Abort, KeyboardInterrupt, _Interrupted):
            finish_given_up_tasks(TASK_GRACE_SECONDS)
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
            if isinstance(e, OutputError):  # what stdout still buffers would fail again at exit, in a 2nd message
                _silence_stdout()
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


TASK_GRACE_SECONDS = 3.0  # how long an interrupted run waits for a task thread to finish writing or stop reading
CLOSED_PIPE = 141  # 128 + SIGPIPE, as the shell reports a command killed by a closed pipe; never --exit-code's 1


@contextlib.contextmanager
def _interrupts_recorded():
    """Ctrl-C and SIGTERM stop the command with exit status 130, even if their KeyboardInterrupt is swallowed.

    For this command only (when this is the main thread), SIGINT and SIGTERM get a handler that records the signal
    (engine.local.INTERRUPTED) before it raises KeyboardInterrupt: raised where a callback or finaliser swallows
    it, the run went on and ended 0. The engine raises it again at its next task; at the end, a recorded interrupt
    wins over the result and over an error it became. Python's "Exception ignored" report of a swallowed one is
    dropped: the one line says it. A signal the caller ignores (SIG_IGN, as for a background job) stays ignored."""
    import signal
    import threading

    def interrupt(signum, frame):
        local_engine.INTERRUPTED = signum
        raise KeyboardInterrupt

    def unraisable(report) -> None:
        if not (local_engine.INTERRUPTED and issubclass(report.exc_type, KeyboardInterrupt)):
            hook(report)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {signum: handler for signum in (signal.SIGINT, signal.SIGTERM)
            if (handler := signal.getsignal(signum)) not in (signal.SIG_IGN, None)}  # None: not set from Python
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    local_engine.INTERRUPTED = 0
    try:
        for signum in kept:
            signal.signal(signum, interrupt)
        try:
            yield
        except Exception:
            local_engine.stop_if_interrupted()  # a library made the swallowed KeyboardInterrupt its own error
            raise
        local_engine.stop_if_interrupted()  # swallowed, and the command ran to its end
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook
        local_engine.INTERRUPTED = 0


def _abort_output() -> None:
    """Ctrl-C or SIGTERM: close a started JSONL stream with a summary that says it was aborted."""
    for app in ACTIVE:
        if app.printer is not None and not app.finished:
            try:
                if not app.printer.started:  # the results were not reached: the parameters as given
                    app.printer.header(__version__, app.output.select or "pairs", app.given)
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
    app = app_of(ctx)
    local_engine.stop_if_interrupted()  # no results printed, no work committed, for a Ctrl-C that was swallowed
    if app.runner is None:
        return 0
    app.runner.engine.finish()
    if app.last is None:
        app.runner.work.commit()
        return 2 if app.runner.soft_errors else 0
    closed = None
    try:
        code = app.report(Results.of_workdir(app.runner, app.last, app.new_only))
    except BrokenPipeError as e:  # the reader chose to stop reading (`| head -50 | mail`): the results count as
        closed = e                # reported, and the index keeps this run's work
    mark_reported(app.runner.work)
    app.runner.work.commit()
    if app.cached:
        evict(ctx, app.runner.work.root, app.runner.log)
    if closed is not None:
        raise closed
    return code


def main() -> None:
    """The `neardup` program (not a library or test call: they keep their interpreter)."""
    import signal

    # Outside the command (_interrupts_recorded), a signal ends the process the default way (the shell says 130
    # or 143). Python's own handler raised where nothing could report it: in the interpreter's shutdown, after the
    # results, it was lost (status 0) or printed a traceback
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    code = cli.main(prog_name="neardup", standalone_mode=False)
    printers = [app.printer.stream for app in ACTIVE if app.printer is not None]
    for stream in (*printers, sys.stdout, sys.stderr):  # now: a signal in the shutdown leaves the results whole
        with contextlib.suppress(Exception):
            stream.flush()
    if local_engine.TORN_DOWN:  # see engine.local.TORN_DOWN: the work is committed or resumable, so skip the shutdown
        os._exit(code)
    sys.exit(code)
