"""Copies: documents with identical shingle sets, paired, verified and grouped once per set.

Documents whose shingle sets are equal (copies of one text, whatever their names) form a *class*, labelled by its
smallest global number. Equal sets have equal signatures, hence equal band keys in every band, so a class always
falls whole into one bucket of each band. A bucket of up to --max-bucket documents gives every pair of its
documents: that is, for its distinct classes A, B, ... the *class pairs* (A, B), standing for the |A| x |B| pairs
A x B, and (A, A) for a class of two or more, standing for its |A| (|A| - 1) / 2 pairs (lsh.class_bucket_pairs). A
bucket over --max-bucket gives its star pairs document by document, as before: they are linear in its size.

All pairs that a class pair stands for have the same exact Jaccard, signature estimate and set sizes (the sets
are the same), so verification checks it once, through the labels; (A, A) is Jaccard 1. The pairs themselves are
made only as they are written (`expanded_pairs`), in the order of the listing, a bounded number at a time; the
grouping stage takes a class as a star of edges to its first document (`class_edges`), and the weighted degree of
each document in closed form (`class_degree`). 3,000 copies are one entry, not 4.5 million.
"""
from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..kernels import lsh, sets
from ..kernels.hashing import U64, fmix64
from ..store.catalog import Catalog
from ..store.manifest import CandidatesRecord, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from .band import DIGEST
from .driver import PartitionArrays, part_starts, require
from .shingle import load_catalog

CONFIRM_BATCH = 20_000  # documents whose sets are gathered at once to confirm that they are equal
EXPAND_CHUNK = 100_000  # expanded pairs made and sorted at once, about


def copy_classes(work: WorkDir, shingle_record: ShingleRecord, pairable: np.ndarray,
                 previous: Pairing | None = None, runs: list[lsh.Run] | None = None
                 ) -> tuple[Copies, tuple[np.ndarray, np.ndarray]]:
    """The classes of copies among the documents that can pair (pairable: bool by global number): a document's
    label is the smallest number of the pairable documents whose shingle set is equal to its own; and a run of the
    digest index (sorted digests, their documents: lsh.band_index of the digests).

    Candidates are found by a digest of each document's band keys (equal sets have equal keys), then by the
    fingerprint of identical_sets (length, sum of fmix64 of the elements), then confirmed element by element
    against the first of their group: a hash alone never joins two documents. A document's label depends only on
    the documents with its band keys, so it changes only when one of those is added or removed (what an
    incremental candidates run relies on: such a change touches the class's bucket in every band).

    previous: the Pairing of the last run, whose documents kept their numbers (its shards are a prefix of
    today's): then only the documents that share a digest with a document added or gone since are grouped again,
    and the others keep their classes (a class is whole within one digest, so it is kept or grouped again whole).
    Those documents are found in the last run's digest index (runs: its base and segments, as the band index is
    kept), so that no digest of every document is read nor compared (at 10M documents, 0.4 CPU s a run); the run
    returned then is the new documents' segment. Without runs (a work dir from before them), or without previous,
    every digest is read, and the run returned is the base of every pairable document."""
    made = previous is None or runs is None  # every digest read: the base of the digest index made from them
    if made:
        everyone = _band_digest(work, shingle_record)
        base = np.flatnonzero(pairable)
        base_run = lsh.band_index(everyone[base], base)
    if previous is None:
        return Copies.sorted(_grouped_copies(work, shingle_record, *base_run)), base_run
    if runs is None:
        runs = [base_run]  # (its new documents are left out below with the others that were not members then)
    old = previous.documents
    was, now = previous.pairable_mask(), pairable[:old]
    gone, arrived = np.flatnonzero(was & ~now), np.flatnonzero(now & ~was)  # (arrived: none, as rows never come
    new = old + np.flatnonzero(pairable[old:])                               # back to life; a guard)
    changed = np.concatenate([new, gone, arrived])
    if made:
        digests = everyone[changed]
    else:
        first = int(np.searchsorted(part_starts(shingle_record), old))  # the shards of the new documents
        tail = work.load_parts("band", shingle_record.shard_numbers[first:], DIGEST, np.dtype(U64),
                               shingle_record.shard_docs[first:])
        digests = np.concatenate([tail[new - old], _digests_of(work, shingle_record, np.r_[gone, arrived])])
    # grouped again: every member whose digest a new, gone or arrived document has (a gone label's class has its
    # digest); the others keep their classes
    hit_digests, hit = lsh.runs_members(runs, sets.sorted_unique(digests))
    alive = hit < old
    alive[alive] = (now & was)[hit[alive]]  # (the runs keep the documents that left until they are compacted)
    hit_digests, hit = hit_digests[alive], hit[alive]
    rows = previous.copies.rows
    kept = rows[~sets.in_sorted(rows[:, 1], np.sort(np.concatenate([hit, gone])))]
    is_new = np.r_[np.ones(len(new), bool), np.zeros(len(gone), bool), np.ones(len(arrived), bool)]
    regrouped = np.concatenate([hit_digests, digests[is_new]]), np.concatenate([hit, changed[is_new]])
    by = np.lexsort(regrouped[::-1])  # by digest, then number
    copies = Copies.sorted(np.concatenate([kept, _grouped_copies(work, shingle_record, regrouped[0][by],
                                                                 regrouped[1][by])]))
    return copies, base_run if made else lsh.band_index(digests[is_new], changed[is_new])


