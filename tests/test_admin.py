"""Help, man page and completion; defaults from the environment and the config file.

Each through the real command line, in a process whose XDG_CACHE_HOME and XDG_CONFIG_HOME point into tmp_path.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from nearDup.cli import cli

from conftest import SAMPLE

NEARDUP = [sys.executable, "-m", "nearDup"]


def neardup(tmp_path, *args, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "XDG_CONFIG_HOME": str(tmp_path / "config"), **(env or {})}
    return subprocess.run([*NEARDUP, *map(str, args)], env=full_env, capture_output=True, text=True, **kw)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


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


# ------------------------------------------------------------------------------------------ defaults

def pairs(r: subprocess.CompletedProcess) -> list[str]:
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_environment_config_file_and_command_line_in_that_order(tmp_path):
    def run(*extra, env=None):
        return pairs(neardup(tmp_path, "-w", tmp_path / "w", "run", SAMPLE, *extra, env=env))

    strict, default = run("-t", "0.95"), run()
    assert strict != default and all(float(line.split("\t")[0]) >= 0.95 for line in strict)
    assert run(env={"NEARDUP_THRESHOLD": "0.95"}) == strict
    config = tmp_path / "config" / "neardup" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("threshold = 0.95\n")
    assert run() == strict
    assert run("-t", "0.8", env={"NEARDUP_THRESHOLD": "0.95"}) == default
    # an option of every command from the environment, and again on the command line before the command
    r = neardup(tmp_path, "--format", "tsv", "-w", tmp_path / "w", "run", SAMPLE, env={"NEARDUP_FORMAT": "jsonl"})
    assert pairs(r) == strict


def test_the_specific_setting_wins_over_the_general_one(tmp_path):
    def tune(*extra, env=None):  # the threshold tune chose its bands for: quicker than a run
        r = neardup(tmp_path, *extra, "tune", env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()[0].rsplit(" ", 1)[1]

    config = tmp_path / "config" / "neardup" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("threshold = 0.95\n")
    assert tune() == "0.95"  # the file
    assert tune(env={"NEARDUP_THRESHOLD": "0.6"}) == "0.6"  # the environment over the file
    assert tune(env={"NEARDUP_TUNE_THRESHOLD": "0.7", "NEARDUP_THRESHOLD": "0.6"}) == "0.7"  # the specific one
    config.write_text("threshold = 0.95\n[tune]\nthreshold = 0.5\n")
    assert tune() == "0.5"
    other = tmp_path / "other.toml"
    other.write_text("threshold = 0.55\n")
    assert tune("--config", other) == tune(env={"NEARDUP_CONFIG": str(other)}) == "0.55"


def test_config_show_reports_each_value_and_its_source(tmp_path):
    config = tmp_path / "my.toml"
    config.write_text('threshold = 0.7\nformat = "jsonl"\n[run]\nk = 3\ninclude = ["*.txt"]\n')
    r = neardup(tmp_path, "--config", config, "-j", "2", "config", "show", "run", "tune",
                env={"NEARDUP_SEED": "7", "NEARDUP_TUNE_THRESHOLD": "0.6"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for expected in [f"# config file: {config}", "jobs = 2  # command line",
                     f'format = "jsonl"  # config file {config}', "# workdir is not set  # default",
                     f"k = 3  # config file {config} [run]", f'include = ["*.txt"]  # config file {config} [run]',
                     "seed = 7  # environment NEARDUP_SEED", f"threshold = 0.7  # config file {config}",
                     "num-perm = 128  # default", "threshold = 0.6  # environment NEARDUP_TUNE_THRESHOLD",
                     'keep = "first,oldest,shallowest,alpha"  # default']:
        assert expected in lines, expected
    shown = tomllib.loads(r.stdout)  # the output is itself a config file
    assert shown["run"]["threshold"] == 0.7 and shown["tune"]["threshold"] == 0.6 and shown["jobs"] == 2


@pytest.mark.parametrize("text,env,message", [
    ("tresh = 0.9\n", {}, "{path}: tresh: no option --tresh in any command"),
    ("threshold = 1.5\n", {}, "{path}: threshold: 1.5 is not in the range 0<x<=1."),
    ("[run]\nk = 0\n", {}, "{path}: [run] k: 0 is not in the range 1<=x<=64."),
    ("[run]\njobs = 2\n", {}, "{path}: [run] jobs: --jobs is an option of every command; set it at the top level"),
    ("[tune]\nk = 2\n", {}, "{path}: [tune] k: `neardup tune` has no option --k"),
    ("[nope]\nk = 2\n", {}, "{path}: nope: no command 'nope'"),
    ("threshold = \n", {}, "{path}: not valid TOML"),
    ("", {"NEARDUP_THRESHOLD": "high"}, "environment NEARDUP_THRESHOLD: 'high' is not a valid float range."),
])
def test_bad_config_is_one_line_naming_the_file_and_key(tmp_path, text, env, message):
    path = tmp_path / "config" / "neardup" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    for command in (["tune"], ["run", SAMPLE]):
        r = neardup(tmp_path, *command, env=env)
        assert message.format(path=path) in one_error_line(r)


def test_a_missing_config_file_given_by_name_is_an_error(tmp_path):
    assert "no such config file" in one_error_line(neardup(tmp_path, "--config", tmp_path / "nope.toml", "tune"))
