"""The incremental index at scale (issue 23 item 4): what an incremental run skips must not change what it
finds."""
from __future__ import annotations

import os
from pathlib import Path

from nearDup.config import SourceParams
from nearDup.text.inputs import ListedFiles, item_id_bytes, item_numbers, list_items


def test_a_folder_listed_as_columns_gives_the_items_of_the_usual_listing(tmp_path):
    root = tmp_path / "docs"
    for rel in ("b/x.txt", "a.txt", "a/y.txt", "a/z/é.txt", ".hidden", "a-b.txt", "c/.h/q.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel * 3)
    os.link(root / "a.txt", root / "b" / "hard.txt")  # a second name of one file: listed once
    os.symlink(root / "a.txt", root / "link.txt")
    for params in (SourceParams(), SourceParams(hidden=True, follow_links=True), SourceParams(exclude=("x*",))):
        usual = list_items([str(root)], params)
        columns = list_items([str(root)], params, columns=True)
        assert isinstance(columns.items, ListedFiles) and not isinstance(usual.items, ListedFiles)
        assert list(columns.items) == usual.items and columns.items[:2] == usual.items[:2]
        assert [columns.items[i] for i in range(len(usual.items))] == usual.items
        assert columns.skipped == usual.skipped and columns.links == usual.links
        assert (item_numbers(columns.items) == item_numbers(usual.items)).all()
        assert (item_id_bytes(columns.items) == item_id_bytes(usual.items)).all()
        expected = [(str(p), p.stat().st_size) for p in sorted(Path(root).rglob("*"), key=lambda p: str(p))
                    if p.is_file() and not p.is_symlink() and (params.hidden or "/." not in str(p))]
        assert {(i.path, i.size) for i in usual.items} <= set(expected)
