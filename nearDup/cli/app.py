"""The state of one command line: the common options as given, the runner they open, and the output they ask for.

The common options (-w, --jobs, --print, --format, ...) may be given before the stages or on any of them, so click's
callbacks collect them as they are parsed (App.options); what to print and how is frozen into one Output value when
the output starts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import Any

import click

from .. import __version__
from ..pipeline import run as pipeline_run
from ..pipeline.driver import Runner
from ..report.printer import Printer, text_stream
from ..report.results import PATH_LISTS, Results, select, summary_line
from ..report.script import make_script


@dataclasses.dataclass(frozen=True)
class Output:
    """What to print and how, resolved from the options once the command line is parsed."""

    select: str | None = None
    fmt: str | None = None
    null: bool = False
    color: str = "auto"
    quiet: bool = False
    exit_code: bool = False
    reference_only: bool = False
    action: str = "remove"
    quarantine: str | None = None

    def format(self) -> str:
        if self.select == "script":  # a script is a script
            return "tsv"
        return self.fmt or ("human" if sys.stdout.isatty() else "tsv")

    def use_color(self) -> bool:
        if self.color != "auto":
            return self.color == "always"
        return (sys.stdout.isatty() and "NO_COLOR" not in os.environ
                and os.environ.get("TERM", "") != "dumb")

    def check(self) -> None:
        """Refuse a --format that the selection would ignore."""
        if self.select == "script" and self.fmt:
            raise click.UsageError(f"--print script writes a sh script: --format {self.fmt} does not apply; drop it")
        if self.select in PATH_LISTS and self.fmt in ("csv", "fdupes"):
            raise click.UsageError(f"--print {self.select} prints one path per line: --format {self.fmt} does not "
                                   f"apply; use --format jsonl or tsv, or no --format")
        if self.fmt == "fdupes" and self.select == "pairs":
            raise click.UsageError("--format fdupes prints groups, as fdupes does: drop --print pairs")


OUTPUT_OPTIONS = tuple(field.name for field in dataclasses.fields(Output))


@dataclasses.dataclass
class App:
    """One command line: the common options given, the runner they open, and its output."""

    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # the common options given, by name
    runner: Runner | None = None
    printer: Printer | None = None
    given: dict = dataclasses.field(default_factory=dict)  # the options given, for the JSONL header
    finished: bool = False
    last: str | None = None  # the last stage whose result can be printed: verify or cluster
    new_only: bool = False  # report only what involves a document added or changed since the last report
    cached: bool = False  # the work dir is run's default one, in the cache (evicted from by size after the run)

    def __getattr__(self, name: str) -> Any:  # a common option's value: app.jobs, app.quiet
        if name in COMMON_DEFAULTS:
            return self.options.get(name, COMMON_DEFAULTS[name])
        raise AttributeError(name)

    @property
    def output(self) -> Output:
        return Output(**{name: self.options[name] for name in OUTPUT_OPTIONS if name in self.options})

    def log(self, message: str) -> None:
        if not self.quiet:
            log(message)

    def start_output(self, params: dict) -> None:
        """Open stdout for results. The JSONL header is written with the results, when every parameter is
        resolved (an abort before then writes it with the options given, and closes the stream)."""
        output = self.output
        output.check()
        if self.printer is None and not output.quiet:
            self.printer = Printer(text_stream(sys.stdout.buffer), output.format(), output.null, output.use_color())
            self.given = params
            ACTIVE.append(self)

    def open(self, default: str | None = None, command: str = "", index: bool = False) -> Runner:
        if self.runner is None:
            path = self.workdir or default
            if path is None:
                raise click.UsageError(f"{command} needs a work dir: pass -w/--workdir DIR (or use `neardup run`)")
            ctx = click.get_current_context()
            resources = ctx.find_root().with_resource(contextlib.ExitStack())  # closed on errors too
            progress = self.progress if self.progress is not None else sys.stderr.isatty() and not self.quiet
            engine = pipeline_run.Engine(self.jobs, self.scheduler, self.scheduler_file, progress)
            self.runner = pipeline_run.open_runner(path, resources, self.log, engine, cache=self.workdir is None,
                                                   index=index, force=self.force, wait_lock=self.wait_lock)
            self.start_output({k: v for k, v in ctx.params.items()  # where and how work is done never shows
                               if v not in (None, (), False) and k not in ("partition_docs", "index", "rebuild")})
        return self.runner

    def report(self, results: Results) -> int:
        """Print the results as --print asks (default: pairs after verify, groups after cluster); return the exit
        status."""
        output = self.output
        what = output.select or ("groups" if self.last == "cluster" or output.fmt == "fdupes" else "pairs")
        chosen = select(results, what, output.reference_only)
        printer = self.printer
        if printer is not None:
            given = {k: v for k, v in self.given.items() if k not in results.params}
            printer.header(__version__, what, {**results.params, **given})  # resolved first, then the rest given
            if what == "pairs":
                printer.pairs(chosen.pairs, results.params.get("metric"))
            elif what == "groups":
                assert chosen.groups is not None  # computed for every --print but pairs
                printer.groups(chosen.groups)
            elif what == "script":
                assert chosen.groups is not None
                docs = {d["id"]: d for d in results.documents_of({m["id"] for g in chosen.groups
                                                                  for m in g["members"]})}
                printer.text(make_script(chosen.groups, docs, output.action, output.quarantine))
            else:
                printer.paths(*chosen.paths(results))
            printer.summary(chosen.counts)
            printer.stream.flush()
        self.finished = True
        self.log("summary: " + summary_line(chosen.pairs, chosen.groups, results.size_of))
        if results.soft_errors:
            return 2
        return 1 if output.exit_code and (chosen.groups if chosen.groups is not None else chosen.pairs) else 0


COMMON_DEFAULTS: dict[str, Any] = {"workdir": None, "jobs": None, "scheduler": None, "scheduler_file": None,
                                   "force": False, "wait_lock": 0.0, "progress": None, "debug": False,
                                   **{field.name: field.default for field in dataclasses.fields(Output)}}

ACTIVE: list[App] = []  # the App of the command line being run, for closing its output on Ctrl-C


def log(message: str) -> None:
    click.echo(message, err=True)


def app_of(ctx: click.Context) -> App:
    return ctx.find_root().ensure_object(App)
