"""Finding documents: folders, files, path lists on stdin, JSONL files and streams.

Listing yields Items (a file, or a byte range of lines of a JSONL file) sorted by id, cut into partitions. One file
reached by several paths (hard links, a folder given twice) is listed once. Nothing here reads a document's text.
"""
from __future__ import annotations

import array
import bisect
import contextlib
import dataclasses
import fnmatch
import functools
import glob
import hashlib
import itertools
import operator
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from ..config import SourceParams
from ..errors import InputError
from .corpus import compression, parquet_row_groups
from .read import BOMS


class Item(NamedTuple):
    """One unit of input: a whole file (kind "file"), lines [first_line, ...) at bytes [start, end) of a JSONL
    file, or rows [start, end) of a Parquet file (first_line = start + 1)."""

    kind: str
    path: str
    id: str
    size: int
    mtime_ns: int
    start: int = 0
    end: int = 0
    first_line: int = 1
    inode: int = 0

    def fingerprint(self) -> tuple:
        return (self.kind, self.id, self.size, self.mtime_ns, self.start, self.end, self.inode)


class PackedItems:
    """A partition's items as a few columns: what a task carries to a worker, and what its key is a digest of.

    Items pickled one by one (a namedtuple each) are slow to send and receive, on a core the shingling needs;
    strings and one array are not. Iterating gives the Items back."""

    def __init__(self, items: Sequence[Item]):
        self.kinds = "".join(_KIND_LETTERS[item.kind] for item in items)
        self.paths = "\0".join([item.path for item in items])  # no path has a NUL
        self.ids = None if all(item.id == item.path for item in items) else "\0".join([item.id for item in items])
        self.numbers = np.array([item[3:] for item in items], np.int64).reshape(len(items), 6)

    def __len__(self) -> int:
        return len(self.kinds)

    def __iter__(self) -> Iterator[Item]:
        paths = self.paths.split("\0") if self.kinds else []
        ids = paths if self.ids is None else self.ids.split("\0")
        kinds = map(_LETTER_KINDS.__getitem__, self.kinds)
        return map(Item._make, zip(kinds, paths, ids, *self.numbers.T.tolist()))

    def bytes(self) -> int:
        return int(self.numbers[:, 0].sum())

    def fingerprint(self) -> str:
        """A digest of every item's fingerprint (Item.fingerprint: kind, id, size, mtime, byte range, inode)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(self.kinds.encode())
        h.update((self.paths if self.ids is None else self.ids).encode("utf-8", "surrogatepass"))
        h.update(np.ascontiguousarray(self.numbers[:, [0, 1, 2, 3, 5]]).tobytes())
        return h.hexdigest()


class ListedFiles(Sequence[Item]):
    """The files of one folder as columns (list_items(columns=True)): the runs of files _walk gave (each a
    folder's path prefix and its files' names: the paths, which are the ids, are never made one by one) and an
    int64 (n, 3) array of size, mtime_ns and inode. An Item is made only when one is asked for: an incremental run
    matches a million listed files against its catalog by these columns (store.catalog.plan) and looks at the few
    new or changed ones alone, so no Python object per unchanged file outlives the walk."""

    def __init__(self, runs: list[FileRun]):
        self.runs = runs
        self.starts = list(itertools.accumulate((len(run.names) for run in runs), initial=0))
        numbers = [np.frombuffer(run.numbers, np.int64) for run in runs]
        self.numbers = (np.concatenate(numbers) if numbers else np.empty(0, np.int64)).reshape(-1, 3)

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        r = bisect.bisect_right(self.starts, i) - 1
        path = self.runs[r].prefix + self.runs[r].names[i - self.starts[r]]
        size, mtime_ns, inode = self.numbers[i].tolist()
        return Item("file", path, path, size, mtime_ns, inode=inode)

    def __iter__(self) -> Iterator[Item]:
        return itertools.chain.from_iterable(map(_run_items, self.runs))

    def id_bytes(self) -> np.ndarray:
        """The ids as a UTF-8 bytes array (surrogates kept), as the catalog stores them, without a str per path:
        the paths joined by NULs (a path never holds one) and split by numpy, or the names alone, after which
        each folder's prefix is copied in front of its names' rows."""
        runs = [run for run in self.runs if run.names]
        if not runs:
            return np.array([], "S1")
        if len(runs) * 64 > len(self):  # many small folders: joined whole
            return _utf8_split("\0".join(run.prefix + ("\0" + run.prefix).join(run.names) for run in runs),
                               len(self))
        # else a folder's prefix, most of a path's bytes, is put before its names' rows by numpy, not joined to
        # each name and split again (a million paths in 1,000 folders: 0.39 -> 0.23 CPU s)
        names = _utf8_split("\0".join("\0".join(run.names) for run in runs), len(self))
        names = names.view(np.uint8).reshape(len(self), names.dtype.itemsize)
        named = (names != 0).sum(axis=1)  # each name's length: a name holds no NUL
        prefixes = [run.prefix.encode("utf-8", "surrogatepass") for run in runs]
        bounds = list(itertools.accumulate((len(run.names) for run in runs), initial=0))
        width = max(len(prefix) + int(named[lo:hi].max()) for prefix, lo, hi in zip(prefixes, bounds, bounds[1:]))
        rows = np.zeros((len(self), max(width, 1)), np.uint8)
        for prefix, lo, hi in zip(prefixes, bounds, bounds[1:]):
            rows[lo:hi, :len(prefix)] = np.frombuffer(prefix, np.uint8)
            cut = min(names.shape[1], width - len(prefix))  # (this run's names fit: they are NULs past it)
            rows[lo:hi, len(prefix):len(prefix) + cut] = names[lo:hi, :cut]
        return rows.view(f"S{rows.shape[1]}").reshape(len(self))


def utf8_array(texts: Sequence[str]) -> np.ndarray:
    """Texts as a UTF-8 bytes array (surrogates kept): the stored form of ids and paths, which numpy sorts and
    compares without a Python object per value."""
    texts = list(texts)
    if any("\0" in text for text in texts):  # (an id from JSONL may hold one): one encode each
        return np.array([t.encode("utf-8", "surrogatepass") for t in texts], np.bytes_)
    return _utf8_split("\0".join(texts), len(texts))


def _utf8_split(joined: str, n: int) -> np.ndarray:
    """n texts without NULs joined by NULs, as utf8_array gives them: encoded at once and spread into rows by
    numpy, SPLIT_ROWS rows at a time (a million paths: ~0.1 s, against ~0.5 s for numpy's conversion of the str
    objects; whole-array masks took twice as long, in page faults)."""
    if not n:
        return np.array([], "S1")
    data = np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8)
    bounds = np.concatenate(([-1], np.flatnonzero(data == 0), [len(data)]))  # the NULs around each text
    lengths = np.diff(bounds) - 1
    width = max(int(lengths.max()), 1)
    rows = np.zeros((n, width), np.uint8)
    columns = np.arange(width)
    for lo in range(0, n, SPLIT_ROWS):
        hi = min(n, lo + SPLIT_ROWS)
        piece = data[bounds[lo] + 1:bounds[hi]]
        rows[lo:hi][columns < lengths[lo:hi, None]] = piece[piece != 0]
    return rows.view(f"S{width}").reshape(n)


SPLIT_ROWS = 1 << 15


def item_numbers(items: Sequence[Item]) -> np.ndarray:
    """int64 (n, 3): size, mtime_ns and inode of each item."""
    if isinstance(items, ListedFiles):
        return items.numbers
    return np.array([item[3:5] + (item.inode,) for item in items], np.int64).reshape(len(items), 3)


def item_id_bytes(items: Sequence[Item]) -> np.ndarray:
    """The items' ids as a UTF-8 bytes array (surrogates kept)."""
    if isinstance(items, ListedFiles):
        return items.id_bytes()
    return utf8_array([item.id for item in items])


