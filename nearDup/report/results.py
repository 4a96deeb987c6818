"""The results of a run, of a work dir or of saved pairs, as --print selects from them: pairs, groups, documents,
and the one-line summary."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..config import (
    ClusterParams,
)
from ..pipeline.cluster import clusters
from ..pipeline.driver import Runner
from ..pipeline.groups import KeeperRules, replay_groups
from ..pipeline.index import new_documents
from ..pipeline.results import StoredPairs, resolved_params
from ..pipeline.shingle import load_docs
from .printer import human_size, plural

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

    @classmethod
    def of_workdir(cls, runner: Runner, last: str, new_only: bool = False) -> Results:
        """The stored results; new_only: only the pairs and groups that involve a document added or changed
        since the last report (and those documents)."""
        work = runner.work
        new = new_documents(work) if new_only else None

        def involved(ids) -> bool:
            return new is None or any(i in new for i in ids)

        pairs = StoredPairs(work, None if new is None else lambda p: involved((p["a"], p["b"])))
        sizes = load_docs(work).catalog["size"]
        return cls(pairs, lambda: [g for g in clusters(work) if involved(m["id"] for m in g["members"])],
                   lambda: [d for d in load_docs(work).live() if involved((d["id"],))], runner.soft_errors,
                   resolved_params(work, last), lambda member: int(sizes[member["doc"]]))


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


def summary_line(pairs: list[dict] | StoredPairs, groups: list[dict] | None, size_of: Callable[[dict], int]) -> str:
    """The last line on stderr, like `fdupes -m`: how many groups and duplicates, and the bytes the duplicates
    take (what removing them would free); without groups, how many pairs among how many documents."""
    if groups is None:
        documents = len({p["a"] for p in pairs} | {p["b"] for p in pairs})
        return f"{plural(len(pairs), 'pair')} among {plural(documents, 'document')}"
    dupes = [m for g in groups for m in g["members"] if m["role"] == "duplicate"]
    size = sum(size_of(m) for m in dupes)
    return (f"{plural(len(groups), 'group')}, {plural(len(dupes), 'duplicate')}, {plural(size, 'byte')} "
            f"({human_size(size)}) in duplicates")
