"""The HTML report on the command line: `neardup -w DIR report -o FILE`, and `--report FILE` for run and compare.

Thin: the data comes from report.html.load (a work dir) or load_pair (two files); rendering needs the report extra,
checked when the option is parsed so that a run never does its work to fail at the end.
"""
from __future__ import annotations

import click

from .. import pipeline
from ..config import ClusterParams, ShingleParams
from ..errors import InputError
from ..pipeline.driver import Runner
from ..report import html
from ..store.workdir import WorkDir
from .app import app_of


def _check_extra(ctx, param, value):
    if value is not None:
        html.require_extra()
    return value


report_option = click.option(
    "--report", type=click.Path(dir_okay=False), metavar="FILE", callback=_check_extra,
    help="Also write a self-contained HTML report (groups, shared passages, figures) to FILE (needs nearDup[report]).")


def write_run_report(runner: Runner, params: ClusterParams | None, path: str) -> None:
    """After run's stages: the groups (with params, when run has not made them: stored, not printed) and the report
    of the work dir."""
    if params is not None:
        pipeline.cluster.run(runner, params)
    html.write(html.load(runner.work), path)
    runner.log(f"report: {path}")


def write_pair_report(a: str, b: str, params: ShingleParams, threshold: float, path: str) -> None:
    if "-" in (a, b):
        raise InputError("--report shows both texts and reads each twice: give files, not - (stdin)")
    html.write(html.load_pair(a, b, params, threshold), path)


@click.command("report")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="FILE", required=True,
              help="The HTML file to write.")
@click.pass_context
def report_command(ctx, output):
    """Write a self-contained HTML report of the work dir's groups (run the cluster stage first): summary, S-curve,
    Jaccard histogram, a groups table, and pair views with the shared passages marked. Reads only the documents of
    the pairs it shows."""
    html.require_extra()
    app = app_of(ctx)
    if app.runner is not None:  # a stage ran before it in the chain
        work = app.runner.work
    elif app.workdir:
        work = WorkDir(app.workdir, create=False)
        work.lock(app.wait_lock, shared=True)
        ctx.find_root().call_on_close(work.release)
    else:
        raise click.UsageError("report needs a work dir: pass -w/--workdir DIR")
    html.write(html.load(work), output)
    if not app.quiet:
        click.echo(f"report: {output}", err=True)
