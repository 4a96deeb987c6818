"""The results of a run, of a work dir or of saved pairs, as --print selects from them: pairs, groups, documents,
and the one-line summary."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from ..config import ClusterParams, threshold_or_default
from ..errors import InputError
from ..pipeline.cluster import clusters
from ..pipeline.driver import Runner
from ..pipeline.groups import KeeperRules, replay_groups
from ..pipeline.index import new_documents
from ..pipeline.results import StoredPairs, resolved_params
from ..pipeline.shingle import load_docs
from ..wording import human_size, plural
from .pairs import read_pairs

PATH_LISTS = ("dupes", "keepers", "uniques")
JSONL_SCRIPT = ("--print script acts on files, and JSONL records are not files: there is nothing to act on; use "
                "--print dupes or --groups --format jsonl to list the duplicate records")


@dataclasses.dataclass
class Results:
    """What can be printed: the verified pairs, and (computed only when asked) the groups and the documents."""

    pairs: list[dict] | StoredPairs  # stored pairs are read as they are printed
    groups: Callable[[], list[dict]]
    docs: Callable[[], list[dict]]
    soft_errors: int = 0
    params: dict = dataclasses.field(default_factory=dict)  # every parameter the results were made with
    size_of: Callable[[dict], int] = lambda member: 0  # a group member's size in bytes
    # the estimated recall of the stored pairs (all of them, whatever is selected; RecallStats' JSON form); none
    # for saved pairs and queries, which have no S-curve behind them
    recall: dict | None = None
    # the documents of these ids, whatever was selected (a script re-checks every member of its groups, and with
    # --new-only a group of a new document has old ones too)
    docs_of: Callable[[set[str]], list[dict]] | None = None

    def documents_of(self, ids: set[str]) -> list[dict]:
        return [d for d in self.docs() if d["id"] in ids] if self.docs_of is None else self.docs_of(ids)

    @classmethod
    def of_workdir(cls, runner: Runner, last: str, new_only: bool = False) -> Results:
        """The stored results; new_only: only the pairs and groups that involve a document added or changed
        since the last report (and those documents)."""
        work = runner.work
        new = new_documents(work) if new_only else None

        def involved(ids) -> bool:
            return new is None or any(i in new for i in ids)

        pairs = StoredPairs(work, new)
        sizes = functools.cache(lambda: load_docs(work).catalog["size"])  # read when a group summary asks (10M rows
                                                                           # joined: 80 MB, ~0.1 s)
        estimate = pairs.record.stats.recall
        return cls(pairs, lambda: [g for g in clusters(work) if involved(m["id"] for m in g["members"])],
                   lambda: [d for d in load_docs(work).live() if involved((d["id"],))], runner.soft_errors,
                   resolved_params(work, last),
                   lambda member: int(sizes()[member["doc"]]),
                   None if estimate is None else estimate.to_json(),
                   lambda ids: [d for d in load_docs(work).live() if d["id"] in ids])


    @classmethod
    def of_saved(cls, path: str, threshold: float | None, params: ClusterParams, references,
                 log: Callable[[str], None]) -> Results:
        """The pairs saved in path (--replay), at threshold (default: the lowest saved); says on log when the
        threshold is below what the pairs were saved with."""
        header: dict = {}
        saved = read_pairs(path, None, header)
        lowest = min((p["jaccard"] for p in saved), default=None)
        t = threshold_or_default(threshold, lowest)
        floor = header.get("threshold", lowest)
        if isinstance(floor, (int, float)) and t < floor:  # what was not saved cannot be replayed
            basis = "the threshold of the run that saved them" if "threshold" in header else "the lowest saved"
            log(f"warning: {path} holds only pairs with Jaccard >= {floor} ({basis}); --threshold {t} finds no "
                f"more: run `neardup run ... --threshold {t}` on the documents")
        return cls.of_replay(saved, t, params, references)

    @classmethod
    def of_replay(cls, saved: list[dict], threshold: float, params: ClusterParams, references) -> Results:
        cache: dict = {}

        def grouped() -> dict:  # computed once, and only if something needs groups
            if not cache:
                rules = KeeperRules(params.keep, params.prefer)
                cache["groups"], cache["docs"] = replay_groups(saved, threshold, rules, params.link, references)
            return cache

        pairs = [p for p in saved if p["jaccard"] >= threshold]
        return cls(pairs, lambda: grouped()["groups"], lambda: grouped()["docs"],
                   params={"threshold": threshold, **dataclasses.asdict(params)},
                   size_of=lambda member: grouped()["docs"][member["doc"]]["size"])


@dataclasses.dataclass(frozen=True)
class Selection:
    """What --print selects from results: the pairs, the groups (those with a reference document only, for
    --reference-only; None when only pairs were asked for), and the counts of the JSONL summary."""

    what: str  # pairs, groups, script, dupes, keepers, uniques
    pairs: list[dict] | StoredPairs
    groups: list[dict] | None
    all_groups: list[dict] | None  # before --reference-only
    counts: dict

    def paths(self, results: Results) -> tuple[list[str], str]:
        """The paths of a path list (--print dupes, keepers, uniques) and their role."""
        assert self.groups is not None and self.all_groups is not None  # computed for every --print but pairs
        if self.what == "uniques":
            grouped = {m["id"] for g in self.all_groups for m in g["members"]}
            return [d["id"] for d in results.docs() if d["id"] not in grouped], "unique"
        role = {"dupes": "duplicate", "keepers": "keeper"}[self.what]
        return [m["id"] for g in self.groups for m in g["members"] if m["role"] == role], role


def select(results: Results, what: str, reference_only: bool = False) -> Selection:
    """The selection `what` of the results (groups computed only when asked for or --reference-only)."""
    if what == "script" and (results.params.get("jsonl") or results.params.get("parquet")):
        raise InputError(JSONL_SCRIPT)
    all_groups = results.groups() if what != "pairs" or reference_only else None
    groups = all_groups
    if reference_only:
        assert all_groups is not None  # computed for --reference-only
        groups = [g for g in all_groups if any(m["reference"] for m in g["members"])]
    counts: dict = {"pairs": len(results.pairs)}
    if groups is not None:
        counts.update(groups=len(groups), duplicates=sum(m["role"] == "duplicate" for g in groups
                                                          for m in g["members"]))
    if results.recall is not None:
        counts["recall"] = results.recall
    return Selection(what, results.pairs, groups, all_groups, counts)


def summary_line(pairs: list[dict] | StoredPairs, groups: list[dict] | None, size_of: Callable[[dict], int]) -> str:
    """The last line on stderr, like `fdupes -m`: how many groups and duplicates, and the bytes the duplicates
    take (what removing them would free); without groups, how many pairs among how many documents."""
    if groups is None:
        documents = pairs.documents() if isinstance(pairs, StoredPairs) else len({p["a"] for p in pairs} |
                                                                                  {p["b"] for p in pairs})
        return f"{plural(len(pairs), 'pair')} among {plural(documents, 'document')}"
    dupes = [m for g in groups for m in g["members"] if m["role"] == "duplicate"]
    return groups_summary(len(groups), len(dupes), sum(size_of(m) for m in dupes))


def groups_summary(groups: int, duplicates: int, size: int) -> str:
    """summary_line of groups, from their counts and the duplicates' bytes."""
    return (f"{plural(groups, 'group')}, {plural(duplicates, 'duplicate')}, {plural(size, 'byte')} "
            f"({human_size(size)}) in duplicates")
