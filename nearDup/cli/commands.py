"""The commands: each parses its options into parameters (config.resolve), calls the library, and prints."""
from __future__ import annotations

import dataclasses
import functools
import json
import os

import click
from click.core import ParameterSource

from .. import __version__, pipeline
from ..config import (
    DEDUPED_MODES,
    CandidateParams,
    SignatureParams,
    VerifyParams,
    banding_threshold,
    by_extension,
    check_recall,
    choose_bands,
    resolve,
    threshold_or_default,
)
from ..errors import InputError
from ..kernels import lsh
from ..kernels.recall import bands_for_recall, min_num_perm_for_recall
from ..pipeline import run as pipeline_run
from ..pipeline.band import describe_bands
from ..pipeline.driver import chain, require
from ..pipeline.index import check_query_parameters
from ..pipeline.results import inherited_threshold, recall_line, resolved_params
from ..pipeline.tune import SignedCorpus
from ..report import corpus as deduped_corpus
from ..report.results import JSONL_SCRIPT, Results
from ..store.manifest import ShingleRecord, SignatureRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..text.read import STREAM_BYTES
from ..wording import plural
from .app import Output, app_of, log
from .extract import formats_line
from .main import StageCommand
from .options import (
    SIGNATURE_DEFAULTS,
    Finite,
    band_options,
    candidate_options,
    cluster_options,
    common_options,
    method_option,
    metric_option,
    reference_option,
    refuse_common,
    script_options,
    shingle_options,
    signature_options,
    source_options,
    threshold_option,
    without,
)
from .report import report_option, write_pair_report, write_run_report
from .settings import given

stage = functools.partial(click.command, cls=StageCommand)


@stage()
@click.argument("paths", nargs=-1, required=True, type=str)
@source_options
@reference_option
@shingle_options
@common_options
@click.pass_context
def shingle(ctx, paths, unit, k, whitespace, strip_punct, references, **source):
    """Read documents (files, folders, - for a path list on stdin, or JSONL) into sets of hashed k-shingles."""
    app = app_of(ctx)
    runner = app.open(command="shingle")
    config = resolve(unit=unit, k=k, whitespace=whitespace, strip_punct=strip_punct, null=app.null, **source)
    pipeline.shingle.run(runner, list(paths), config.source, config.shingle, references=references)


@stage()
@signature_options
@common_options
@click.pass_context
def signature(ctx, num_perm, seed, minhash):
    """MinHash signatures of the shingle sets."""
    pipeline.signature.run(app_of(ctx).open(command="signature"), SignatureParams(num_perm, seed, minhash))


@stage()
@band_options
@common_options
@click.pass_context
def band(ctx, threshold, bands, rows, recall):
    """LSH band keys: b bands of r rows, chosen from --threshold (and --recall) or given."""
    if recall is not None:
        check_recall(recall, bands, rows)
    pipeline.band.run(app_of(ctx).open(command="band"), threshold, bands, rows, recall=recall)


@stage()
@candidate_options
@method_option
@common_options
@click.pass_context
def candidates(ctx, max_bucket, min_shingles, min_size, method):
    """Pairs of documents sharing a bucket in at least one band (or, --method exact, with Jaccard >= the band
    stage's threshold)."""
    runner = app_of(ctx).open(command="candidates")
    method = method or CandidateParams().method
    threshold = None if method == "lsh" else inherited_threshold(runner.work, None)
    pipeline.candidates.run(runner, CandidateParams(max_bucket, min_shingles, min_size, method, threshold))


@stage()
@threshold_option
@common_options
@click.pass_context
def verify(ctx, threshold):
    """Exact Jaccard of each candidate pair; print those >= --threshold."""
    app = app_of(ctx)
    runner = app.open(command="verify")
    pipeline.verify.run(runner, VerifyParams(inherited_threshold(runner.work, threshold)))
    app.last = "verify"


