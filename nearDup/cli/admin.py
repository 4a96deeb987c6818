"""Commands about nearDup itself rather than documents: `help` (and the man page), `config show`, `cache`.

Registered on the chained group by cli.py. They are not stage commands: their arguments may be command names
(`help run`, `config show run`), which a stage command would take for the next stage.
"""
from __future__ import annotations

import datetime
import inspect
import re
from pathlib import Path
from typing import cast

import click
from click.core import ParameterSource

from .. import __version__
from ..store.cache import DEFAULT_MAX_SIZE, cache_root, clean, entries
from ..wording import plural
from .settings import ENVIRONMENT_HELP, FILES_HELP, of, show


class Command(click.Command):
    """Options anywhere among the arguments (`cache clean --all`), which a chained group turns off."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.allow_interspersed_args = True
        return super().parse_args(ctx, args)


def _group(ctx: click.Context) -> click.Group:
    """nearDup's group, the root command (click types a context's command as a plain Command)."""
    return cast(click.Group, ctx.find_root().command)


def _sub_context(root: click.Context, name: str) -> click.Context:
    """The context `neardup NAME --help` would have, so help printed here is the same text."""
    return click.Context(_group(root).commands[name], info_name=name, parent=root)


def _complete_command(ctx, param, incomplete):
    return [click.shell_completion.CompletionItem(name) for name in sorted(_group(ctx).commands)
            if name.startswith(incomplete)]


def _check_commands(root: click.Context, names) -> None:
    for name in names:
        if name not in _group(root).commands:
            raise click.UsageError(f"no command {name!r}; the commands are: {', '.join(sorted(_group(root).commands))}")


@click.command("help", cls=Command)
@click.argument("topic", required=False, metavar="[COMMAND]", shell_complete=_complete_command)
@click.option("--man", is_flag=True, help="Print the man page (roff) of every command: "
                                          "`neardup help --man > neardup.1; man ./neardup.1`.")
@click.pass_context
def help_command(ctx, topic, man):
    """The help of COMMAND (the same as `neardup COMMAND --help`); without one, the list of commands."""
    root = ctx.find_root()
    if man:
        click.echo(man_page(root), nl=False)
    elif topic is None:
        formatter = root.make_formatter()
        root.command.format_commands(root, formatter)
        click.echo(formatter.getvalue().rstrip("\n"))
        click.echo("\n`neardup help COMMAND` shows a command's options, `neardup --help` those that go before the "
                   "command, `neardup help --man` prints a man page.")
    else:
        _check_commands(root, [topic])
        sub = _sub_context(root, topic)
        click.echo(sub.command.get_help(sub))


def _roff(text: str) -> str:
    """Text escaped for roff: backslashes, hyphens (else typeset as hyphens, not minus signs), leading dots."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.splitlines())


def _roff_paragraphs(text: str) -> list[str]:
    """Click's help text as roff: paragraphs refilled, those marked \\b (Click's "do not rewrap") kept as typed."""
    out = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        if paragraph.startswith("\b"):
            out += [".PP", ".nf", _roff(paragraph[1:].strip("\n")), ".fi"]
        else:
            out += [".PP", _roff(" ".join(paragraph.split()))]
    return out


def _roff_options(ctx: click.Context, skip=frozenset()) -> list[str]:
    out = []
    for param in ctx.command.get_params(ctx):
        record = param.get_help_record(ctx) if param.name not in skip else None
        if record is not None:
            opts, text = record
            out += [".TP", f"\\fB{_roff(opts)}\\fR", _roff(" ".join(text.split()))]
    return out


def man_page(root: click.Context) -> str:
    """A man page (section 1, roff) generated from the group's and every command's help: it cannot go stale."""
    group = _group(root)
    lines = [f'.TH NEARDUP 1 "" "nearDup {__version__}" "User Commands"', ".SH NAME",
             "neardup \\- find near\\-duplicate documents", ".SH SYNOPSIS",
             "\\fBneardup\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]... "
             "[\\fICOMMAND\\fR [\\fIARGS\\fR]...]...",
             ".SH DESCRIPTION", *_roff_paragraphs(group.help or ""), ".SH OPTIONS", *_roff_options(root),
             ".SH COMMANDS", ".PP", "The options above go before the first command; most commands take them too."]
    common = {p.name for p in group.params} - {"help"}  # listed once, under OPTIONS
    for name in sorted(group.commands):
        sub = _sub_context(root, name)
        usage = " ".join(sub.command.collect_usage_pieces(sub))
        lines += [f'.SS "{_roff(sub.command_path)} {_roff(usage)}"', *_roff_paragraphs(sub.command.help or ""),
                  *_roff_options(sub, common)]
    lines += [".SH ENVIRONMENT", *_roff_paragraphs(ENVIRONMENT_HELP), ".SH FILES",
              *_roff_paragraphs(FILES_HELP)]
    return "\n".join(lines) + "\n"