_KIND_LETTERS = {"file": "f", "jsonl": "j", "parquet": "p"}
_LETTER_KINDS = {letter: kind for kind, letter in _KIND_LETTERS.items()}


@dataclasses.dataclass
class Listing:
    items: list[Item]  # lazy (list_items): an iterator, listed as it is consumed
    skipped: dict[str, int]  # hidden, symlink, excluded, same file
    args: list[str]  # the arguments, with - replaced by the paths read from stdin
    links: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # listed path -> skipped links to it
    cuts: dict[str, Cut] = dataclasses.field(default_factory=dict)  # JSONL files' cuts, filled as they are listed


class Cut(NamedTuple):
    """How a JSONL file was cut into items: the file as stat-ed (size, mtime_ns, inode), the partition limits,
    and each item's (start, end, first_line). The next listing reuses it while the file's stat is the same, so an
    unchanged shard costs a stat, not a read of every byte for its newlines."""

    size: int
    mtime_ns: int
    inode: int
    partition_docs: int
    partition_bytes: int
    ranges: np.ndarray  # int64 (items, 3)


def cut_columns(cuts: dict[str, Cut]) -> dict:
    """Cuts as the arrays they are saved as (work dir files are tables of arrays)."""
    paths = sorted(cuts)
    ranges = [cuts[p].ranges for p in paths]
    return {"path": utf8_array(paths).reshape(len(paths)),
            "stat": np.array([cuts[p][:5] for p in paths], np.int64).reshape(len(paths), 5),
            "offsets": np.r_[0, np.cumsum([len(r) for r in ranges], dtype=np.int64)].astype(np.int64),
            "ranges": np.concatenate(ranges).astype(np.int64) if ranges else np.empty((0, 3), np.int64)}