@stage()
@cluster_options
@common_options
@click.pass_context
def cluster(ctx, link, keep, prefer):
    """Duplicate groups from the verified pairs, each with a keeper chosen by --keep rules; print them."""
    app = app_of(ctx)
    pipeline.cluster.run(app.open(command="cluster"), resolve(link=link, keep=keep, prefer=prefer).cluster)
    app.last = "cluster"


@stage()
@click.argument("paths", nargs=-1, type=str)
@source_options
@reference_option
@shingle_options
@signature_options
@band_options
@candidate_options
@method_option
@metric_option
@cluster_options
@click.option("--groups", is_flag=True, help="Print duplicate groups (the same as --print groups).")
@click.option("--index", type=click.Path(file_okay=False), metavar="DIR",
              help="Keep the work dir DIR as an index across runs (for cron): only new and changed documents are "
                   "read; parameters are fixed at creation; a run changes DIR all at once or not at all.")
@click.option("--new-only", is_flag=True, help="Report only pairs and groups that involve a document added or "
                                               "changed since the last run that reported.")
@click.option("--rebuild", is_flag=True, help="Rebuild the index with this run's parameters.")
@click.option("--write-deduped", type=click.Path(file_okay=False), metavar="OUT",
              help="Also write the inputs minus the duplicates to the folder OUT, in their format and sharding, "
                   "with OUT/removed.jsonl (id, keeper, Jaccard); a folder's kept files are copied.")
@click.option("--write-deduped-mode", type=click.Choice(DEDUPED_MODES),
              help="How a folder's kept files get into OUT: copy, or link (hard links to the inputs) "
                   "[default: copy].")
@click.option("--replay", type=click.Path(dir_okay=False), metavar="PAIRS.jsonl",
              help="Re-filter, re-group and re-print saved pairs (jsonl output, or a work dir's "
                   "verify/KEY.pairs.jsonl) without reading any document.")
@report_option
@script_options
@common_options
@click.pass_context
def run(ctx, paths, groups, index, new_only, rebuild, replay, report, **options):
    """All stages, from documents to verified pairs (or groups, or paths) on stdout."""
    app = app_of(ctx)
    if index:
        if app.workdir and os.path.abspath(app.workdir) != os.path.abspath(index):
            raise click.UsageError("give either -w/--workdir or --index, not both")
        app.options["workdir"] = index
    app.new_only = new_only
    if groups and not given(ctx, "select"):  # --groups wins over a --print from the config or environment
        app.options["select"] = "groups"
    elif app.fmt == "fdupes" and app.select is None:  # fdupes prints groups, as fdupes does
        app.options["select"] = "groups"
    config = by_extension(resolve(null=app.null, **options), list(paths))
    if replay:
        if paths or report or config.deduped:
            raise click.UsageError("--replay reads saved pairs: give no PATH" + (" and no --report" if report else "")
                                   + (" and no --write-deduped (it needs the documents)" if config.deduped else ""))
        results = Results.of_saved(replay, options["threshold"], config.cluster, config.references, log)
        app.last = "cluster" if app.select not in (None, "pairs") else "verify"
        app.start_output({"replay": replay, "threshold": results.params["threshold"]})
        ctx.exit(app.report(results))
    if not paths:
        raise click.UsageError("give at least one PATH (a file, a folder, or - for paths on stdin), or --replay")
    if config.source.records and app.select == "script":
        raise InputError(JSONL_SCRIPT)
    pipeline_run.check_inputs(list(paths), config.source)
    if config.deduped:
        deduped_corpus.check_target(config.deduped, paths)
    runner = app.open(pipeline_run.cache_workdir(list(paths), config), "run", index=bool(index))
    if config.deduped:
        deduped_corpus.check_target(config.deduped, paths, str(runner.work.root))
    if app.workdir is None:
        pipeline_run.used_cache(runner, list(paths))
        app.cached = True
    groups = (app.select or "pairs") != "pairs" or app.reference_only
    last = pipeline_run.run(runner, list(paths), config, rebuild=rebuild, groups=groups or bool(config.deduped))
    app.last = last if groups else "verify"  # the groups of --write-deduped do not change what is printed
    if config.deduped:
        deduped_corpus.write(runner.work, config.deduped, log)
    if report:
        write_run_report(runner, None if app.last == "cluster" else config.cluster, report)


