"""Commands about nearDup itself rather than documents: `help` (and the man page), `config show`.

Registered on the chained group by cli.py. They are not stage commands: their arguments may be command names
(`help run`, `config show run`), which a stage command would take for the next stage.
"""
from __future__ import annotations

import inspect

import click

from . import __version__, settings


# ---------------------------------------------------------------------------------------------- help and man

class Command(click.Command):
    """Options anywhere among the arguments (`cache clean --all`), which a chained group turns off."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.allow_interspersed_args = True
        return super().parse_args(ctx, args)


def _sub_context(root: click.Context, name: str) -> click.Context:
    """The context `neardup NAME --help` would have, so help printed here is the same text."""
    return click.Context(root.command.commands[name], info_name=name, parent=root)


def _complete_command(ctx, param, incomplete):
    return [click.shell_completion.CompletionItem(name) for name in sorted(ctx.find_root().command.commands)
            if name.startswith(incomplete)]


def _check_commands(root: click.Context, names) -> None:
    for name in names:
        if name not in root.command.commands:
            raise click.UsageError(f"no command {name!r}; the commands are: {', '.join(sorted(root.command.commands))}")


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
    group = root.command
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
    lines += [".SH ENVIRONMENT", *_roff_paragraphs(settings.ENVIRONMENT_HELP), ".SH FILES",
              *_roff_paragraphs(settings.FILES_HELP)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- config

@click.command("config", cls=Command)
@click.argument("action", type=click.Choice(["show"]))
@click.argument("commands", nargs=-1, metavar="[COMMAND]...", shell_complete=_complete_command)
@click.pass_context
def config_command(ctx, action, commands):
    """Show the effective default of every option (of the COMMANDs, or of all), as a config file would set it,
    each with where it comes from: default, the config file, the environment (NEARDUP_X), or the command line."""
    root = ctx.find_root()
    _check_commands(root, commands)
    click.echo("\n".join(settings.show(root, list(commands) or sorted(root.command.commands))))


COMMANDS = (help_command, config_command)
