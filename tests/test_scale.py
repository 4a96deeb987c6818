"""What lets a run reach 10M records (#23): the JSONL listing streamed to the tasks, the same items and the same
output as the listing read whole."""
from __future__ import annotations

import json
import random

from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.config import SourceParams
from nearDup.text.inputs import list_items


def write_shard(path, first: int, n: int) -> None:
    with open(path, "w") as f:
        for i in range(first, first + n):
            rng = random.Random(i if i % 5 else 0)  # every 5th record: the same words
            words = " ".join(f"w{rng.randrange(1000)}" for _ in range(30))
            f.write(json.dumps({"id": f"r{i:04d}", "text": words}) + "\n")


def test_jsonl_shards_are_listed_lazily_in_the_order_and_ranges_of_the_whole_listing(tmp_path):
    names = ["s-00.jsonl", "s-01.jsonl", "s-02.jsonl"]
    for k, name in enumerate(names):
        write_shard(tmp_path / name, 100 * k, 23)
    source = SourceParams(jsonl=True, partition_docs=5)
    paths = [str(tmp_path / name) for name in names]
    whole = list_items(paths, source).items
    lazy = list_items(paths, source, lazy=True).items
    assert not isinstance(lazy, list)
    assert list(lazy) == whole and len(whole) == 3 * 5
    assert [item.id for item in whole] == sorted(item.id for item in whole)
    # ids that would not ascend file after file (given out of order, twice, or one label a prefix of another's
    # ids): the whole listing, sorted and deduplicated, as before
    for args in ([paths[1], paths[0]], [paths[0], paths[0]], [paths[0], paths[0] + ":x"]):
        if args[-1].endswith(":x"):
            write_shard(args[-1], 500, 3)
        listed = list_items(args, source, lazy=True).items
        assert isinstance(listed, list)
        assert listed == list_items(args, source).items


def test_a_run_over_jsonl_shards_prints_what_it_printed_over_them_as_one_file(tmp_path):
    names = ["s-00.jsonl", "s-01.jsonl", "s-02.jsonl"]
    for k, name in enumerate(names):
        write_shard(tmp_path / name, 100 * k, 40)
    with open(tmp_path / "all.jsonl", "w") as out:
        for name in names:
            out.write((tmp_path / name).read_text())
    runner = CliRunner()
    sharded = runner.invoke(cli, ["-w", str(tmp_path / "w1"), "run", "--jsonl", str(tmp_path / "s-*.jsonl"),
                                  "--partition-docs", "7", "-t", "0.5", "--format", "tsv"])
    whole = runner.invoke(cli, ["-w", str(tmp_path / "w2"), "run", "--jsonl", str(tmp_path / "all.jsonl"),
                                "--partition-docs", "7", "-t", "0.5", "--format", "tsv"])
    assert sharded.exit_code == whole.exit_code == 0, sharded.output
    pairs = sorted(line for line in sharded.stdout.splitlines() if line)
    assert pairs == sorted(line for line in whole.stdout.splitlines() if line)
    # the copies (every 5th record has the same words) pair up, and nothing else
    copies = [i for k in range(3) for i in range(100 * k, 100 * k + 40) if i % 5 == 0]
    assert len(pairs) == len(copies) * (len(copies) - 1) // 2
