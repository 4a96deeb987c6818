"""Help, man page and completion; defaults from the environment and the config file; the cache of work dirs.

Each through the real command line, in a process whose XDG_CACHE_HOME and XDG_CONFIG_HOME point into tmp_path.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.config import DEFAULT_RULES

from conftest import SAMPLE

NEARDUP = [sys.executable, "-m", "nearDup"]


def neardup(tmp_path: Path, *args, env=None, **kw) -> subprocess.CompletedProcess:
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
    ("neardup help ca", 2, {"cache", "candidates"}),
    ("neardup cache cl", 2, {"clean"}),
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


def test_a_flag_on_the_command_line_wins_over_a_print_from_the_config_file(tmp_path):
    config = tmp_path / "config" / "neardup" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('print = "dupes"\n')
    dupes = pairs(neardup(tmp_path, "-w", tmp_path / "w", "run", SAMPLE))
    groups = pairs(neardup(tmp_path, "-w", tmp_path / "w", "run", SAMPLE, "--groups"))
    assert dupes and all(len(line.split("\t")) == 1 for line in dupes)
    assert {line.split("\t")[1] for line in groups} == {"keeper", "duplicate"}
    assert {line.split("\t")[3] for line in groups if line.split("\t")[1] == "duplicate"} == set(dupes)


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
                     f'keep = "{",".join(DEFAULT_RULES)}"  # default']:
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


# ------------------------------------------------------------------------------------------ the cache

def make_inputs(tmp_path: Path, names: str) -> dict[str, Path]:
    """A small copy of the sample corpus per name: each run on one makes its own cache work dir."""
    out = {}
    for name in names:
        folder = tmp_path / "in" / name
        folder.mkdir(parents=True)
        for source in sorted(SAMPLE.iterdir())[:4]:
            shutil.copy(source, folder / source.name)
        out[name] = folder
    return out


def cached(tmp_path: Path) -> dict[str, Path]:
    """{the input folder's name: its work dir}, read from the work dirs' own cache.json."""
    import json
    root = tmp_path / "cache" / "neardup"
    out = {}
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        if (d / "cache.json").exists():
            (inputs,) = json.loads((d / "cache.json").read_text())["inputs"]
            out[Path(inputs).name] = d
    return out


def age(work: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(work / "cache.json", (t, t))


def du(path: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)


def test_cache_list_shows_size_last_use_and_inputs_under_xdg_cache_home(tmp_path):
    inputs = make_inputs(tmp_path, "ab")
    for folder in inputs.values():
        assert neardup(tmp_path, "run", folder).returncode == 0
    work = cached(tmp_path)
    assert set(work) == {"a", "b"} and all(w.parent == tmp_path / "cache" / "neardup" for w in work.values())
    age(work["a"], 3600)
    r = neardup(tmp_path, "cache", "list")
    assert r.returncode == 0
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert [row[2] for row in rows] == [str(work["b"]), str(work["a"])]  # most recently used first
    assert [row[3] for row in rows] == [str(inputs["b"]), str(inputs["a"])]
    assert rows[0][0] == f"{du(work['b']) / 1e6:.1f} MB"
    used = os.stat(work["a"] / "cache.json").st_mtime  # the last use age() set, not a clock read later
    assert time.strftime("%Y-%m-%d %H:%M", time.localtime(used)) == rows[1][1]
    assert r.stderr.startswith("2 work dirs, ")


def test_cache_clean_removes_old_then_all_but_never_foreign_or_locked_folders(tmp_path):
    inputs = make_inputs(tmp_path, "abc")
    for folder in inputs.values():
        assert neardup(tmp_path, "run", folder).returncode == 0
    work = cached(tmp_path)
    age(work["a"], 10 * 86400)
    root = tmp_path / "cache" / "neardup"
    foreign = {root / "notes": "mine", root / "fake" / "lock": "", root / "fake" / "manifest.json": '{"no": 1}',
               root / "lockless" / "manifest.json": '{"format": 4}', root / "README": "keep me"}
    for path, text in foreign.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    (root / "link").symlink_to(work["b"])

    r = neardup(tmp_path, "cache", "clean", "--older-than", 5)
    assert r.returncode == 0 and r.stderr.startswith("removed 1 work dir (")
    assert not work["a"].exists() and work["b"].is_dir() and work["c"].is_dir()

    fd = os.open(work["b"] / "lock", os.O_RDWR)  # a run holding b's lock
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = neardup(tmp_path, "cache", "clean", "--all")
        assert r.returncode == 0 and "1 in use by a run, not removed" in r.stderr
        assert work["b"].is_dir() and not work["c"].exists()
    finally:
        os.close(fd)
    assert neardup(tmp_path, "cache", "clean", "--all").returncode == 0
    assert not work["b"].exists()
    assert {p: p.read_text() for p in foreign} == foreign and (root / "link").is_symlink()
    assert sorted(os.listdir(root)) == ["README", "fake", "link", "lockless", "notes"]


def test_a_run_evicts_the_least_recently_used_work_dirs_beyond_the_cap(tmp_path):
    inputs = make_inputs(tmp_path, "abc")
    for folder in inputs.values():
        assert neardup(tmp_path, "run", folder).returncode == 0
    work = cached(tmp_path)
    for name, seconds in (("a", 300), ("b", 200), ("c", 100)):
        age(work[name], seconds)
    size = {name: du(w) for name, w in work.items()}
    cap = size["b"] + size["c"] + size["a"] // 2  # a, b and c do not fit; without a they do
    config = tmp_path / "config" / "neardup" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[cache]\nmax-size = {cap}\n")
    r = neardup(tmp_path, "run", inputs["c"])  # uses c again
    assert r.returncode == 0 and "cache: removed the 1 least recently used work dir" in r.stderr
    assert not work["a"].exists() and work["b"].is_dir() and work["c"].is_dir()
    r = neardup(tmp_path, "run", inputs["b"], env={"NEARDUP_CACHE_MAX_SIZE": "1"})  # never the run's own
    assert r.returncode == 0 and set(cached(tmp_path)) == {"b"}
    r = neardup(tmp_path, "run", inputs["a"], env={"NEARDUP_CACHE_MAX_SIZE": "none"})
    assert r.returncode == 0 and set(cached(tmp_path)) == {"a", "b"} and "cache:" not in r.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="watches the run's open files in /proc")
def test_a_run_waiting_for_a_work_dir_that_clean_removes_stops_cleanly(tmp_path):
    (folder,) = make_inputs(tmp_path, "a").values()
    assert neardup(tmp_path, "run", folder).returncode == 0
    work = cached(tmp_path)["a"]
    fd = os.open(work / "lock", os.O_RDWR)  # what `cache clean` holds while it removes the work dir
    fcntl.flock(fd, fcntl.LOCK_EX)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    waiting = subprocess.Popen([*NEARDUP, "run", str(folder), "--wait-lock", "30"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while str(work / "lock") not in _open_files(waiting.pid):  # until the run has the lock file open and waits
            assert time.monotonic() < deadline and waiting.poll() is None
            time.sleep(0.05)
        doomed = work.with_name(work.name + ".removed")
        os.rename(work, doomed)
        shutil.rmtree(doomed)
    finally:
        os.close(fd)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 2 and out == ""
    assert err.strip().endswith("work dir was removed by `neardup cache clean` while this run waited for it; "
                                "run again"), err


def _open_files(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return out