@stage()
@script_options
@common_options
@click.pass_context
def script(ctx):
    """Print a reviewable sh script that removes, moves or hard-links the duplicates of the groups (never their
    keepers or reference documents); `sh script.sh -n` is a dry run."""
    app = app_of(ctx)
    app.options["select"] = "script"
    app.open(command="script")
    app.last = "cluster"  # reads the stored groups; an error names the stage to run if there are none


COMPARE_IGNORES = ("workdir", "jobs", "scheduler", "scheduler_file", "force", "wait_lock", "progress", "select",
                   "fmt", "null", "exit_code", "reference_only")


@stage()
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@shingle_options
@threshold_option
@click.option("--explain", is_flag=True, help="Show A with the passages it shares with B highlighted.")
@report_option
@without(*COMPARE_IGNORES)
@common_options
@click.pass_context
def compare(ctx, a, b, unit, k, whitespace, strip_punct, threshold, explain, report):
    """Exact Jaccard and containment of two documents (files; - for the text on stdin); exit 0 if Jaccard >=
    --threshold, else 1."""
    app = app_of(ctx)
    refuse_common(ctx, "compare", COMPARE_IGNORES)
    threshold = threshold_or_default(threshold)
    shingle = resolve(unit=unit, k=k, whitespace=whitespace, strip_punct=strip_punct).shingle
    if report:  # first: a report that cannot be made stops the command before it prints
        write_pair_report(a, b, shingle, threshold, report)
    result = pipeline.compare.run(a, b, shingle, explain and not app.quiet)  # "-": the text on stdin
    if not app.quiet:
        lines = [f"jaccard\t{result['jaccard']:.4f}",
                 f"containment\t{result['containment_a_in_b']:.4f}\t(A in B)",
                 f"containment\t{result['containment_b_in_a']:.4f}\t(B in A)",
                 f"shingles\t{result['shingles_a']}\t{result['shingles_b']}\t{result['shared']} shared"]
        click.echo("\n".join(lines))
        if explain:
            _explain(app.output, result, unit)
    ctx.exit(0 if result["jaccard"] >= threshold else 1)


def _explain(output: Output, result: dict, unit: str) -> None:
    from rich.console import Console
    from rich.text import Text

    tokens, sep = result["tokens_a"], " " if unit == "word" else ""
    if tokens is None:  # streamed: its tokens are never all in memory
        log(f"--explain: {result['a']} is larger than {STREAM_BYTES >> 20} MB; its shared passages are shown "
             f"for smaller files only")
        return
    text, position = Text(), 0
    for start, end in result["passages"] + [(len(tokens), len(tokens))]:
        text.append(sep.join(tokens[position:start]) + (sep if start > position else ""))
        if end > start:
            shared = sep.join(tokens[start:end])
            text.append(shared if output.use_color() else f"[[{shared}]]", style="bold yellow")
            text.append(sep)
        position = end
    click.echo(f"shared passages of A: {len(result['passages'])} (covering "
               f"{sum(e - s for s, e in result['passages'])} of {plural(len(tokens), unit)})")
    Console(force_terminal=output.use_color(), no_color=not output.use_color(), highlight=False, soft_wrap=True,
            emoji=False).print(text, markup=False)


QUERY_IGNORES = ("workdir", "jobs", "scheduler", "scheduler_file", "force", "progress", "reference_only")


@stage()
@click.argument("paths", nargs=-1, type=str)
@click.option("--index", type=click.Path(file_okay=False), metavar="DIR", required=True,
              help="The index (or any work dir) to search.")