def cuts_of(columns: dict) -> dict[str, Cut]:
    """The cuts saved as cut_columns."""
    offsets = columns["offsets"].tolist()
    return {path.decode("utf-8", "surrogatepass"): Cut(size, mtime_ns, inode, docs, nbytes, columns["ranges"][lo:hi])
            for path, (size, mtime_ns, inode, docs, nbytes), lo, hi in zip(
                columns["path"].tolist(), columns["stat"].tolist(), offsets, offsets[1:])}



def read_path_list(stream, null: bool) -> list[str]:
    """Paths from a byte stream, one per line (or NUL-terminated); blank entries ignored."""
    data = stream.read()
    parts = data.split(b"\0") if null else data.splitlines()
    return [os.fsdecode(p) for p in parts if p.strip()]


def list_items(args: list[str], params: SourceParams, stdin=None, spool: Callable | None = None,
               lazy: bool = False, skip: tuple[str, ...] = (),
               progress: Callable[..., Iterator] | None = None, columns: bool = False,
               cuts: dict[str, Cut] | None = None) -> Listing:
    """Every Item under the given arguments, sorted by id (so the result does not depend on listing order); an
    item found under two arguments is listed once. lazy: for one folder (or JSONL files whose ids ascend), items is an
    iterator that lists the folder (reads the files for their line ends) as it is consumed, already in id order,
    so that its first partitions can be read meanwhile. skip:
    folders never walked into (the work dir, whose own files are not documents). progress: wraps the walk of each
    folder (to show the files found so far). columns: one folder's files are listed as ListedFiles (columns,
    no Item per file), to be matched against a stored catalog. cuts: the last listing's (Listing.cuts), reused for
    the JSONL files whose stat and partition limits are unchanged.

    A file is listed by one path only, however many name it (two spellings of a folder, a folder and a link to
    it, hard links): its first path by argument order, then id order; the others are counted in skipped["same
    file"]. Otherwise the file is paired with itself at Jaccard 1, and a script removes its only copy. A skipped
    path that is a symbolic link (--follow-links) is kept in links, under the path listed: removing that file
    would leave the link dangling."""
    counted = progress or (lambda items, size=None: items)
    skipped = {"hidden": 0, "symlink": 0, "excluded": 0, "special": 0, SAME_FILE: 0}
    seen: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) -> path, of the files listed so far
    links: dict[str, list[str]] = {}
    made: dict[str, Cut] = {}  # Listing.cuts
    skip_dirs = set()
    for folder in skip:
        with contextlib.suppress(OSError):
            skip_dirs.add(_dir_identity(folder))
    found: list[Item] = []
    expanded: list[str] = []
    for arg in args:
        if arg == "-" and not params.jsonl:
            expanded.extend(read_path_list(stdin if stdin is not None else sys.stdin.buffer, params.null))
        elif params.records and is_pattern(arg):
            expanded.extend(shards_matching(arg))
        else:
            expanded.append(arg)
    if lazy and params.jsonl and _ids_ascend(expanded):
        # the ranges of each file come in line order and the files' ids ascend: the files are read for their line
        # ends as the tasks consume the listing, so the first partitions are shingled meanwhile (10M records:
        # 10 GB to read, ~30 s of one core, before the first task otherwise)
        return Listing(itertools.chain.from_iterable(  # type: ignore[arg-type]
            _jsonl_items(arg, params, stdin, spool, cuts, made) for arg in expanded), skipped, expanded, links, made)
    # in one folder walked without following links only a file with several hard links can come twice
    every = len(expanded) > 1 or params.follow_links
    for arg in expanded:
        if params.parquet:
            found.extend(_parquet_items(arg, params, spool))
            continue
        if params.jsonl:
            found.extend(_jsonl_items(arg, params, stdin, spool, cuts, made))
            continue
        try:
            st = os.stat(arg)
        except FileNotFoundError:
            raise InputError(f"{arg}: no such file or directory") from None
        except OSError as e:
            raise InputError(f"{arg}: cannot read ({e.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            if lazy and len(expanded) == 1:
                # lazy: items is an iterator that stages.shingle consumes as it lists
                return Listing(counted(_walk_items(arg, params, skipped, seen, every, links, skip_dirs)),  # type: ignore[arg-type]
                               skipped, expanded, links)
            if columns and len(expanded) == 1:
                runs = list(counted(_walk(arg, params, skipped, seen, every, links, skip_dirs), _run_length))
                return Listing(ListedFiles(runs), skipped, expanded, links)  # type: ignore[arg-type]
            found.extend(counted(_walk_items(arg, params, skipped, seen, every, links, skip_dirs)))
        elif stat.S_ISREG(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                skipped[SAME_FILE] += 1
                if os.path.islink(arg):
                    links.setdefault(seen[st.st_dev, st.st_ino], []).append(arg)
                continue
            seen[st.st_dev, st.st_ino] = arg
            found.append(Item("file", arg, arg, st.st_size, st.st_mtime_ns, inode=st.st_ino))
        else:
            raise InputError(f"{arg}: {_special_kind(st.st_mode)}, not a regular file or folder; copy what it "
                             f"holds to a file to read it")
    if len(expanded) > 1:  # one argument is listed in id order already (a folder by _walk, a JSONL file by line)
        found.sort(key=_ORDER)  # stable: of equal ids, the first found stays first
        found = [item for i, item in enumerate(found) if i == 0 or _ORDER(found[i - 1]) != _ORDER(item)]
    return Listing(found, skipped, expanded, links, made)


def _ids_ascend(labels: list[str]) -> bool:
    """Whether every id of a JSONL file (its label, ":", a line number) sorts before every id of the next file's:
    each label + ":" smaller than the next one's at a position both have (not a prefix of it, nor equal)."""
    marked = [label + ":" for label in labels]
    return all(a < b and not b.startswith(a) for a, b in itertools.pairwise(marked))


def is_pattern(arg: str) -> bool:
    """A JSONL or Parquet PATH that is a glob pattern ('shards/*.jsonl.gz', quoted so that the shell leaves it,
    or too long a list for one command line), not the name of a file."""
    return glob.has_magic(arg) and not os.path.lexists(arg)


def shards_matching(pattern: str) -> list[str]:
    """The files a glob pattern matches, sorted; an error if none."""
    found = sorted(glob.glob(pattern, recursive=True))
    if not found:
        raise InputError(f"{pattern}: no file matches this pattern")
    return found


_ORDER = operator.attrgetter("id", "start")
SAME_FILE = "same file"  # the key in Listing.skipped of paths of a file already listed


def under(roots: Sequence[str], base: str = "") -> Callable[[str], bool]:
    """A test of whether a path is one of roots or lies below one (relative paths and roots taken from base),
    comparing resolved paths, never the spelling: ./master, docs/master/ and /abs/docs/master are one folder,
    wherever it sits among the arguments. A path counts as below a root if it is with its folders resolved (a
    link inside the root) or as the file it resolves to (a link from outside to a file inside the root). Paths
    can also differ where the folders are one: a bind mount, or a share mounted twice, shows a folder at two
    places. So a path also counts as below a root where it, or a folder above it, has the device and inode of a
    root (one stat a folder, each folder once)."""
    resolved = {os.path.realpath(os.path.join(base, r)) for r in roots}
    prefixes = tuple(r.rstrip("/") + "/" for r in resolved)
    real_folder = functools.lru_cache(maxsize=4096)(os.path.realpath)  # the documents of a group share folders
    identities = set()
    for root in resolved:
        with contextlib.suppress(OSError):
            st = os.stat(root)
            identities.add((st.st_dev, st.st_ino))

    @functools.lru_cache(maxsize=4096)
    def within(real: str) -> bool:  # real, or a folder above it, is a root by device and inode
        try:
            st = os.stat(real)
            if (st.st_dev, st.st_ino) in identities:
                return True
        except OSError:  # (not there yet: an output folder to be made)
            pass
        parent = os.path.dirname(real)
        return parent != real and within(parent)

    def test(path: str) -> bool:
        if not resolved:
            return False
        full = os.path.join(base, path)
        head, tail = os.path.split(full)
        spelled = (os.path.join(real_folder(head), tail), os.path.realpath(full))
        return any(p in resolved or p.startswith(prefixes) for p in spelled) or \
            (bool(identities) and any(within(p) for p in spelled))
    return test


def _wanted(rel: str, name: str, params: SourceParams) -> bool:
    def match(patterns):
        return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(rel, g) for g in patterns)
    return (not params.include or match(params.include)) and not match(params.exclude)


class FileRun(NamedTuple):
    """Files of one folder that follow each other in id order: the folder's path prefix, their names, and their
    size, mtime_ns and inode, three int64 a file (array "q")."""

    prefix: str
    names: list[str]
    numbers: array.array


def _walk(root: str, params: SourceParams, skipped: dict, seen: dict, every: bool,
          links: dict, skip_dirs: set | frozenset = frozenset()) -> Iterator[FileRun]:
    """Files below root in id order, as runs (FileRun) listed as they are consumed; hidden entries and symlinks
    skipped unless asked; no loop can recur, and no folder of skip_dirs ((device, inode) pairs) is entered.

    Depth first, each folder's entries sorted with a subfolder named as its files' ids continue (name + "/"):
    then every id below an entry sorts between the ids of the entries before and after it, so files come out in
    the order list_items sorts into. A folder is read whole (_Folder) when the walk enters it; its runs of files
    between subfolders are given out in order, and the first path of a file by that order is the one listed.
    seen: (st_dev, st_ino) -> path of the files listed so far, looked up for every file when every (several
    arguments, or links followed), else only for files with several hard links; links: see list_items."""
    seen_dirs = {_dir_identity(root)}
    if seen_dirs <= skip_dirs:
        return
    seen_dirs |= skip_dirs  # a folder already seen is not entered: one set lookup per folder, as for loops
    top = _Folder(root, "", params, skipped, every)
    stack = [(top, iter(top.steps))]
    while stack:
        folder, steps = stack[-1]
        for step in steps:
            if isinstance(step, FileRun):
                yield step
            elif step[0] == "dir":
                _, name, ident = step
                if ident not in seen_dirs:
                    seen_dirs.add(ident)
                    sub = _Folder(folder.prefix + name, f"{folder.rel}{name}/", params, skipped, every)
                    stack.append((sub, iter(sub.steps)))
                    break  # into the subfolder; this folder's steps go on after it
            else:  # ("check", run, [(file number, identity)]): files that another path may have listed first
                run, dropped = step[1], set()
                for i, ident in step[2]:
                    path = run.prefix + run.names[i]
                    if ident in seen:
                        skipped[SAME_FILE] += 1
                        dropped.add(i)
                        if params.follow_links and os.path.islink(path):
                            links.setdefault(seen[ident], []).append(path)
                    else:
                        seen[ident] = path
                if dropped:
                    kept = [i for i in range(len(run.names)) if i not in dropped]
                    run = FileRun(run.prefix, [run.names[i] for i in kept],
                                  array.array("q", [v for i in kept for v in run.numbers[3 * i:3 * i + 3]]))
                if run.names:
                    yield run
        else:
            stack.pop()


def _walk_items(root: str, params: SourceParams, skipped: dict, seen: dict, every: bool, links: dict,
                skip_dirs: set | frozenset = frozenset()) -> Iterator[Item]:
    """_walk's files as Items, one by one."""
    return itertools.chain.from_iterable(map(_run_items, _walk(root, params, skipped, seen, every, links, skip_dirs)))


def _run_items(run: FileRun) -> Iterator[Item]:
    paths = [run.prefix + name for name in run.names]
    numbers = run.numbers
    return map(Item._make, zip(itertools.repeat("file"), paths, paths, numbers[0::3], numbers[1::3],
                               itertools.repeat(0), itertools.repeat(0), itertools.repeat(1), numbers[2::3]))


def _run_length(run: FileRun) -> int:
    return len(run.names)


class _Folder:
    """A folder read whole: its entries stat-ed relative to an open descriptor (fstatat: the kernel does not
    resolve the whole path again for each file), and its steps in id order (see _walk): runs of files
    (FileRun, or ("check", FileRun, checks) when some of them may have been listed by another path) and
    subfolders ("dir", name, (st_dev, st_ino)). The loop body runs once per file of a folder of a million: it
    makes no object per file that outlives it, beyond the name os.listdir gave."""

    def __init__(self, path: str, rel: str, params: SourceParams, skipped: dict, every: bool):
        prefix = path if path.endswith("/") else path + "/"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise InputError(f"{path}: cannot list folder ({e.strerror})") from None
        try:
            try:
                names = os.listdir(fd)
            except OSError as e:
                raise InputError(f"{path}: cannot list folder ({e.strerror})") from None
            if not params.hidden:
                shown = [name for name in names if name[0] != "."]
                skipped["hidden"] += len(names) - len(shown)
                names = shown
            names.sort()
            filtered = bool(params.include or params.exclude)  # else every file is wanted: no matching per file
            follow = params.follow_links
            stat_at = os.stat  # called as is: a functools.partial of it costs 0.2 us more a file
            files: list[str] = []
            numbers = array.array("q")
            dirs: list[tuple[str, tuple[int, int]]] = []
            checks: list[tuple[int, tuple[int, int]]] = []  # (file number, identity)
            add, extend = files.append, numbers.extend
            for name in names:
                try:
                    st = stat_at(name, dir_fd=fd, follow_symlinks=follow)
                except OSError:  # a dangling link (links followed) or vanished
                    skipped["symlink" if follow and _is_link(name, fd) else "excluded"] += 1
                    continue
                kind = st.st_mode & _S_IFMT
                if kind == _S_IFREG:
                    if filtered and not _wanted(f"{rel}{name}", name, params):
                        skipped["excluded"] += 1
                        continue
                    if every or st.st_nlink > 1:
                        checks.append((len(files), (st.st_dev, st.st_ino)))
                    add(name)
                    extend((st.st_size, st.st_mtime_ns, st.st_ino))
                elif kind == _S_IFDIR:
                    dirs.append((name, (st.st_dev, st.st_ino)))
                elif kind == _S_IFLNK:  # (not followed)
                    skipped["symlink"] += 1
                else:  # a FIFO, socket or device: never opened (a FIFO would block), only counted
                    skipped["special"] += 1
        finally:
            os.close(fd)
        self.prefix, self.rel = prefix, rel
        self.steps: list = []
        dirs.sort(key=lambda d: d[0] + "/")
        start = 0
        for name, ident in [*dirs, ("", (0, 0))]:  # ("": the end) runs of files between the subfolders
            end = bisect.bisect_left(files, name + "/", start) if name else len(files)
            if end > start:
                whole = (start, end) == (0, len(files))
                run = FileRun(prefix, files if whole else files[start:end],
                              numbers if whole else numbers[3 * start:3 * end])
                mine = [(i - start, identity) for i, identity in checks if start <= i < end]
                self.steps.append(("check", run, mine) if mine else run)
            if name:
                self.steps.append(("dir", name, ident))
            start = end


def _is_link(name: str, fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


_S_IFMT, _S_IFREG, _S_IFDIR, _S_IFLNK = 0o170000, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def _special_kind(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def _dir_identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _jsonl_items(arg: str, params: SourceParams, stdin, spool, cuts: dict[str, Cut] | None = None,
                 made: dict[str, Cut] | None = None) -> Iterator[Item]:
    """Byte ranges of whole lines of a JSONL file, each at most partition_docs lines and partition_bytes bytes.

    Standard input and compressed files (.gz, .zst, .bz2, .xz) are first spooled to a plain file in the work dir
    (spool), so that partitions can be read in parallel by seeking. cuts: earlier cuts (Cut), reused for a file
    whose size, mtime and inode are unchanged; made: gets the cut of each file listed."""
    label = arg
    origin = None  # a compressed file's own stat: its records' mtime and inode (keeper rules, --reference), not
    # those of its decompressed copy, made whenever a run first gets to it
    if arg == "-" or compression(arg):
        if spool is None:
            raise InputError(f"{arg}: JSONL from stdin or compressed needs a work dir")
        try:
            path = spool(arg, stdin)
        except OSError as e:
            raise InputError(f"{arg}: cannot read ({e.strerror})") from None
        except EOFError:
            raise InputError(f"{arg}: truncated or corrupt {compression(arg)} file") from None
        if arg != "-":
            try:
                origin = os.stat(arg)
            except OSError as e:
                raise InputError(f"{arg}: cannot read ({e.strerror})") from None
    else:
        path = arg
    cut = (cuts or {}).get(path)
    if cut is not None:
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and cut[:5] == (st.st_size, st.st_mtime_ns, st.st_ino, params.partition_docs,
                                          params.partition_bytes):
            if made is not None:
                made[path] = cut
            mtime_ns, inode = (origin or st).st_mtime_ns, (origin or st).st_ino
            for start, end, line in cut.ranges.tolist():
                yield Item("jsonl", path, f"{label}:{line:012d}", st.st_size, mtime_ns, start, end, line, inode)
            return
    st, head, ends = _read_jsonl_file(arg, path)
    encoding = next((encoding for bom, encoding in BOMS if head.startswith(bom)), "utf-8")
    if encoding != "utf-8":  # its newlines are 2 or 4 bytes: lines are cut in a UTF-8 copy
        if spool is None:
            raise InputError(f"{arg}: JSONL in {encoding[:6].upper()} needs a work dir; convert it to UTF-8 "
                             f"(iconv -f {encoding[:6].upper()} -t UTF-8)")
        try:
            path = spool(path, None, encoding=encoding[:6])  # utf-16 and utf-32 read the BOM and drop it
        except OSError as e:
            raise InputError(f"{arg}: cannot read ({e.strerror})") from None
        st, head, ends = _read_jsonl_file(arg, path)
    start, line, ranges = 0, 0, []
    mtime_ns, inode = (origin or st).st_mtime_ns, (origin or st).st_ino
    while line < len(ends):
        stop = min(line + params.partition_docs, len(ends))
        limit = np.searchsorted(ends, start + params.partition_bytes, side="right")
        stop = max(line + 1, min(stop, int(limit)))
        end = int(ends[stop - 1])
        ranges.append((start, end, line + 1))
        yield Item("jsonl", path, f"{label}:{line + 1:012d}", st.st_size, mtime_ns, start, end, line + 1, inode)
        start, line = end, stop
    if made is not None and encoding == "utf-8":  # (a converted copy is cut anew: its source is another file)
        made[path] = Cut(st.st_size, st.st_mtime_ns, st.st_ino, params.partition_docs, params.partition_bytes,
                         np.array(ranges, np.int64).reshape(len(ranges), 3))


def _read_jsonl_file(arg: str, path: str) -> tuple[os.stat_result, bytes, np.ndarray]:
    """A JSONL file's stat, its first bytes (a BOM) and the end of each line (one past its newline; the last
    line's end, without one too), read a few MB at a time into one buffer and compared into one mask: a copy of
    the file and a mask its size were most of the system time of an index run adding a shard of 100 MB. (Read,
    not mapped: a file cut short meanwhile would kill a process reading its map.)"""
    try:
        st = os.stat(path)
        with open(path, "rb", buffering=0) as f:
            head, ends = _line_ends(f)
    except FileNotFoundError:
        raise InputError(f"{arg}: no such file or directory") from None
    except OSError as e:
        raise InputError(f"{arg}: cannot read ({e.strerror})") from None
    return st, head, ends


NEWLINE_STEP = 1 << 22  # bytes of a JSONL file read and compared at a time for its newlines


def _line_ends(f) -> tuple[bytes, np.ndarray]:
    """The first 4 bytes of the file f and one past each of its newlines (byte 10), and its length if it does not
    end with one."""
    buffer = bytearray(NEWLINE_STEP)
    data, mask = np.frombuffer(buffer, np.uint8), np.empty(NEWLINE_STEP, bool)
    head, found, at, last = b"", [np.empty(0, np.int64)], 0, 10
    while n := f.readinto(buffer):
        head += bytes(buffer[:max(0, min(n, 4 - len(head)))])
        found.append(np.flatnonzero(np.equal(data[:n], 10, out=mask[:n])) + (at + 1))
        at, last = at + n, buffer[n - 1]
    if last != 10:
        found.append(np.array([at], np.int64))
    return head, np.concatenate(found)


def parquet_files(arg: str) -> list[str]:
    """The Parquet file arg, or the .parquet files below the dataset folder arg in path order (hidden ones and
    _-prefixed ones, which Spark and Hive use for metadata and markers, left out)."""
    if not os.path.isdir(arg):
        return [arg]
    files = sorted(os.path.join(top, name) for top, _, names in os.walk(arg)
                   for name in names if name.endswith(".parquet") and not name.startswith((".", "_")))
    if not files:
        raise InputError(f"{arg}: no .parquet files in this folder (--parquet reads a file or a dataset folder of "
                         f".parquet files)")
    return files


SPLIT_ROW_GROUPS = 4  # a Parquet file with a row group of more than this many partitions is read from a split copy


def _parquet_items(arg: str, params: SourceParams, spool: Callable | None = None) -> Iterator[Item]:
    """Row ranges of a Parquet file, or of each .parquet file below a dataset folder (in path order), each within
    one row group and at most partition_docs rows: a task reads only its row groups' id and text columns.

    pyarrow reads a row group whole, so a file whose row groups hold many partitions (pandas and pyarrow write up
    to a million rows in one) had each task read its whole row group: quadratic in its size. Such a file is read
    from a copy of its id and text columns in the work dir (spool: corpus.split_parquet), one row group a range;
    the items, their ids and the rows' identity (the file's stat) stay the original's."""
    for path in parquet_files(arg):
        try:
            st = os.stat(path)
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})") from None
        groups = parquet_row_groups(path)
        read = path
        if spool is not None and max(groups, default=0) > SPLIT_ROW_GROUPS * params.partition_docs:
            read = spool(path, None, parquet=((params.id_field, params.text_field), params.partition_docs))
        row = 0
        for rows in groups:
            for start in range(row, row + rows, params.partition_docs):
                end = min(start + params.partition_docs, row + rows)
                yield Item("parquet", read, f"{path}:{start + 1:012d}", st.st_size, st.st_mtime_ns, start, end,
                           start + 1, st.st_ino)
            row += rows


def partition(items: Iterable[Item], params: SourceParams) -> Iterator[list[Item]]:
    """Consecutive runs of items of at most partition_docs documents and about partition_bytes bytes each, each
    given as soon as it is complete (items may be a listing still going on).

    Depends only on the sorted listing, never on --jobs, so every engine sees the same partitions."""
    current: list[Item] = []
    size = 0
    for item in items:
        if current and (item.kind != "file" or len(current) >= params.partition_docs
                        or size + item.size > params.partition_bytes):
            yield current
            current, size = [], 0
        current.append(item)
        size += item.size
    if current:
        yield current
