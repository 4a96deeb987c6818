"""The Python API (nearDup.find_duplicates, nearDup.Index): the command line's results, record for record, its
checks and messages as exceptions, and nothing printed."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import nearDup
from nearDup.cli import cli

from conftest import REPO, SAMPLE, brute_force_pairs


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def jsonl(*args, input=None) -> dict[str, list[dict]]:
    """The records of a command line with --format jsonl, by type, without their "type"."""
    r = invoke(*args, "--format", "jsonl", input=input)
    assert r.exit_code == 0, r.output
    out: dict[str, list[dict]] = {}
    for line in r.stdout.splitlines():
        record = json.loads(line)
        out.setdefault(record.pop("type"), []).append(record)
    return out


def records(items) -> list[dict]:
    """Typed records as JSON would give them back (a Group's tuple of members is a list), without the containment
    fields a Jaccard run leaves None."""
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if not (k.endswith("containment") and v is None)}
        return [plain(v) for v in value] if isinstance(value, list) else value

    return plain(json.loads(json.dumps([dataclasses.asdict(item) for item in items])))


def cli_options(options: dict) -> list[str]:
    """The command-line form of find_duplicates's keyword options."""
    out = []
    for name, value in options.items():
        flag = "-k" if name == "k" else "--" + name.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


CASES = {
    "word-oph": {"threshold": 0.5, "partition_docs": 40},
    "char-permutation": {"unit": "char", "k": 7, "minhash": "permutation", "threshold": 0.6, "link": "connected",
                         "include": "doc00[0-4]*"},  # one glob, not a list: the API takes it as the CLI does
    "bands-given": {"bands": 16, "rows": 4, "threshold": 0.7, "keep": "longest,alpha"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_find_duplicates_gives_the_pairs_and_groups_of_run(case, corpus, tmp_path):
    folder, texts = corpus
    options = CASES[case]
    result = nearDup.find_duplicates([str(folder)], **options)
    args = ["-w", tmp_path / "w", "run", folder, *cli_options(options)]
    assert records(result.pairs) == jsonl(*args)["pair"]
    assert records(result.groups) == jsonl(*args, "--groups")["group"]
    if case == "word-oph":  # and against an independent truth: LSH may miss pairs, never invent them
        truth = brute_force_pairs(texts, 0.5)
        found = {(p.a, p.b): p.jaccard for p in result.pairs}
        assert found and all(truth[pair] == pytest.approx(j) for pair, j in found.items())
        assert len(found) >= 0.95 * len(truth)


def test_find_duplicates_on_sample_corpus_with_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    result = nearDup.find_duplicates(["sample_corpus/"])
    cli_records = jsonl("-w", tmp_path / "w", "run", "sample_corpus/", "--groups")
    assert records(result.groups) == cli_records["group"]
    assert len(result.pairs) == cli_records["summary"][0]["pairs"] == 10
    assert result.params["threshold"] == 0.8 and result.params["bands"] == 14 and result.unreadable == 0


def test_texts_with_ids_are_read_as_jsonl_records(tmp_path):
    rng_words = [f"w{i}" for i in range(400)]
    base = " ".join(rng_words[:120])
    texts = [base, base.replace("w7 ", "x7 "), " ".join(reversed(rng_words[:120])), base + " w399 w398"]
    ids = ["base", "edited", "reversed", "longer"]
    result = nearDup.find_duplicates(texts=texts, ids=ids, threshold=0.5)
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts)))
    assert records(result.pairs) == jsonl("-w", tmp_path / "w", "run", "--jsonl", source, "-t", 0.5)["pair"]
    assert {(p.a, p.b) for p in result.pairs} == set(brute_force_pairs(dict(zip(ids, texts)), 0.5))
    assert [p.a for p in nearDup.find_duplicates(texts=[base, base], min_shingles=1).pairs] == ["0"]


