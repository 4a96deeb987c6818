"""The catalog and its plan, without the CLI: stored rows matched against a listing, checked against outcomes worked
out by hand (which row stays live, which is renamed, which item is read again)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from nearDup.config import SourceParams
from nearDup.store.catalog import (
    NUMBERS,
    TEXT,
    Catalog,
    ShardRows,
    binary_columns,
    binary_of,
    fingerprint,
    item_digest,
    plan,
    skip_known_binary,
    stored_columns,
    summary,
)
from nearDup.store.workdir import StoredTable, WorkDir
from nearDup.text.inputs import Item


def sha(data: bytes) -> str:
    """A document's content hash as an index stores it: SHA-256's first 16 bytes (of the file, or of a JSONL text)."""
    return hashlib.sha256(data).hexdigest()[:32]


def jsonl_digest(kind, doc_id, size, mtime_ns, start, end, inode) -> str:
    """What a catalog row keeps of a JSONL range: 8 bytes of BLAKE2b over its fingerprint joined by NULs."""
    text = "\0".join(map(str, (kind, doc_id, size, mtime_ns, start, end, inode)))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def catalog(rows: list[dict]) -> Catalog:
    """A catalog from row dicts (missing numbers are 0, live 1), text kept as Python lists."""
    columns: dict = {f: [r.get(f, "") for r in rows] for f in TEXT}
    columns.update({f: np.array([r.get(f, 1 if f == "live" else 0) for r in rows], np.int64) for f in NUMBERS})
    return Catalog(columns)


def column(cat: Catalog, field: str) -> list:
    return list(cat[field]) if field in TEXT else cat[field].tolist()


# ------------------------------------------------------------------------------------------ plan: files

def test_plan_of_files_keeps_unchanged_touched_and_renamed_rows_and_reads_the_rest(tmp_path):
    text = {name: f"the text of {name} ".encode() * 5 for name in "abcdefgh"}
    text["c_new"] = b"c was rewritten"
    text["h"] = b"x" * len(text["f"])  # a new file of a deleted file's size: read for its hash, matches nothing
    paths = {}
    for name in ("a", "b", "c", "e", "g", "h"):
        paths[name] = str(tmp_path / f"{name}.txt")
    (tmp_path / "a.txt").write_bytes(text["a"])
    (tmp_path / "b.txt").write_bytes(text["b"])
    (tmp_path / "c.txt").write_bytes(text["c_new"])
    (tmp_path / "e.txt").write_bytes(text["d"])  # d.txt renamed to e.txt
    (tmp_path / "g.txt").write_bytes(text["g"] + b"longer")
    (tmp_path / "h.txt").write_bytes(text["h"])
    stored = catalog([
        {"id": paths["a"], "sha": sha(text["a"]), "size": len(text["a"]), "mtime_ns": 100, "inode": 1, "added": 1},
        {"id": paths["b"], "sha": sha(text["b"]), "size": len(text["b"]), "mtime_ns": 200, "inode": 2, "added": 1},
        {"id": paths["c"], "sha": sha(text["c"]), "size": len(text["c"]), "mtime_ns": 300, "inode": 3, "added": 1},
        {"id": str(tmp_path / "d.txt"), "sha": sha(text["d"]), "size": len(text["d"]), "mtime_ns": 400, "inode": 4,
         "added": 1, "shingles": 7},
        {"id": str(tmp_path / "f.txt"), "sha": sha(text["f"]), "size": len(text["f"]), "mtime_ns": 500, "inode": 5,
         "added": 1},
    ])
    items = [
        Item("file", paths["a"], paths["a"], len(text["a"]), 100, inode=1),  # unchanged
        Item("file", paths["b"], paths["b"], len(text["b"]), 999, inode=2),  # touched: new mtime, same text
        Item("file", paths["c"], paths["c"], len(text["c_new"]), 301, inode=3),  # rewritten
        Item("file", paths["e"], paths["e"], len(text["d"]), 401, inode=9),  # d renamed
        Item("file", paths["g"], paths["g"], len(text["g"]) + 6, 600, inode=6),  # new, no released size
        Item("file", paths["h"], paths["h"], len(text["h"]), 700, inode=7),  # new, a released size
    ]
    result = plan(stored, items, SourceParams())
    assert [(item.id, wanted) for item, wanted in result.todo] == [(paths["c"], None), (paths["g"], None),
                                                                   (paths["h"], None)]
    assert result.renamed == 1 and result.removed == 2  # c's old text and f are gone
    cat = result.catalog
    assert column(cat, "id") == [paths["a"], paths["b"], paths["c"], paths["e"], str(tmp_path / "f.txt")]
    assert column(cat, "live") == [1, 1, 0, 1, 0] and result.died.tolist() == [2, 4]  # (b touched, d renamed)
    assert column(cat, "mtime_ns") == [100, 999, 300, 401, 500]  # claimed rows take the listed stat
    assert column(cat, "inode") == [1, 2, 3, 9, 5]
    assert column(cat, "shingles") == [0, 0, 0, 7, 0] and column(cat, "added") == [1] * 5  # the row is reused
    assert column(stored, "id")[3] == str(tmp_path / "d.txt") and column(stored, "live") == [1] * 5  # not mutated


def test_plan_without_stored_rows_reads_every_item():
    items = [Item("file", "/x/a", "/x/a", 5, 1), Item("file", "/x/b", "/x/b", 6, 2)]
    result = plan(Catalog.empty(), items, SourceParams())
    assert result.todo == [(items[0], None), (items[1], None)]
    assert (result.renamed, result.removed, len(result.catalog)) == (0, 0, 0)


def test_plan_with_nothing_released_reads_no_file(tmp_path):
    """Unchanged rows and new items of other sizes: no file is opened (the new one does not even exist)."""
    stored = catalog([{"id": "/x/a", "sha": "s", "size": 5, "mtime_ns": 1, "inode": 1}])
    items = [Item("file", "/x/a", "/x/a", 5, 1, inode=1), Item("file", str(tmp_path / "gone"), "/x/b", 5, 2)]
    result = plan(stored, items, SourceParams())
    assert [(i.id, w) for i, w in result.todo] == [("/x/b", None)]
    assert column(result.catalog, "live") == [1] and (result.renamed, result.removed) == (0, 0)


def test_plan_keeps_dead_rows_dead(tmp_path):
    """A row already dead is never revived, even by a file with its id and stat."""
    stored = catalog([{"id": "/x/a", "sha": "s", "size": 5, "mtime_ns": 1, "inode": 1, "live": 0},
                      {"id": "/x/b", "sha": "t", "size": 6, "mtime_ns": 1, "inode": 2}])
    (tmp_path / "a").write_bytes(b"12345")
    items = [Item("file", str(tmp_path / "a"), "/x/a", 5, 1, inode=1), Item("file", "/x/b", "/x/b", 6, 1, inode=2)]
    result = plan(stored, items, SourceParams())
    assert [i.id for i, _ in result.todo] == ["/x/a"] and column(result.catalog, "live") == [0, 1]
    assert result.removed == 0 and result.died.tolist() == []  # (dead before: not died now)


# ------------------------------------------------------------------------------------------ plan: JSONL

def jsonl_file(path, records: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """Write (id, text) records one a line; their byte ranges [start, end)."""
    lines = [(json.dumps({"id": i, "text": t}) + "\n").encode() for i, t in records]
    path.write_bytes(b"".join(lines))
    ends = np.cumsum([len(line) for line in lines]).tolist()
    return list(zip([0, *ends[:-1]], ends))


def test_item_digest_is_a_digest_of_the_jsonl_fingerprint_and_empty_for_files():
    item = Item("jsonl", "/d/x.jsonl", "/d/x.jsonl:000000000003", 120, 55, 40, 80, 3, 9)
    assert item_digest(item) == jsonl_digest("jsonl", "/d/x.jsonl:000000000003", 120, 55, 40, 80, 9)
    assert len(item_digest(item)) == 16 and item_digest(Item("file", "/a", "/a", 1, 1)) == ""


def test_plan_of_jsonl_claims_rows_by_id_and_hash_and_asks_only_for_new_ids(tmp_path):
    # the file held ("1", "one text"), ("2", "two text"), ("3", "three text"); it is gone: only its digests remain
    new = [("1", "one text"), ("2", "two text, edited"), ("4", "three text"), ("5", "five text")]
    path = tmp_path / "x.jsonl"
    old_ranges = [(0, 40), (40, 80)]  # the old file's two ranges
    old_items = [Item("jsonl", str(path), f"{path}:{n:012d}", 80, 10, s, e, n, 3)
                 for n, (s, e) in zip((1, 3), old_ranges)]
    kept = tmp_path / "kept.jsonl"  # another file, unchanged: matched by digest, never read
    kept_item = Item("jsonl", str(kept), f"{kept}:000000000001", 30, 5, 0, 30, 1, 8)
    stored = catalog([
        {"id": "1", "sha": sha(b"one text"), "item": item_digest(old_items[0]), "size": 8, "mtime_ns": 10, "inode": 3},
        {"id": "2", "sha": sha(b"two text"), "item": item_digest(old_items[0]), "size": 8, "mtime_ns": 10, "inode": 3},
        {"id": "3", "sha": sha(b"three text"), "item": item_digest(old_items[1]), "size": 10, "mtime_ns": 10,
         "inode": 3},
        {"id": "k", "sha": "kept", "item": item_digest(kept_item), "size": 4, "mtime_ns": 5, "inode": 8},
    ])
    ranges = jsonl_file(path, new)
    size = path.stat().st_size
    items = [Item("jsonl", str(path), f"{path}:{n:012d}", size, 20, ranges[n - 1][0], ranges[n][1], n, 4)
             for n in (1, 3)]
    result = plan(stored, [*items, kept_item], SourceParams(jsonl=True))
    assert result.todo == [(items[0], frozenset({"2"})), (items[1], frozenset({"5"}))]
    assert result.renamed == 1 and result.removed == 1  # 3 -> 4 renamed; the old text of 2 is gone
    cat = result.catalog
    assert column(cat, "id") == ["1", "2", "4", "k"] and column(cat, "live") == [1, 0, 1, 1]
    assert result.died.tolist() == [1]  # 2's old text (3's row is claimed by 4)
    assert column(cat, "item") == [jsonl_digest(*items[0].fingerprint()), item_digest(old_items[0]),
                                   jsonl_digest(*items[1].fingerprint()), item_digest(kept_item)]
    assert column(cat, "mtime_ns") == [20, 10, 20, 5] and column(cat, "inode") == [4, 3, 4, 8]


# ------------------------------------------------------------------------------------------ Catalog

def three() -> Catalog:
    return catalog([
        {"id": "a", "sha": "s1", "size": 10, "shingles": 4, "live": 1, "replaced": 1, "added": 1},
        {"id": "bé", "sha": "s2", "size": 20, "shingles": 0, "live": 1, "added": 2},
        {"id": "c\udce9", "sha": "s3", "size": 40, "shingles": 9, "live": 0, "added": 2},
    ])


def test_stored_form_is_utf8_bytes_with_surrogates_kept_and_reads_back_the_same():
    cat = three()
    stored = cat.stored()
    assert stored["id"].tolist() == [b"a", "bé".encode(), b"c\xed\xb3\xa9"]  # surrogatepass, not replaced
    assert stored["id"].dtype.kind == "S" and stored["size"].tolist() == [10, 20, 40]
    again = Catalog(stored)
    assert again.ids == ["a", "bé", "c\udce9"] and again["sha"] == ["s1", "s2", "s3"]
    assert again.row(2) == {"id": "c\udce9", "sha": "s3", "item": "", "size": 40, "mtime_ns": 0, "inode": 0,
                            "shingles": 9, "replaced": 0, "added": 2, "live": 0}
    assert again.ids_of([2, 0]) == {2: "c\udce9", 0: "a"} == cat.ids_of([2, 0])
    assert again.id_bytes().tolist() == cat.id_bytes().tolist() == stored["id"].tolist()


def test_ids_by_id_sorts_as_python_sorts_the_ids():
    """Catalog.ids_by_id against sorted() of the ids as str, from the stored UTF-8 bytes (a mapped catalog) and
    from the ids held as str: non-ASCII, lone surrogates (undecodable file names: their bytes ED A0-BF sort
    between U+D7FF and U+E000, as the code points do), astral characters, a NUL inside an id, an id that is a
    prefix of another."""
    rng = np.random.default_rng(7)
    alphabet = ["a", "b", "\0", "\x7f", "\x80", "é", "\ud7ff", "\udc80", "\udcff", "\ue000", "\uffff", "😀",
                "\U0010ffff"]
    ids = sorted({"".join(rng.choice(alphabet, rng.integers(1, 5))) for _ in range(1000)} - {""})
    ids = [i for i in ids if not i.endswith("\0")]  # (numpy's bytes drop trailing NULs: not an id a run stores)
    rng.shuffle(ids)
    held = catalog([{"id": i, "sha": "s", "size": 1, "shingles": 1, "live": 1, "added": 1} for i in ids])
    rows = np.sort(rng.choice(len(ids), 300, replace=False))
    want = sorted(rows.tolist(), key=lambda n: ids[n])
    for cat in (held, Catalog(held.stored())):
        order, names = cat.ids_by_id(rows)
        assert rows[order].tolist() == want and names == [ids[n] for n in want]


def test_summary_counts_live_rows_only():
    assert three().summary() == {"docs": 2, "bytes": 30, "shingles": 4, "short": 1, "replaced": 1}
    assert Catalog.empty().summary() == {"docs": 0, "bytes": 0, "shingles": 0, "short": 0, "replaced": 0}


def test_take_selects_and_reorders_rows_in_either_form():
    for cat in (three(), Catalog(three().stored())):
        assert cat.take(np.arange(3)) is cat
        taken = cat.take(np.array([2, 0]))
        assert taken.ids == ["c\udce9", "a"] and column(taken, "size") == [40, 10]
        assert column(taken, "live") == [0, 1] and len(cat.take(np.array([], np.int64))) == 0


def test_concat_joins_rows_of_any_form_and_skips_empty_parts():
    one, two = three(), Catalog(catalog([{"id": "a much longer id", "sha": "s9", "size": 1}]).stored())
    assert one.concat(Catalog.empty()) is one and Catalog.empty().concat(one) is one
    for parts in ((Catalog(one.stored()), two), (one, two)):  # bytes + bytes (widths 3 and 16), list + bytes
        joined = parts[0].concat(Catalog.empty(), parts[1])
        assert joined.ids == ["a", "bé", "c\udce9", "a much longer id"]
        assert column(joined, "size") == [10, 20, 40, 1] and column(joined, "live") == [1, 1, 0, 1]
    bytes_joined = Catalog(one.stored()).concat(two)
    assert bytes_joined.columns["id"].dtype == np.dtype("S16")  # stayed bytes: never decoded


def test_same_and_fingerprint_do_not_depend_on_the_form_held():
    cat = three()
    stored = Catalog(cat.stored())
    wide = Catalog({**cat.stored(), "id": cat.stored()["id"].astype("S40"), "sha": np.array(["s1", "s2", "s3"])
                    .astype("S8")})
    assert cat.same(stored) and stored.same(cat)
    assert cat.fingerprint() == stored.fingerprint() == wide.fingerprint()
    changed = {  # each kind of change a run must notice
        "id": Catalog({**cat.columns, "id": ["a", "bé", "c"]}),
        "live": Catalog({**cat.columns, "live": np.array([1, 1, 1])}),
        "mtime": Catalog({**cat.columns, "mtime_ns": np.array([0, 0, 1])}),
        "sha": Catalog({**cat.columns, "sha": ["s1", "s2", "s4"]}),
        "rows": cat.take(np.array([0, 1])),
    }
    prints = {cat.fingerprint()} | {c.fingerprint() for c in changed.values()}
    assert len(prints) == len(changed) + 1
    assert not any(cat.same(c) for name, c in changed.items() if name != "rows")
    # the split between two text values is part of the digest: ["ab", "c"] is not ["a", "bc"]
    ab = catalog([{"id": "ab"}, {"id": "c"}])
    assert ab.fingerprint() != catalog([{"id": "a"}, {"id": "bc"}]).fingerprint()


def test_of_shard_marks_rows_live_and_keeps_the_run_they_were_added_in():
    columns = {f: np.array([x.encode() for x in v]) for f, v in
               (("id", ["p", "q"]), ("sha", ["h1", "h2"]), ("item", ["", ""]))}
    columns.update({f: np.array([3, 4], np.int64) for f in ("size", "mtime_ns", "inode", "shingles", "replaced")})
    fresh = Catalog.of_shard(columns, {}, run=7)
    assert column(fresh, "added") == [7, 7] and column(fresh, "live") == [1, 1]
    rebuilt = Catalog.of_shard(columns, {("q", "h2"): 2, ("p", "other"): 1}, run=7)
    assert column(rebuilt, "added") == [7, 2]


# ------------------------------------------------------------------------------------------ binary files

def test_skip_known_binary_skips_only_unchanged_files():
    known = {"/a.bin": (10, 100, 1), "/b.bin": (20, 200, 2), "/gone.bin": (1, 1, 1), "/j": (5, 5, 5)}
    items = [Item("file", "/a.bin", "/a.bin", 10, 100, inode=1),  # unchanged: skipped
             Item("file", "/b.bin", "/b.bin", 20, 201, inode=2),  # touched: planned again
             Item("jsonl", "/j", "/j", 5, 5, inode=5),  # same numbers but a JSONL range: never skipped
             Item("file", "/t.txt", "/t.txt", 10, 100, inode=1)]
    rest, still = skip_known_binary(items, known)
    assert rest == items[1:] and still == {"/a.bin": (10, 100, 1)}
    assert skip_known_binary(items, {}) == (items, {})


def test_binary_columns_round_trip_in_id_order_through_a_table(tmp_path):
    binary = {"/z": (3, 30, 300), "/a\udce9": (1, 10, 100), "/m": (2, 2**62, 200)}
    columns = binary_columns(binary)
    assert columns["id"].tolist() == [b"/a\xed\xb3\xa9", b"/m", b"/z"]  # sorted by id: equal sets, equal bytes
    assert columns["size"].tolist() == [1, 2, 3] and columns["mtime_ns"].tolist() == [10, 2**62, 30]
    assert columns["inode"].tolist() == [100, 200, 300]
    work = WorkDir(tmp_path / "w")
    work.save_table(work.path("shingle", "0123456789ab.binary.npz"), columns)
    assert binary_of(work.load_table(work.path("shingle", "0123456789ab.binary.npz"), "shingle")) == binary
    empty = binary_columns({})
    assert [len(c) for c in empty.values()] == [0, 0, 0, 0] and binary_of(empty) == {}


def test_distinct_live_ids_agrees_with_a_python_set_in_order_or_not_and_ignores_dead_rows():
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(0, 12))
        ids = [f"d{int(v)}" for v in rng.integers(0, 15, size=n)]
        if trial % 3 == 0:
            ids.sort()  # a listing's order: the check takes its fast path
        live = rng.random(n) < 0.7
        rows = [{"id": i, "live": int(alive)} for i, alive in zip(ids, live)]
        expected = len({i for i, alive in zip(ids, live) if alive}) == int(live.sum())
        held = catalog(rows)
        assert held.distinct_live_ids() == expected
        assert Catalog(held.stored()).distinct_live_ids() == expected  # as stored: UTF-8 bytes


def test_plan_matches_files_to_rows_of_appended_shards_out_of_id_order():
    """Rows out of id order (shards appended by later runs): each listed file finds its own row by id and stat."""
    rng = np.random.default_rng(3)
    names = [f"/x/{i:03d}" for i in rng.permutation(50)]
    stored = catalog([{"id": name, "sha": f"h{name}", "size": 10 + i, "mtime_ns": 7, "inode": 100 + i}
                      for i, name in enumerate(names)])
    kept = sorted(range(50), key=lambda i: names[i])[:40]  # the 10 last by id are gone
    items = [Item("file", names[i], names[i], 10 + i, 7, inode=100 + i) for i in kept]
    items += [Item("file", f"/x/new{j}", f"/x/new{j}", 999, 7, inode=900 + j) for j in range(5)]
    items.sort(key=lambda item: item.id)
    result = plan(stored, items, SourceParams())
    assert column(result.catalog, "live") == [int(i in kept) for i in range(50)]
    assert [item.id for item, _ in result.todo] == [f"/x/new{j}" for j in range(5)]
    assert (result.renamed, result.removed) == (0, 10)
    assert result.died.tolist() == sorted(set(range(50)) - set(kept))


def test_segments_give_the_concatenations_fingerprint_summary_and_stored_file(tmp_path):
    """The shingle stage no longer joins the kept rows and the new shards' rows in memory (10M documents: 1.1 GB
    and copies): fingerprint, summary and the saved table, segment by segment, are those of the concatenation."""
    work = WorkDir(tmp_path / "w")
    kept = Catalog(three().stored())  # ids 4 bytes wide at most, one dead row
    shards = [[{"id": "a much longer id", "sha": "s9", "size": 7, "shingles": 0},
               {"id": "q", "sha": "h2", "size": 5, "shingles": 3, "replaced": 1}], [], [{"id": "z", "sha": "h3"}]]
    rows, carried = [], {("q", "h2"): 2}
    for n, shard in enumerate(shards):
        path = work.part("shingle", n, "docs.npz")
        work.save_table(path, catalog(shard).stored())
        rows.append(ShardRows(StoredTable(path, "shingle").read, len(shard), carried, run=7))
    whole = kept.concat(*(Catalog.of_shard(catalog(shard).stored(), carried, 7) for shard in shards))
    segments = [Catalog.empty(), kept, *rows]
    assert fingerprint(segments) == whole.fingerprint() and summary(segments) == whole.summary()
    assert column(whole, "added")[3:] == [7, 2, 7] and whole.summary()["short"] == 3  # (the carried run kept)
    work.save_columns(tmp_path / "segments.npz", stored_columns(segments))
    stored = whole.stored()
    work.save_table(tmp_path / "whole.npz", {**stored, "live": stored["live"].astype(np.int8)})  # (stored as int8)
    assert (tmp_path / "segments.npz").stat().st_size == (tmp_path / "whole.npz").stat().st_size
    written, expected = (work.load_table(tmp_path / name, "shingle") for name in ("segments.npz", "whole.npz"))
    assert list(written) == list(expected) and sorted(written) == sorted((*TEXT, *NUMBERS))  # same member order
    assert all(written[f].dtype == expected[f].dtype and np.array_equal(written[f], expected[f]) for f in written)
    assert fingerprint([Catalog.empty()]) == Catalog.empty().fingerprint()


def test_a_row_decodes_only_its_own_text():
    """Docs[n] for the keepers of a few groups decoded every id, hash and item of the catalog into Python
    strings (10M rows: ~2 GB on the client)."""
    cat = Catalog(three().stored())
    assert cat.row(1)["id"] == "bé" and cat.row(2)["id"] == "c\udce9" and cat.row(2)["sha"] == "s3"
    assert cat._decoded == {}
    assert three().row(1) == cat.row(1)


def rss_file_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:")) / 1024


def test_let_go_drops_the_pages_of_mapped_columns_and_they_read_again(tmp_path):
    """Later stages map the catalog (one file of 10M rows: 1.1 GB) and read whole columns of it (live, shingles,
    size, id: 320 MB); let go, those pages leave the client's RSS, and the columns still read the same."""
    work = WorkDir(tmp_path / "w")
    path = work.output("shingle", "catalog.npz", "0123456789ab")
    rows = 4_000_000  # 32 MB a column
    work.save_table(path, {"size": np.arange(rows, dtype=np.int64), "live": np.ones(rows, np.int64)})
    cat = Catalog(work.load_table(path, "shingle", mmap=True))
    before = rss_file_mb()
    assert int(cat["size"].sum()) == rows * (rows - 1) // 2 and cat.live.all()
    assert rss_file_mb() - before > 50
    cat.let_go()
    assert rss_file_mb() - before < 10
    assert int(cat["size"][-1]) == rows - 1 and int(cat["size"].sum()) == rows * (rows - 1) // 2
    Catalog(three().stored()).let_go()  # columns in memory: nothing to let go