@shingle_options
@signature_options
@band_options
@without(*QUERY_IGNORES)
@common_options
@click.pass_context
def query(ctx, paths, index, threshold, **fixed):
    """Near-duplicates in an index of the given files (or of the text on stdin, with no PATH or -), with their
    scores; the index is only read. Each pair is (query document, indexed document). Shingle, signature and band
    options are those of the index: given (a cron script's option list), they must equal its own."""
    app = app_of(ctx)
    refuse_common(ctx, "query", QUERY_IGNORES)
    if app.select not in (None, "pairs") or app.fmt == "fdupes":
        raise click.UsageError("query prints pairs: --print pairs is the only choice, and --format fdupes (groups) "
                               "does not apply")
    work = WorkDir(index, create=False)
    work.lock(app.wait_lock, shared=True)  # waits only for a run writing the index
    ctx.find_root().call_on_close(work.release)
    check_query_parameters(work, {name: value for name, value in fixed.items()
                                         if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)})
    pairs, soft = pipeline_run.query(work, list(paths), None, threshold, log)
    app.last = "verify"
    app.start_output({k: v for k, v in ctx.params.items() if v not in (None, (), False) and k != "index"})
    resolved = {**resolved_params(work, "band"), "threshold": inherited_threshold(work, threshold)}
    ctx.exit(app.report(Results(pairs, list, list, soft, resolved)))


@stage()
@band_options
@click.option("--num-perm", type=click.IntRange(1, 8192), default=SIGNATURE_DEFAULTS.num_perm, show_default=True)
@click.pass_context
def tune(ctx, threshold, bands, rows, recall, num_perm):
    """Show the bands and rows chosen for a threshold (and --recall), the S-curve P(s) = 1 - (1 - s^r)^b behind
    them, and what other choices would cost. With -w DIR of a run, each choice's cost is counted on that corpus:
    the candidate pairs it would make, and its recall estimated from the pairs the run verified."""
    corpus = None
    workdir = app_of(ctx).workdir
    if workdir is not None:
        work = WorkDir(workdir, create=False)
        stored = require(work, SignatureRecord).params.num_perm
        if ctx.get_parameter_source("num_perm") not in (None, ParameterSource.DEFAULT) and num_perm != stored:
            raise click.UsageError(f"--num-perm {num_perm}: the signatures in {workdir} have {stored} permutations")
        num_perm, threshold = stored, inherited_threshold(work, threshold)
        corpus = SignedCorpus(work)
    if recall is not None:
        check_recall(recall, bands, rows)
    params = choose_bands(num_perm, threshold, bands, rows, recall=recall)
    b, r = params.bands, params.rows
    t = params.threshold
    lines = [f"num_perm {num_perm}: b = {plural(b, 'band')} x r = {plural(r, 'row')}"
             + (f", chosen for threshold {t}" if t else "") + (f" and recall {recall}" if recall else "")]
    lines.append(describe_bands(params, num_perm))
    if t:
        fp, fn = lsh.error_areas(banding_threshold(t), [b], [r])
        lines.append(f"false-positive area (s < {t}) {fp[0]:.4f}; false-negative area (s >= {t}) {fn[0]:.4f}")
        lines += _choices(t, num_perm, recall, corpus, (b, r))
    lines.append("s\tP(candidate)")
    for i in range(1, 10):
        lines.append(f"{i / 10:.1f}\t{float(lsh.s_curve(i / 10, b, r)):.4f}")
    click.echo("\n".join(lines))


TUNE_RECALLS = (0.9, 0.95, 0.99, 0.999)


