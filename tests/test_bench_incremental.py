"""bench/incremental.py's run that adds only a hundredth of the new documents: it must add exactly the first ones,
where the base's listing sees them, and never change the new documents it is cut from."""
from __future__ import annotations

import fnmatch
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import incremental


def test_few_of_a_jsonl_shard_is_its_first_hundredth_and_matches_the_base_glob(tmp_path):
    new = tmp_path / "jsonl-new-250" / "shard-zz-new.jsonl"
    new.parent.mkdir()
    lines = [f'{{"id": "new-{i:08d}", "text": "t {i}"}}\n'.encode() for i in range(250)]
    new.write_bytes(b"".join(lines))
    few, count = incremental.few_of(str(new), jsonl=True)
    assert count == 2
    assert fnmatch.fnmatch(os.path.basename(few), "shard-*.jsonl")  # what the benchmark's --jsonl glob lists
    assert os.path.dirname(few) == str(new.parent) and few != str(new)
    with open(few, "rb") as f:
        assert f.read() == b"".join(lines[:2])
    assert new.read_bytes() == b"".join(lines)
    assert incremental.few_of(str(new), jsonl=True) == (few, 2)  # made once, then reused


def test_few_of_a_folder_links_its_first_hundredth_in_path_order(tmp_path):
    new = tmp_path / "new-300"
    names = [os.path.join(f"{i % 3:04d}", f"{i:06d}.txt") for i in range(300)]
    for name in names:
        (new / name).parent.mkdir(parents=True, exist_ok=True)
        (new / name).write_text(f"text {name}")
    few, count = incremental.few_of(str(new), jsonl=False)
    assert count == 3
    got = sorted(os.path.relpath(os.path.join(top, n), few) for top, _, ns in os.walk(few) for n in ns)
    assert got == sorted(names)[:3]
    for name in got:  # hard links: the same files, not copies
        assert os.stat(os.path.join(few, name)).st_ino == os.stat(new / name).st_ino
    assert sum(len(ns) for _, _, ns in os.walk(new)) == 300