def test_index_open_add_query_match_run_index_and_query(corpus, tmp_path, monkeypatch):
    folder, texts = corpus
    monkeypatch.chdir(folder.parent)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for i, name in enumerate(sorted(texts)):
        (first if i % 2 else second).joinpath(Path(name).name).write_text(texts[name])
    options = {"threshold": 0.5, "partition_docs": 25}
    idx = nearDup.Index.open(tmp_path / "idx", **options)
    idx.add([str(first)])
    both = idx.add([str(second)])
    new = idx.add([str(second)], new_only=True)  # nothing changed since the last add
    cli_args = ["run", "--index", tmp_path / "cli-idx", first, second, *cli_options(options)]
    assert records(both.pairs) == jsonl(*cli_args)["pair"]
    assert records(both.groups) == jsonl(*cli_args, "--groups")["group"]
    assert new.pairs == () and new.groups == ()
    probe = texts[sorted(texts)[0]]
    found = idx.query(probe)
    assert found and records(found) == jsonl("query", "--index", tmp_path / "cli-idx", input=probe)["pair"]
    assert found[0].a == "-" and found[0].jaccard == 1.0
    with pytest.raises(nearDup.ParameterError, match=r"this index was built with -k 5, not 4; query uses"):
        nearDup.Index.open(tmp_path / "idx", k=4).query(probe)
    with pytest.raises(nearDup.ParameterError, match=r"this index was built with shingle k 5, not 4; run with"):
        nearDup.Index.open(tmp_path / "idx", k=4).add([str(first)])


def cli_error(*args) -> str:
    r = invoke(*args)
    assert r.exit_code == 2
    return r.stderr.strip().removeprefix("neardup: error: ")


@pytest.mark.parametrize(("options", "exception"), [
    ({"bands": 200}, nearDup.ParameterError),
    ({"bands": 20, "rows": 20}, nearDup.ParameterError),
    ({"keep": "first,biggest"}, nearDup.ParameterError),
    ({"prefer": "(unclosed"}, nearDup.ParameterError),
])
def test_errors_are_the_command_lines_as_neardup_errors(options, exception, tmp_path):
    with pytest.raises(exception) as raised:
        nearDup.find_duplicates([str(SAMPLE)], **options)
    assert isinstance(raised.value, nearDup.NearDupError)
    assert str(raised.value) == cli_error("-w", tmp_path / "w", "run", SAMPLE, *cli_options(options))


def test_bad_inputs_and_values_raise_before_any_work(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(nearDup.InputError) as raised:
        nearDup.find_duplicates([str(missing)])
    assert str(raised.value) == cli_error("-w", tmp_path / "w", "run", missing)
    for options, message in [({"k": 0}, "-k: 0 is not in the range 1<=x<=64"),
                             ({"threshold": float("nan")}, "--threshold: nan is not in the range 0<x<=1"),
                             ({"unit": "line"}, "--unit: 'line' is not one of word, char"),
                             ({"num_perm": 9000}, "--num-perm: 9000 is not in the range 1<=x<=8192")]:
        with pytest.raises(nearDup.ParameterError, match=re.escape(message)):
            nearDup.find_duplicates([str(SAMPLE)], **options)
    with pytest.raises(TypeError):
        nearDup.find_duplicates([str(SAMPLE)], tresholds=0.5)  # a misspelt option is not ignored
    with pytest.raises(nearDup.ParameterError, match="3 ids for 2 texts"):
        nearDup.find_duplicates(texts=["a", "b"], ids=["x", "y", "z"])
    with pytest.raises(nearDup.WorkDirError):
        nearDup.Index.open(tmp_path / "no-index").query("some text")
    assert not (tmp_path / "w").exists() and not missing.exists()


def test_prints_nothing_and_removes_its_temporary_work_dir(capfd, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    heard: list[str] = []
    result = nearDup.find_duplicates([str(SAMPLE)], log=heard.append)
    assert len(result.pairs) == 10
    assert capfd.readouterr() == ("", "")
    assert list(tmp_path.iterdir()) == []  # the temporary work dir is gone
    assert any(line.startswith("verify: 10 of 13 candidate pairs") for line in heard)
    kept = tmp_path / "kept"
    nearDup.find_duplicates([str(SAMPLE)], workdir=kept)
    assert (kept / "manifest.json").exists()


def test_the_readme_example_runs(monkeypatch, capsys):
    """The README's Python example, run as written (from the repository's folder, on sample_corpus)."""
    readme = (REPO / "README.md").read_text()
    code = re.search(r"## Python API\n.*?```python\n(.*?)```", readme, re.S)
    assert code is not None
    monkeypatch.chdir(REPO)
    exec(compile(code.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "1.000  sample_corpus/lighthouses_copy.txt  sample_corpus/lighthouses_original.txt" in out
    assert "Pair(a='a', b='b', jaccard=0.894" in out and "error: --bands 200" in out


def test_the_package_ships_its_type_hints():
    assert (REPO / "nearDup" / "py.typed").exists()
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["nearDup"]