def _choices(threshold: float, num_perm: int, recall: float | None, corpus: SignedCorpus | None,
             chosen: tuple[int, int]) -> list[str]:
    """What each choice of (b, r) costs at this threshold: P(t), the recall of pairs at the threshold, and the
    false-positive area integral_0^t P(s) ds, the share of pairs spread evenly below t that become candidates to
    verify. With a signed corpus, also the candidates each choice makes on it (the cost itself; "<=" when only the
    sum over the bands was counted) and its recall there, estimated from the verified pairs."""
    t = banding_threshold(threshold)
    rows: list[tuple[str, tuple[int, int] | int]] = [("default", lsh.optimal_bands(t, num_perm))]
    if chosen != rows[0][1]:
        rows.append(("chosen", chosen))
    for target in sorted({*TUNE_RECALLS, *([recall] if recall else [])}):
        found = bands_for_recall(t, target, num_perm)
        rows.append((f"--recall {target}", found if found else min_num_perm_for_recall(t, target)))
    here = "\tcandidates\trecall here" if corpus is not None else ""
    lines = [f"choice\tb x r\tpermutations\tP({t})\tfalse-positive area{here}"]
    for name, choice in rows:
        if isinstance(choice, int):
            lines.append(f"{name}\t-\t-\t-\tneeds --num-perm {choice}" + ("\t-\t-" if corpus is not None else ""))
            continue
        fp, _ = lsh.error_areas(t, [choice[0]], [choice[1]])
        line = (f"{name}\t{choice[0]} x {choice[1]}\t{choice[0] * choice[1]}\t"
                f"{float(lsh.s_curve(t, *choice)):.4f}\t{fp[0]:.4f}")
        if corpus is not None:
            cost = corpus.cost(*choice, threshold)
            line += (f"\t{'' if cost.distinct else '<='}{cost.candidates}\t"
                     f"{'-' if cost.recall is None else format(cost.recall, '.4f')}")
        lines.append(line)
    return lines


INSPECT_IGNORES = ("jobs", "scheduler", "scheduler_file", "force", "wait_lock", "progress", "select", "fmt", "null",
                   "color", "quiet", "exit_code", "reference_only")


@stage()
@click.argument("paths", nargs=-1, type=str)
@source_options
@shingle_options
@without(*INSPECT_IGNORES)
@common_options
@click.pass_context
def inspect(ctx, paths, unit, k, whitespace, strip_punct, **source):
    """What each stage of the work dir holds, with which parameters, and whether it is up to date. The work dir
    is -w DIR, or the cache work dir `run PATH...` made for the same PATHs and source and shingle options."""
    app = app_of(ctx)
    refuse_common(ctx, "inspect", INSPECT_IGNORES)
    if app.workdir and paths:
        raise click.UsageError("give either -w/--workdir or the PATHs `run` was given, not both")
    if paths:
        config = resolve(unit=unit, k=k, whitespace=whitespace, strip_punct=strip_punct, null=app.null, **source)
        found = pipeline_run.cache_workdir(list(paths), config)
        if not os.path.isdir(found):
            raise click.UsageError(f"no cache work dir for {' '.join(paths)} with these options (looked for "
                                   f"{found}); run `neardup run {' '.join(paths)}` first, with the same options")
        app.options["workdir"] = found
    if not app.workdir:
        raise click.UsageError("inspect needs a work dir: pass -w/--workdir DIR, or the PATHs given to `run`")
    work = WorkDir(app.workdir, create=False)
    manifest = work.manifest()
    click.echo(f"work dir {work.root} (format {manifest.format}, written by nearDup {manifest.version})")
    for name, record, stale in chain(manifest):  # the staleness rule of the stages themselves (require)
        if record is None:
            click.echo(f"{name}: not run")
            continue
        status = "out of date" if stale else "done"
        stored = record.to_json()
        params = json.dumps(stored["params"], sort_keys=True)  # as the manifest file has them
        click.echo(f"{name}: {status} at {record.completed or '?'}, params {params}")
        if isinstance(record, ShingleRecord):
            s = record.stats
            click.echo(f"  {plural(s.docs, 'document')} in {plural(len(record.shard_keys), 'partition')}, "
                       f"{plural(s.bytes, 'byte')}, {plural(s.shingles, 'shingle')}, {s.count('short')} too "
                       f"short, {s.count('binary')} binary skipped, {s.count('replaced')} with invalid UTF-8")
            dead = sum(record.shard_docs) - s.docs
            click.echo(f"  run {record.run}: {plural(s.count('added'), 'document')} added, "
                       f"{s.count('removed')} removed, {s.count('renamed')} renamed; "
                       f"{plural(dead, 'stored row')} of removed or changed documents; "
                       f"reported up to run {manifest.reported or 0}"
                       + ("; an index (parameters fixed)" if manifest.index else ""))
            if (line := formats_line(pipeline.shingle.load_catalog(work, record), record.source.records)):
                click.echo(line)
        elif "stats" in stored:
            stored["stats"].pop("recall", None)  # said in words below
            click.echo("  " + ", ".join(f"{k} {v}" for k, v in sorted(stored["stats"].items())))
            if isinstance(record, VerifyRecord) and (line := recall_line(work, record.stats,
                                                                          record.params.threshold)):
                click.echo(f"  {line}")


