"""The command line: one chained Click group whose subcommands are the pipeline's stages, plus run, tune, inspect.

Thin by design: parse options into parameter objects, call the library, print. Errors become one line on stderr and
exit status 2 in one place (main.NearDupGroup.main). main.py: the group and its plumbing; options.py: the option
decorators; app.py: one command line's state and its output; commands.py and admin.py: the commands.
"""
from __future__ import annotations

from .admin import COMMANDS
from .commands import (
    band,
    candidates,
    cluster,
    compare,
    eval_command,
    inspect,
    query,
    run,
    script,
    shingle,
    signature,
    tune,
    verify,
)
from .extract import extract_command
from .main import cli, main
from .report import report_command

for _command in (shingle, signature, band, candidates, verify, cluster, run, script, compare, query, tune, inspect,
                 eval_command, report_command, extract_command, *COMMANDS):
    cli.add_command(_command)

__all__ = ["cli", "main"]