@pytest.mark.parametrize("size", [16, 5, 24])
def test_value_runs_are_the_runs_of_equal_values(size):
    """_value_runs (compared as 8-byte words where the width allows) against a loop over the values."""
    from nearDup.store.catalog import _value_runs

    rng = np.random.default_rng(size)
    for n in (0, 1, 2, 1000):
        values = np.repeat(rng.integers(0, 3, n), rng.integers(1, 4, n))[:n]
        column = np.array([(b"x" * size + b"%d" % v)[-size:] for v in values], f"S{size}")
        starts = [i for i in range(n) if i == 0 or column[i] != column[i - 1]]
        assert _value_runs(column) == (starts, [*starts[1:], n] if n else [])


def test_text_values_decode_as_each_decoded_alone():
    """decoded (one decode of the values joined by NULs, unless one holds a NUL) gives each value's own decode:
    non-ASCII, lone surrogates, empty values, NULs inside, none and one value."""
    from nearDup.store.catalog import decoded

    texts = ["a", "é", "", "x\udcff", "日本", "", "last"]
    for values in ([t.encode("utf-8", "surrogatepass") for t in texts], [b"a\0b", b"c"], [b"\0"], [b""], [b"z"],
                   []):
        assert decoded(values) == [v.decode("utf-8", "surrogatepass") for v in values]