EVAL_IGNORES = ("jobs", "scheduler", "scheduler_file", "force", "wait_lock", "progress", "select", "null", "color",
                "exit_code", "reference_only")
EVAL_FIELDS = ("threshold", "precision", "recall", "f1", "ari", "tp", "fp", "fn", "unjudged")
EXACT_FIELDS = ("estimated_recall", "estimated_low", "estimated_high")


@stage("eval")
@click.option("--truth", required=True, metavar="FILE|exact",
              help="Labelled pairs (a, b, label 1/0 or true/false) or cluster labels (id, cluster), as TSV, CSV or "
                   "JSONL; or exact: every pair with exact Jaccard >= t among the work dir's documents.")
@click.option("--pairs", "saved", type=click.Path(dir_okay=False), metavar="PAIRS.jsonl",
              help="Score pairs saved from a run (--format jsonl output, or a work dir's verify/KEY.pairs.jsonl) "
                   "instead of the work dir -w.")
@click.option("--step", type=Finite(0, 1, min_open=True), default=0.05, show_default=True,
              help="Also score at every multiple of STEP above the run's threshold.")
@without(*EVAL_IGNORES)
@common_options
@click.pass_context
def eval_command(ctx, truth, saved, step):
    """Precision, recall and F1 of a run's pairs and the adjusted Rand index of its groups against a truth, at the
    run's threshold and above it (below it the run kept no pairs). The run is the work dir -w, or --pairs."""
    app = app_of(ctx)
    refuse_common(ctx, "eval", EVAL_IGNORES)
    if app.fmt == "fdupes":
        raise click.UsageError("eval prints scores: --format fdupes (groups) does not apply")
    if app.workdir and saved:
        raise click.UsageError("give either -w/--workdir or --pairs, not both")
    if app.runner is not None:  # the run's results are printed and committed when the chain ends
        raise click.UsageError("eval scores a finished run: give it as a command of its own")
    from .. import api  # when used: the command line's start-up does not import the API

    result = api.evaluate(truth, workdir=app.workdir, pairs=saved, step=step, log=app.log)
    exact = result.counts["kind"] == "exact" and result.counts.get("bands") is not None
    rows = [dataclasses.asdict(score) for score in result.scores]
    app.start_output({})
    if app.printer is not None:
        app.printer.header(__version__, "scores", {"truth": truth, "step": step, **({"pairs": saved} if saved else {})})
        app.printer.table("score", EVAL_FIELDS + (EXACT_FIELDS if exact else ()), rows)
        app.printer.summary(result.counts)
    first = result.scores[0]
    app.log(f"summary: at threshold {first.threshold}: precision {_number(first.precision)}, recall "
            f"{_number(first.recall)}, F1 {_number(first.f1)}, ARI {first.ari:.4f}"
            + (f"; estimated recall {_number(first.estimated_recall)}" if exact else ""))


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"