def _grouped_copies(work: WorkDir, shingle_record: ShingleRecord, digest: np.ndarray,
                    members: np.ndarray) -> np.ndarray:
    """The (label, member) rows of the classes of two or more among members (sorted by digest, ascending numbers
    within a digest: lsh.band_index)."""
    same = digest[1:] == digest[:-1]  # as its predecessor; the client holds these arrays for 10M documents: no more
    at = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # the positions of digests held twice or more
    docs = members[at]
    group = np.cumsum(np.r_[True, ~same][at]) - 1  # numbered in digest order (only the order is used)
    if not len(docs):
        return np.empty((0, 2), np.int64)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shingle_record.shard_numbers,
                               mapped=False)  # run by the client: a few sets from every shard
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])  # whole digest groups in a batch
    cuts = first[np.r_[True, np.diff(first // CONFIRM_BATCH) > 0]]
    label = np.empty(len(docs), np.int64)
    for lo, hi in zip(cuts.tolist(), np.r_[cuts[1:], len(docs)].tolist()):
        label[lo:hi] = docs[lo:hi][_equal_to_first(shingles, part_starts(shingle_record), docs[lo:hi],
                                                   group[lo:hi])]
    return Copies.rows_of(docs, label)


def _digests_of(work: WorkDir, shingle_record: ShingleRecord, numbers: np.ndarray) -> np.ndarray:
    """The band digests of a few documents, from their shards' files."""
    if not len(numbers):
        return np.empty(0, U64)
    return sets.gather_rows(PartitionArrays(work, "band", (DIGEST,), shingle_record.shard_numbers),
                            part_starts(shingle_record), numbers)


def _band_digest(work: WorkDir, shingle_record: ShingleRecord) -> np.ndarray:
    """The band digest (band.band_digest) of each stored document, as the band stage stored it by shard (read
    into one array: every shard's, each index run)."""
    return work.load_parts("band", shingle_record.shard_numbers, DIGEST, np.dtype(U64), shingle_record.shard_docs)


def _equal_to_first(shingles: PartitionArrays, starts: np.ndarray, docs: np.ndarray, group: np.ndarray) -> np.ndarray:
    """For documents docs (ascending within each group): the index of the first document of their group whose set
    is equal to theirs, element for element."""
    values, lengths = sets.gather_sets(shingles, starts, docs)
    offsets = np.cumsum(lengths) - lengths
    n = len(docs)
    sums = np.zeros(n, U64)
    full = np.flatnonzero(lengths)
    if len(full):
        sums[full] = np.add.reduceat(fmix64(values.astype(U64)), offsets[full])
    pending = np.lexsort((np.arange(n), sums, lengths, group))
    first = np.empty(n, np.int64)
    while len(pending):  # a fingerprint collision leaves its documents for another round; almost never
        key = np.stack([group[pending], lengths[pending], sums[pending].view(np.int64)])
        new = np.r_[True, (key[:, 1:] != key[:, :-1]).any(axis=0)]
        leader = pending[np.flatnonzero(new)[np.cumsum(new) - 1]]
        mismatch = values[sets.ranges(offsets[pending], lengths[pending])] != \
            values[sets.ranges(offsets[leader], lengths[pending])]
        differs = np.bincount(np.repeat(np.arange(len(pending)), lengths[pending])[mismatch],
                              minlength=len(pending)) > 0
        first[pending[~differs]] = leader[~differs]
        pending = pending[differs]
    return first


COPIES = "copies.npy"  # candidates/KEY.copies.npy: Copies.rows


class Copies:
    """The classes of two or more documents as rows (label, member), sorted: every other document that can pair is
    a class of its own. What class sizes and ClassPairs need, without a pass over the label of every document: at
    10M documents there are ~15,000 such rows, and each pass over the labels cost ~0.1 CPU s, several a run."""

    def __init__(self, rows: np.ndarray):
        self.rows = np.asarray(rows, np.int64).reshape(-1, 2)
        self._by_member: tuple[np.ndarray, np.ndarray] | None = None  # (members ascending, their labels)

    @staticmethod
    def rows_of(docs: np.ndarray, label: np.ndarray) -> np.ndarray:
        """The rows of documents docs with labels label (each the smallest number of its class; a document whose
        label is another's is a copy, and its label heads a class), unsorted."""
        copied = label != docs
        heads = sets.sorted_unique(label[copied])
        return np.concatenate([np.stack([heads, heads], axis=1), np.stack([label[copied], docs[copied]], axis=1)])

    @classmethod
    def of(cls, label: np.ndarray) -> Copies:
        """From labels of every document (-1: cannot pair), as work dirs from before stored them (classes.npy)."""
        docs = np.flatnonzero(label >= 0)
        return cls.sorted(cls.rows_of(docs, np.asarray(label[docs], np.int64)))

    @classmethod
    def sorted(cls, rows: np.ndarray) -> Copies:
        """Of rows (label, member) in any order."""
        return cls(rows[np.lexsort((rows[:, 1], rows[:, 0]))])

    def labels(self, numbers: np.ndarray) -> np.ndarray:
        """The label of each of numbers, each a document that can pair: its class's head, else itself."""
        if self._by_member is None:  # (made at the first lookup)
            by = np.argsort(self.rows[:, 1], kind="stable")
            self._by_member = (self.rows[by, 1], self.rows[by, 0])
        member, head = self._by_member
        out = np.array(numbers, np.int64)
        if len(member):
            at = np.minimum(np.searchsorted(member, out), len(member) - 1)
            hit = member[at] == out
            out[hit] = head[at[hit]]
        return out

    def _spans(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first row, rows) of each label's class among the rows (0 rows: a class of one). The end of a class is
        searched only for the labels that head one (most documents have no copy)."""
        heads = self.rows[:, 0]
        lo = np.searchsorted(heads, labels, "left")
        held = np.zeros(len(lo), np.int64)
        found = np.flatnonzero(heads[np.minimum(lo, len(heads) - 1)] == labels) if len(heads) else lo[:0]
        held[found] = np.searchsorted(heads, labels[found], "right") - lo[found]
        return lo, held

    def sizes(self, labels: np.ndarray) -> np.ndarray:
        """Documents in the class of each label."""
        return np.maximum(self._spans(np.asarray(labels, np.int64))[1], 1)

    def members(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(members, lengths): the members of each label's class, ascending (its label first), class after class."""
        labels = np.asarray(labels, np.int64)
        lo, held = self._spans(labels)
        lengths = np.maximum(held, 1)
        members = np.repeat(labels, lengths)
        several = held > 0
        members[sets.ranges((np.cumsum(lengths) - lengths)[several], held[several])] = \
            self.rows[sets.ranges(lo[several], held[several]), 1]
        return members, lengths


PAIRABLE = "pairable.npy"  # candidates/KEY.pairable.npy: bool by global number, the documents that can pair
RANK = "rank.npy"  # candidates/KEY.rank.npy: int64 by global number, a document's place in id order (-1: none)


class Lookup:
    """numbers -> values, indexed as an array of every document is (lookup[numbers]), by the kernels that take
    ranks and labels (lsh.class_bucket_pairs, lsh.update_band): what a Pairing gives instead of such arrays."""

    def __init__(self, of: Callable[[np.ndarray], np.ndarray]):
        self.of = of

    def __getitem__(self, numbers) -> np.ndarray:
        return self.of(np.asarray(numbers, np.int64))


class Pairing:
    """The documents a candidates run could pair, their order by id, and their classes of copies, as it stored
    them: pairable (bool by global number, 1 byte a document), Copies (the classes of two or more), and a rank by
    id only where the ids do not ascend with the numbers (shards of files appended out of id order); where they
    do, a document's number is its rank. A document's label is its class's head, else itself (-1: cannot pair).
    An incremental run of a 10M index once made, wrote and read back three arrays of 8 bytes a document (order,
    ranks, labels: ~0.6 CPU s); it writes 1 byte a document now. Work dirs from before (order.npy, classes.npy,
    maybe rank.npy) are read as they are."""

    NAMES = (PAIRABLE, COPIES, RANK, "order.npy", "classes.npy")  # its files, as stored now or before

    def __init__(self, pairable: np.ndarray, copies: Copies, rank: np.ndarray | None = None,
                 label: np.ndarray | None = None):
        self.pairable, self.copies, self._rank, self._label = pairable, copies, rank, label

    @classmethod
    def load(cls, work: WorkDir, record: CandidatesRecord) -> Pairing:
        """The Pairing a candidates record stored."""
        return cls.read(work, cls.stored_files(work, record))

    @classmethod
    def stored_files(cls, work: WorkDir, record: CandidatesRecord) -> dict[str, str]:
        """The files of the Pairing a candidates record stored (name -> path)."""
        return {name: str(work.output("candidates", name, record.key)) for name in cls.NAMES if name in record.files}

    @classmethod
    def read(cls, work: WorkDir, files: dict[str, str]) -> Pairing:
        """From its files (name -> path, as Pairing.files gives them), mapped: a run reads a few of its rows."""
        def load(name: str) -> np.ndarray:
            return work.load_array(Path(files[name]), "candidates", mmap=True)

        rank = load(RANK) if RANK in files else None
        if PAIRABLE in files:
            return cls(load(PAIRABLE), Copies(load(COPIES)), rank)
        label = load("classes.npy")  # a work dir from before pairable.npy
        if rank is None:
            order = work.load_array(Path(files["order.npy"]), "candidates")
            rank = np.full(len(label), -1, np.int64)
            rank[order] = np.arange(len(order))
        copies = Copies(load(COPIES)) if COPIES in files else Copies.of(label)
        return cls(np.asarray(label) >= 0, copies, rank, label)

    @staticmethod
    def files(work: WorkDir, key: str, ascending: bool) -> dict[str, str]:
        """The files a candidates run of key writes (with rank.npy unless the ids ascend with the numbers)."""
        return {name: str(work.output("candidates", name, key)) for name in (PAIRABLE, COPIES) + (() if ascending
                                                                                              else (RANK,))}

    def save(self, work: WorkDir, files: dict[str, str]) -> None:
        work.save_array(Path(files[PAIRABLE]), np.asarray(self.pairable, bool))
        work.save_array(Path(files[COPIES]), self.copies.rows)
        if RANK in files:
            assert self._rank is not None
            work.save_array(Path(files[RANK]), np.asarray(self._rank, np.int64))

    @property
    def documents(self) -> int:
        return len(self.pairable)

    def pairable_mask(self) -> np.ndarray:
        return np.asarray(self.pairable, bool)

    def members(self) -> np.ndarray:
        """The numbers of the documents that can pair, ascending."""
        return np.flatnonzero(self.pairable)

    def ranks(self, numbers: np.ndarray) -> np.ndarray:
        """Each of numbers' place in id order (only the order is used: ties never happen), -1 if it cannot pair."""
        if self._rank is not None:
            return np.asarray(self._rank[numbers], np.int64)
        return np.where(self.pairable[numbers], numbers, -1)

    def labels(self, numbers: np.ndarray) -> np.ndarray:
        """Each of numbers' class label, -1 if it cannot pair."""
        if self._label is not None:
            return np.asarray(self._label[numbers], np.int64)
        return np.where(self.pairable[numbers], self.copies.labels(numbers), -1)

    @property
    def rank(self) -> lsh.ByNumber:
        return self._rank if self._rank is not None else Lookup(self.ranks)

    @property
    def label(self) -> lsh.ByNumber:
        return self._label if self._label is not None else Lookup(self.labels)

    def dense_ranks(self) -> np.ndarray:
        """ranks of every document, as one array."""
        return self.ranks(np.arange(self.documents))

    def dense_labels(self) -> np.ndarray:
        """labels of every document, as one array."""
        if self._label is not None:
            return np.asarray(self._label)
        label = np.where(self.pairable, np.arange(self.documents), -1)
        label[self.copies.rows[:, 1]] = self.copies.rows[:, 0]
        return label

    def heads(self) -> np.ndarray:
        """The label of each class, ascending: the sets to pair, once per set."""
        members = self.members()
        return members[self.labels(members) == members]


def expanded_count(class_pairs: np.ndarray, stars: np.ndarray, copies: Copies) -> int:
    """How many document pairs class pairs and (uncovered) star pairs stand for."""
    a, b = copies.sizes(class_pairs[:, 0]), copies.sizes(class_pairs[:, 1])
    return int(np.where(class_pairs[:, 0] == class_pairs[:, 1], a * (a - 1) // 2, a * b).sum()) + len(stars)


def among(pairs: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Which of pairs are rows of known (pairs sorted by pair code)."""
    return sets.in_sorted(lsh.pair_codes(pairs), lsh.pair_codes(known))


def stored_entries(work: WorkDir, pairs: np.ndarray) -> ClassPairs:
    """Entries that verify stored (some of its checked.npy or pairs.npy), as ClassPairs: an entry is a class pair
    when the candidates stage stored it as one."""
    class_pairs = work.load_array(work.current("candidates", "pairs.npy"), "candidates")
    return ClassPairs(pairs, among(pairs, class_pairs), Pairing.load(work, require(work, CandidatesRecord)).copies)


def verified_entries(work: WorkDir) -> ClassPairs:
    """The verified entries of a work dir (verify's pairs.npy), as ClassPairs."""
    return stored_entries(work, work.load_array(work.current("verify", "pairs.npy"), "verify"))


def uncovered(stars: np.ndarray, class_pairs: np.ndarray, label: lsh.ByNumber) -> np.ndarray:
    """Which star pairs are not among the pairs of a class pair (the same classes in another band, small there)."""
    return ~among(np.sort(label[stars], axis=1), class_pairs)


class ClassPairs:
    """Entries (pairs (m, 2), a <= b; is_class: a class pair, else a star pair of two documents) as lists of
    documents: a class pair's sides are its classes, a star pair's sides its two documents alone. List i holds
    members[offsets[i]:offsets[i] + lengths[i]], ascending (its first is the class's label); side_a, side_b: each
    entry's lists; intra: the entry stands for the pairs within one class."""

    def __init__(self, pairs: np.ndarray, is_class: np.ndarray, copies: Copies):
        heads = np.where(is_class[:, None], pairs, -1 - pairs)  # a class by its label, a lone document by -1 - n
        keys = sets.sorted_unique(heads.ravel())
        classes, lone = keys[keys >= 0], -1 - keys[keys < 0]
        docs, sizes = copies.members(classes)  # by class, ascending within
        self.members = np.concatenate([lone, docs]).astype(np.int64)  # in the order of keys: lone ones first
        self.lengths = np.concatenate([np.ones(len(lone), np.int64), sizes]).astype(np.int64)
        self.offsets = np.cumsum(self.lengths) - self.lengths
        self.side_a, self.side_b = (np.searchsorted(keys, heads[:, i]) for i in (0, 1))
        self.intra = self.side_a == self.side_b

    def count(self) -> np.ndarray:
        """Document pairs per entry."""
        a, b = self.lengths[self.side_a], self.lengths[self.side_b]
        return np.where(self.intra, a * (a - 1) // 2, a * b)

    def occurrences(self, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(list, other list, entry) of each side of the entries kept: side A of every entry, side B of the
        entries across two lists; a pair of the entry has one end in list and the other in other list."""
        keep = np.ones(len(self.side_a), bool) if keep is None else keep
        cross = keep & ~self.intra
        return (np.r_[self.side_a[keep], self.side_b[cross]], np.r_[self.side_b[keep], self.side_a[cross]],
                np.r_[np.flatnonzero(keep), np.flatnonzero(cross)])

    def spread(self, lists: np.ndarray) -> np.ndarray:
        """Positions in members of the members of lists, list after list."""
        return sets.ranges(self.offsets[lists], self.lengths[lists])


def class_edges(entries: ClassPairs) -> np.ndarray:
    """Edges (a < b) with the components of the entries' pairs within every union of whole lists: the first
    document of each side to every member of the other (for (A, A): to every other member of A), a spanning tree
    of A x B or of the pairs within A."""
    lists, other, _ = entries.occurrences()
    heads = entries.members[entries.offsets[lists]]
    edges = np.stack([np.repeat(heads, entries.lengths[other]), entries.members[entries.spread(other)]], axis=1)
    return np.sort(edges[edges[:, 0] != edges[:, 1]], axis=1)


def class_degree(entries: ClassPairs, weights: np.ndarray, n: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Each document's sum of the weights of the pairs the entries stand for (those with both ends in mask, if
    given: lists are whole inside it or outside): a member of A has |B| pairs of entry (A, B), |A| - 1 of (A, A)."""
    out = np.zeros(n)
    keep = None if mask is None else (mask[entries.members[entries.offsets[entries.side_a]]]
                                      & mask[entries.members[entries.offsets[entries.side_b]]])
    lists, other, entry = entries.occurrences(keep)
    partners = entries.lengths[other] - (other == lists)
    np.add.at(out, entries.members[entries.spread(lists)],
              np.repeat(weights[entry] * partners, entries.lengths[lists]))
    return out


def expanded_pairs(entries: ClassPairs, rank: lsh.ByNumber, score: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The document pairs of the entries, best first (score descending), then by (rank of the lower, rank of the
    higher): chunks of (lower rank, higher rank, entry), each about EXPAND_CHUNK pairs or one document's.

    rank: each member's place in id order (rank[numbers], int64). Each pair is made once, from its
    lower-ranked end: an occurrence (document x of a list, the other list, entry) makes x's pairs with the other
    list's members ranked after x. Occurrences are sorted by (score level, rank of x), counted, and cut into
    chunks between documents, so each chunk's pairs, sorted, are the next part of the listing."""
    if not len(score):
        return
    # Orders are sorts of one int64 key (x * width + y: levels, lists and runs number fewer than 2^31 and ranks are
    # below width, so no key reaches 2^63), not lexsorts: a lexsort of two keys cost 4x an argsort of their sum,
    # ~0.03 of the 0.07 CPU s that listing 110,000 pairs took.
    level = np.searchsorted(sets.sorted_unique(-score), -score)
    list_of = np.repeat(np.arange(len(entries.lengths)), entries.lengths)
    member_rank = rank[entries.members]
    width = int(member_rank.max()) + 1
    key = np.sort(list_of * width + member_rank)  # by rank within each list (list_of ascends already)
    member_rank = key - list_of * width
    lists, other, entry = entries.occurrences()
    own = member_rank[entries.spread(lists)]
    other, entry = (np.repeat(x, entries.lengths[lists]) for x in (other, entry))
    start = np.searchsorted(key, other * width + own, side="right")  # the first member of other ranked after own
    count = entries.offsets[other] + entries.lengths[other] - start
    lev = level[entry]
    order = np.argsort(lev * width + own)  # by (level, x): (ties in any order, their pairs are sorted below)
    order = order[count[order] > 0]
    own, start, count, entry, lev = own[order], start[order], count[order], entry[order], lev[order]
    if not len(own):
        return
    new_run = np.r_[True, (lev[1:] != lev[:-1]) | (own[1:] != own[:-1])]
    runs = np.flatnonzero(new_run)
    run_of = np.cumsum(new_run)  # each occurrence's (level, x) run, ascending
    block = (np.cumsum(count) - count)[runs] // EXPAND_CHUNK
    cuts = runs[np.r_[True, block[1:] != block[:-1]]]
    for lo, hi in zip(cuts.tolist(), np.r_[cuts[1:], len(own)].tolist()):
        c = count[lo:hi]
        a, b = np.repeat(own[lo:hi], c), member_rank[sets.ranges(start[lo:hi], c)]
        e = np.repeat(entry[lo:hi], c)
        # already by (level, a); b ascends within an occurrence, so only the runs of several occurrences (a
        # document with pairs in several entries of one level) are out of order: a stable sort, ~linear here
        at = np.argsort((np.repeat(run_of[lo:hi] - run_of[lo], c)) * width + b, kind="stable")
        yield a[at], b[at], e[at]


def ranked(members: np.ndarray, order: np.ndarray) -> Lookup:
    """rank[numbers] of the listed documents, their places in id order, given their numbers (members, ascending)
    and the permutation that sorts them by id. Looked up among the listed numbers, not an array of every
    document's (80 MB of fresh pages at 10M, ~0.15 CPU s, for the ~100,000 documents of the pairs)."""
    place = np.empty(len(order), np.int64)
    place[order] = np.arange(len(order))
    return Lookup(lambda of: place[np.searchsorted(members, of)])


def set_sizes(entries: ClassPairs, sizes: np.ndarray, n: int) -> np.ndarray:
    """The shingle-set size of each document of the verified entries by global number (0 for the others, of n),
    from the entries' sizes of --metric containment (columns |A ∩ B|, |A ∪ B|, |A|, |B|, A and B its sides)."""
    out = np.zeros(n, np.int64)
    out[entries.members] = _member_sizes(entries, sizes)
    return out


def set_sizes_by_rank(entries: ClassPairs, sizes: np.ndarray, rank: lsh.ByNumber, listed: int) -> np.ndarray:
    """set_sizes of the `listed` documents, by rank (ranked)."""
    out = np.zeros(listed, np.int64)
    out[rank[entries.members]] = _member_sizes(entries, sizes)
    return out


def _member_sizes(entries: ClassPairs, sizes: np.ndarray) -> np.ndarray:
    """The set size of each of entries.members (its list's: a class's documents have one set)."""
    list_size = np.zeros(len(entries.lengths), np.int64)
    list_size[entries.side_a] = sizes[:, 2]
    list_size[entries.side_b] = sizes[:, 3]
    return np.repeat(list_size, entries.lengths)


def directed(lo: np.ndarray, hi: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of ranks (lo, hi) as (contained, container): the smaller set is the one contained (the pair's
    containment |A ∩ B| / min(|A|, |B|) is its share); equal sizes keep the listing order."""
    swap = size[hi] < size[lo]
    return np.where(swap, hi, lo), np.where(swap, lo, hi)


KEEP_PAIRS = 1_000_000  # pairs a Listing keeps once made (24 bytes each)
# lines made and joined at once: their pieces and text fit in memory that malloc hands back to the next (a chunk of
# 100,000 lines at once took ~50 MB of fresh pages, a page fault each 4 KB: ~0.02 CPU s of 110,000 lines)
LINES_AT_ONCE = 8192
# the Listing a verify stage made, by the WorkDir it ran on and its key: the report of the same run (the same
# WorkDir object) reads it back; another run, or a work dir opened again, reads the files
_MADE: weakref.WeakKeyDictionary[WorkDir, tuple[str, Listing]] = weakref.WeakKeyDictionary()


def named_members(catalog: Catalog, entries: ClassPairs) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(members, order, names) of the documents of the entries, for a Listing: their numbers ascending, the
    permutation that sorts them by id, and their ids in that order (Catalog.ids_by_id)."""
    members = sets.sorted_unique(entries.members)
    return (members, *catalog.ids_by_id(members))


class Listing:
    """Verified pairs in the order of the listing (best first, then by ids) as columns, not records: names (the ids,
    sorted: named_members), each entry's values, and chunks of (a, b, entry), a and b the ranks in names of a
    pair's ends (with --metric containment, a contained in b: directed). pairs.jsonl and every printed format are
    lines made from it, the text of each entry's values made once per entry (a class pair stands for many pairs)
    and each value's once per distinct value: a dict per pair cost ~5 us, most of the report of 100,000 pairs.
    records() gives the dicts, for the readers that want records (the API, the HTML report, eval)."""

    def __init__(self, named: tuple[np.ndarray, np.ndarray, list[str]], entries: ClassPairs, scores: np.ndarray,
                 sizes: np.ndarray, contained: bool, involving: set[str] | None = None):
        members, order, self.names = named
        self._rank = ranked(members, order)
        self.entries, self.scores, self.sizes, self.contained = entries, scores, sizes, contained
        # a record's fields but its ends a and b, sorted as pairs.jsonl has them
        self.fields = ("containment",) * contained + ("estimate", "intersection", "jaccard", "union")
        self._keep: np.ndarray | None = None
        self._made: list[tuple[np.ndarray, ...]] | None = None  # expanded_pairs' chunks, kept when few (chunks)
        self.involving(involving)

    def involving(self, ids: set[str] | None) -> Listing:
        """Only the pairs with an end among ids from now on (--new-only; None: every pair)."""
        self._keep = None if ids is None else np.array([name in ids for name in self.names], bool)
        return self

    @classmethod
    def stored(cls, work: WorkDir, involving: set[str] | None = None) -> Listing:
        """The verified pairs of a work dir (what its pairs.jsonl holds), from verify's stored arrays; or, when
        this process's verify stage made them, the Listing it made (remembered), whose ids and pairs the report
        would otherwise make again (~0.2 CPU s for 110,000 pairs among 10M documents)."""
        key, made = _MADE.get(work, ("", None))
        if made is not None and key == require(work, VerifyRecord).key:
            return copy.copy(made).involving(involving)
        entries = verified_entries(work)
        return cls(named_members(load_catalog(work, require(work, ShingleRecord)), entries), entries,
                   work.load_array(work.current("verify", "scores.npy"), "verify"),
                   work.load_array(work.current("verify", "sizes.npy"), "verify"),
                   require(work, VerifyRecord).params.metric == "containment", involving)

    def remember(self, work: WorkDir, key: str) -> None:
        """Listing.stored(work) gives this one while work's verify record is `key` (files are made by key, and a
        key's are always the same)."""
        _MADE[work] = (key, self)

    def column(self, field: str) -> np.ndarray:
        """Each entry's value of a pair's field: its score (jaccard, or containment), estimate, intersection,
        union, and with --metric containment its jaccard too (from |A ∩ B|, |A|, |B|)."""
        if field == ("containment" if self.contained else "jaccard"):
            return self.scores[:, 0]
        if field == "jaccard":
            return sets.jaccard(self.sizes[:, 0], self.sizes[:, 2], self.sizes[:, 3])
        return {"estimate": self.scores[:, 1], "intersection": self.sizes[:, 0], "union": self.sizes[:, 1]}[field]

    def texts(self, field: str, fmt: Callable[[Any], str]) -> np.ndarray:
        """fmt of each entry's value of field (as a Python float or int), an object array: fmt is called once per
        distinct value (scores are ratios of small integers: 100,000 entries have a few thousand; floats are told
        apart by their bits)."""
        values = np.ascontiguousarray(self.column(field))
        distinct, at = np.unique(values.view(np.int64) if values.dtype.kind == "f" else values, return_inverse=True)
        return np.array([fmt(v) for v in distinct.view(values.dtype).tolist()], object)[at]

    def json_fields(self, fields: tuple[str, ...]) -> list[np.ndarray]:
        """Each entry's fields as JSON members, ', "field": value' (texts, one array a field), values as json.dumps
        gives them (by repr: finite floats and ints)."""
        return [self.texts(f, f', "{f}": {{!r}}'.format) for f in fields]

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(a, b, entry) of the pairs, a bounded number at a time (expanded_pairs), in the listing's order. Up to
        KEEP_PAIRS pairs are made once and kept (pairs.jsonl, then the report, list them)."""
        size = set_sizes_by_rank(self.entries, self.sizes, self._rank, len(self.names)) if self.contained else None
        made = self._made if self._made is not None else expanded_pairs(self.entries, self._rank, self.scores[:, 0])
        if self._made is None and int(self.entries.count().sum()) <= KEEP_PAIRS:
            made = self._made = list(made)
        for lo, hi, at in made:
            if self._keep is not None:
                kept = self._keep[lo] | self._keep[hi]
                lo, hi, at = lo[kept], hi[kept], at[kept]
            if size is not None:
                lo, hi = directed(lo, hi, size)
            yield lo, hi, at

    def lines(self, head: Sequence[str | np.ndarray], names: list[str], middle: str,
              tail: Sequence[str | np.ndarray]) -> Iterator[np.ndarray]:
        """Each pair's line as its pieces, *head, names[a], middle, names[b], *tail: an object array (pairs, pieces)
        of up to LINES_AT_ONCE lines at a time; a piece of head or tail is one text, or one per entry (texts).
        Gathered by numpy, no string made per pair or per entry in Python (3x cheaper than an f-string per pair)."""
        name = np.array(names, object)
        for chunk in self.chunks():
            for lo in range(0, len(chunk[0]), LINES_AT_ONCE):
                a, b, e = (x[lo:lo + LINES_AT_ONCE] for x in chunk)
                columns = [*(p if isinstance(p, str) else p[e] for p in head), name[a], middle, name[b],
                           *(p if isinstance(p, str) else p[e] for p in tail)]
                pieces = np.empty((len(a), len(columns)), object)
                for j, column in enumerate(columns):
                    pieces[:, j] = column
                yield pieces

    def text(self, head: Sequence[str | np.ndarray], names: list[str], middle: str,
             tail: Sequence[str | np.ndarray]) -> Iterator[str]:
        """The lines of lines(), a chunk's text at a time."""
        for pieces in self.lines(head, names, middle, tail):
            yield "".join(pieces.ravel().tolist())

    def records(self) -> Iterator[dict]:
        """The pairs as the records of pairs.jsonl (keys sorted)."""
        names, keys = self.names, ("a", "b", *self.fields)
        values = list(zip(*(self.column(f).tolist() for f in self.fields)))
        for a, b, e in self.chunks():
            for x, y, i in zip(a.tolist(), b.tolist(), e.tolist()):
                yield dict(zip(keys, (names[x], names[y], *values[i])))

