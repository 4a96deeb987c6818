"""Help, man page and completion.

Each through the real command line, in a process whose XDG_CACHE_HOME and XDG_CONFIG_HOME point into tmp_path.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nearDup.cli import cli

NEARDUP = [sys.executable, "-m", "nearDup"]


def neardup(tmp_path, *args, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "XDG_CONFIG_HOME": str(tmp_path / "config"), **(env or {})}
    return subprocess.run([*NEARDUP, *map(str, args)], env=full_env, capture_output=True, text=True, **kw)


# ------------------------------------------------------------------------------------------ help and completion

def test_help_topic_is_the_commands_help_and_no_topic_lists_the_commands():
    runner = CliRunner()
    listing = runner.invoke(cli, ["help"])
    assert listing.exit_code == 0
    for name, command in cli.commands.items():
        assert command.help, f"{name} has no help"
        assert f"  {name} " in listing.stdout, name
        own = runner.invoke(cli, [name, "--help"], prog_name="neardup")
        topic = runner.invoke(cli, ["help", name], prog_name="neardup")
        assert topic.exit_code == 0 and own.exit_code == 0, name
        assert topic.stdout == own.stdout and f"Usage: neardup {name}" in topic.stdout, name
    bad = runner.invoke(cli, ["help", "nope"])
    assert bad.exit_code == 2 and "no command 'nope'" in bad.stderr


def test_man_page_has_every_command_and_option(tmp_path):
    r = neardup(tmp_path, "help", "--man")
    assert r.returncode == 0 and r.stdout.startswith(".TH NEARDUP 1 ")
    for name, command in cli.commands.items():
        assert f'.SS "neardup {name} ' in r.stdout, name
        for param in command.params:
            for opt in param.opts if param.param_type_name == "option" and not param.hidden else ():
                assert opt.replace("-", "\\-") in r.stdout, (name, opt)
    if shutil.which("groff"):  # the roff is well formed: no warnings when typeset
        typeset = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=r.stdout, capture_output=True,
                                 text=True)
        assert typeset.returncode == 0 and typeset.stderr == "", typeset.stderr


@pytest.mark.parametrize("words,cword,expected", [
    ("neardup ru", 1, {"run"}),
    ("neardup run docs --thr", 3, {"--threshold"}),
    ("neardup help ca", 2, {"candidates"}),
])
def test_shell_completion(tmp_path, words, cword, expected):
    r = neardup(tmp_path, env={"_NEARDUP_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert r.returncode == 0
    assert {line.split(",", 1)[1] for line in r.stdout.splitlines()} == expected


def test_completion_script_for_each_shell(tmp_path):
    for shell in ("bash", "zsh", "fish"):
        r = neardup(tmp_path, env={"_NEARDUP_COMPLETE": f"{shell}_source"})
        assert r.returncode == 0 and "_NEARDUP_COMPLETE" in r.stdout, shell