@click.command("config", cls=Command)
@click.argument("action", type=click.Choice(["show"]))
@click.argument("commands", nargs=-1, metavar="[COMMAND]...", shell_complete=_complete_command)
@click.pass_context
def config_command(ctx, action, commands):
    """Show the effective default of every option (of the COMMANDs, or of all), as a config file would set it,
    each with where it comes from: default, the config file, the environment (NEARDUP_X), or the command line."""
    root = ctx.find_root()
    _check_commands(root, commands)
    click.echo("\n".join(show(root, list(commands) or sorted(root.command.commands))))



class Size(click.ParamType):
    """Bytes, or a number with K, M, G, T (powers of 1000; Ki, Mi, Gi, Ti: of 1024); none: no limit."""

    name = "size"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "none":
            return None
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?)b?\s*", str(value), re.IGNORECASE)
        if m is None or (m[3] and not m[2]):
            self.fail(f"{value!r} is not a size: give bytes, or a number with K, M, G or T (2G), or none", param, ctx)
        return int(float(m[1]) * (1024 if m[3] else 1000) ** " kmgt".index(m[2].lower() or " "))


def _mb(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


@click.command("cache", cls=Command)
@click.argument("action", type=click.Choice(["list", "clean"]))
@click.option("--older-than", type=click.FloatRange(0), metavar="DAYS",
              help="clean: remove the work dirs not used for DAYS days (and only those).")
@click.option("--all", "everything", is_flag=True, help="clean: remove every work dir of the cache.")
@click.option("--max-size", type=Size(), default=DEFAULT_MAX_SIZE, show_default="2G",
              help="The cache's cap: after each `run` that uses the cache, and by `clean` without --older-than or "
                   "--all, the least recently used work dirs are removed until the cache fits (none: no cap).")
@click.pass_context
def cache_command(ctx, action, older_than, everything, max_size):
    """List the work dirs that `run` without -w keeps under $XDG_CACHE_HOME/neardup (size, last use, inputs), or
    clean: remove the least recently used until the cache fits --max-size, or those of --older-than, or --all.
    Only nearDup's own work dirs are removed, never one a run is using."""
    found = entries()
    if action == "list":
        if older_than is not None or everything:
            raise click.UsageError("--older-than and --all go with `cache clean`")
        for e in found:
            used = datetime.datetime.fromtimestamp(e.last_used).strftime("%Y-%m-%d %H:%M")
            click.echo(f"{_mb(e.size)}\t{used}\t{e.path}\t{' '.join(e.inputs) or '?'}")
        click.echo(f"{plural(len(found), 'work dir')}, {_mb(sum(e.size for e in found))} in {cache_root()}"
                   + (f" (cap {_mb(max_size)})" if max_size is not None else " (no cap)"), err=True)
        return
    cap = max_size if ctx.get_parameter_source("max_size") == ParameterSource.COMMANDLINE or not (
        older_than is not None or everything) else None
    removed, busy = clean(found, cap, older_than, everything)
    kept = [e for e in found if e not in removed]
    click.echo(f"removed {plural(len(removed), 'work dir')} ({_mb(sum(e.size for e in removed))}); kept "
               f"{len(kept)} ({_mb(sum(e.size for e in kept))})"
               + (f"; {len(busy)} in use by a run, not removed" if busy else ""), err=True)


def evict(ctx: click.Context, keep: Path, log) -> None:
    """After a run that used the cache: remove the least recently used work dirs beyond the cap."""
    current = of(ctx)
    cap = current.value("cache", "max_size", DEFAULT_MAX_SIZE) if current else DEFAULT_MAX_SIZE
    if cap is None:
        return
    removed, _ = clean(entries(), cap, keep=keep)
    if removed:
        log(f"cache: removed the {plural(len(removed), 'least recently used work dir')} "
            f"({_mb(sum(e.size for e in removed))}) to keep {cache_root()} under {_mb(cap)} "
            f"(NEARDUP_CACHE_MAX_SIZE, or max-size in the config file's [cache])")


COMMANDS = (help_command, config_command, cache_command)
