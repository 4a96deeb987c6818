"""The five stages: each reads its input through the store, computes with the kernels via the engine, writes back.

Each stage has a key: a digest of its name, the data format, its parameters and the keys of what it consumes
(for the shingle stage, the fingerprints (id, size, mtime) of its documents). Keys exist per partition and per
stage. A stage whose stored key equals the key it would compute is skipped; a partition whose done marker carries
its key is not recomputed, so an interrupted stage resumes where it stopped and gives the same bytes.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict
from typing import Callable

import numpy as np

from . import corpus
from .config import (DEFAULT_THRESHOLD, FORMAT, BandParams, CandidateParams, ClusterParams, ShingleParams,
                     SignatureParams, SourceParams, VerifyParams, digest)
from .errors import InputError, ParameterError, WorkDirError
from .groups import KeeperRules, build_groups
from .kernels import lsh, minhash, sets
from .kernels.shingle import CodePointHasher, csr_sets, kgram_hashes, word_characters, word_hashes
from .store import STAGES, WorkDir

SHINGLE_FILES = ("docs.jsonl", "values.npy", "offsets.npy")
VERIFY_CHUNK = 20_000  # candidate pairs per verification task


@dataclasses.dataclass
class Runner:
    """What every stage needs: the work dir, an engine, and where to say what happened (stderr)."""

    work: WorkDir
    engine: object
    log: Callable[[str], None]
    soft_errors: int = 0  # problems that let the run finish but make the exit status 2 (unreadable files)


# ---------------------------------------------------------------------------------------------- chain checks

def require(work: WorkDir, name: str, consumer: str | None = None) -> dict:
    """The stored record of stage `name`, after checking that it and every stage before it are present and
    consistent: each record's upstream key must be the key of the stage before it. The error names the stages to
    re-run, up to the consumer (the stage about to read `name`'s result)."""
    stages = work.read_manifest()["stages"]
    upto = STAGES.index(consumer or name)
    previous = None
    for i, stage in enumerate(STAGES[:STAGES.index(name) + 1]):
        record = stages.get(stage)
        if record is None:
            what = " ".join("shingle PATH..." if s == "shingle" else s for s in STAGES[i:upto + 1])
            raise WorkDirError(f"{work.root}: the {stage} stage has not run; run `neardup -w {work.root} {what}`")
        if previous is not None and record.get("upstream") != previous["key"]:
            raise WorkDirError(f"{work.root}: the {stage} stage is out of date (the {STAGES[i - 1]} stage changed "
                               f"since); re-run `neardup -w {work.root} {' '.join(STAGES[i:upto + 1])}`")
        previous = record
    return previous


def _up_to_date(work: WorkDir, name: str, key: str, log: Callable[[str], None] | None = None) -> dict | None:
    """The stage's record if it was made with this key and the files it lists are intact (present, same size)."""
    record = work.read_manifest()["stages"].get(name)
    if record is None or record.get("key") != key:
        return None
    for file, size in record.get("files", {}).items():
        path = work.path(name, file)
        if not path.exists() or path.stat().st_size != size:
            if log is not None:
                log(f"warning: {path} is missing or truncated; recomputing the {name} stage")
            return None
    return record


def _begin(runner: Runner, name: str, params, *extra) -> tuple[dict, str, dict | None]:
    """For a stage computed as a whole: the record it consumes (checked), its key, and its stored record if that
    is up to date."""
    upstream = require(runner.work, STAGES[STAGES.index(name) - 1], consumer=name)
    key = digest(name, FORMAT, params, upstream["key"], *extra)
    return upstream, key, _up_to_date(runner.work, name, key, runner.log)


def _files(work: WorkDir, stage: str, *names: str) -> dict:
    """Sizes of a stage's output files, kept in its record so that a damaged file is noticed."""
    return {name: work.path(stage, name).stat().st_size for name in names}


def part_starts(shingle_record: dict) -> np.ndarray:
    """Global number of each partition's first document."""
    counts = np.asarray(shingle_record["docs"], dtype=np.int64)
    return np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)


class PartitionArrays:
    """Lazily memory-mapped per-partition arrays of one stage (what `sets.gather_*` index into)."""

    def __init__(self, work: WorkDir, stage: str, suffixes: tuple[str, ...]):
        self.work, self.stage, self.suffixes, self.cache = work, stage, suffixes, {}

    def __getitem__(self, p: int):
        if p not in self.cache:
            arrays = tuple(self.work.load_array(self.work.part(self.stage, p, s), self.stage, mmap=True)
                           for s in self.suffixes)
            self.cache[p] = arrays if len(arrays) > 1 else arrays[0]
        return self.cache[p]


def _resolved(task, **fields) -> None:
    """Set fields of a frozen task as it is made. Tasks carry absolute paths, resolved where they are made (the
    client): a worker of a Dask cluster runs in another working directory."""
    for name, value in fields.items():
        object.__setattr__(task, name, value)


def _map_partitions(runner: Runner, stage: str, fn, keys: list[str], files: tuple[str, ...], make_task,
                    sizes=None, unit="part") -> int:
    """Run fn over the partitions whose done marker is missing or stale; returns how many were reused."""
    work = runner.work
    todo = [i for i, key in enumerate(keys) if work.part_done(stage, i, key, files) is None]
    for i in todo:
        if work.part_done(stage, i, keys[i], ()) is not None:  # finished once, but a file was lost or cut
            runner.log(f"warning: {work.part(stage, i, '*')} has a missing or truncated file; recomputing it")
    runner.engine.map(fn, [make_task(i) for i in todo], desc=stage,
                      sizes=[sizes[i] for i in todo] if sizes else None, unit=unit)
    return len(keys) - len(todo)


# ---------------------------------------------------------------------------------------------- 1. shingle

@dataclasses.dataclass(frozen=True)
class PartitionTask:
    """One partition's work for a worker (any engine): where the work dir is, which partition, with what."""

    root: str
    index: int
    key: str
    params: object
    items: tuple = ()  # shingle: the partition's inputs
    source: SourceParams | None = None
    cwd: str = ""  # what relative paths of items are relative to (resolving a million items here costs seconds)

    def __post_init__(self):
        _resolved(self, root=os.path.join(os.getcwd(), self.root), cwd=self.cwd or os.getcwd())


def shingle_partition(task: PartitionTask) -> None:
    """Read, normalise, tokenise and shingle one partition; write its docs, values and offsets, then its marker."""
    work = WorkDir(task.root)
    problems: dict = {}
    char_hasher = CodePointHasher()

    def token_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if task.params.unit == "word":
            return word_hashes(texts)[:2]
        hashed = [char_hasher.hash_text(t) for t in texts]
        return (np.concatenate(hashed) if hashed else np.empty(0, np.uint32)), np.array([len(h) for h in hashed])

    records, texts = [], []
    streamed = []  # (document number, its unique shingle hashes) of large files shingled piece by piece
    for doc in corpus.read_documents(task.items, task.source, problems, task.cwd):
        if doc.pieces is not None:
            try:
                hashes = _streamed_shingles(doc.pieces, task.params, lambda t: token_hashes([t])[0])
            except corpus.BinaryFile:
                problems["binary"] = problems.get("binary", 0) + 1
                continue
            streamed.append((len(records), hashes))
            texts.append("")
        else:
            texts.append(corpus.normalise(doc.text, task.params))
        records.append({"id": doc.id, "size": doc.size, "mtime_ns": doc.mtime_ns, "sha": doc.sha,
                        "replaced": doc.replaced})
    all_tokens, lengths = token_hashes(texts)
    doc_index, hashes = kgram_hashes(all_tokens, np.asarray(lengths, np.int64), task.params.k)
    if streamed:
        doc_index = np.concatenate([doc_index, *(np.full(len(h), d, np.int64) for d, h in streamed)])
        hashes = np.concatenate([hashes, *(h for _, h in streamed)])
    values, offsets = csr_sets(doc_index, hashes, len(records))
    for record, n in zip(records, np.diff(offsets).tolist()):
        record["shingles"] = n
    work.save_jsonl(work.part("shingle", task.index, "docs.jsonl"), records)
    work.save_array(work.part("shingle", task.index, "values.npy"), values)
    work.save_array(work.part("shingle", task.index, "offsets.npy"), offsets)
    work.mark_part_done("shingle", task.index, task.key, suffixes=SHINGLE_FILES, stats={
        "docs": len(records), "bytes": sum(r["size"] for r in records), "shingles": int(len(values)),
        "short": sum(1 for r in records if r["shingles"] == 0),
        "replaced": sum(1 for r in records if r["replaced"]), **problems})


def _streamed_shingles(pieces, params: ShingleParams, hash_tokens) -> np.ndarray:
    """The unique shingle hashes of a document given as pieces cut after whitespace: each piece's tokens are
    shingled together with the last k-1 tokens of the text before it, so no shingle is lost or made up at a cut.
    Memory grows with the number of distinct shingles, not with the text."""
    tail = np.empty(0, np.uint32)
    merged, pending, first = np.empty(0, np.uint32), [], True
    for text, last in _lookahead(pieces):  # lazily: one piece in memory at a time
        th = np.concatenate([tail, hash_tokens(corpus.normalise(text, params, first=first, last=last))])
        first = False
        pending.append(sets.sorted_unique(kgram_hashes(th, np.array([len(th)]), params.k)[1]))
        tail = th[len(th) - min(len(th), params.k - 1):]
        if sum(map(len, pending)) > max(len(merged), 1 << 20):  # merge when pending outgrows what is merged
            merged, pending = sets.sorted_unique(np.concatenate([merged, *pending])), []
    return sets.sorted_unique(np.concatenate([merged, *pending]))


def _lookahead(pieces):
    """(piece, is_last) for each piece of an iterator."""
    previous = None
    for piece in pieces:
        if previous is not None:
            yield previous, False
        previous = piece
    if previous is not None:
        yield previous, True


def shingle(runner: Runner, args: list[str], source: SourceParams, params: ShingleParams, stdin=None,
            references: tuple[str, ...] = ()) -> dict:
    """references: folders or files whose documents are always keepers (read like the other arguments)."""
    work = runner.work
    listing = corpus.list_items([*args, *references], source, stdin, spool=work.spool)
    inputs = [{"path": p, "reference": i >= len(listing.args) - len(references)} for i, p in enumerate(listing.args)]
    if not listing.items:
        raise InputError(f"{' '.join(args)}: no documents found (folder empty, or every file hidden or excluded)")
    parts = corpus.partition(listing.items, source)
    keys = [digest("shingle", FORMAT, params, source.id_field, source.text_field, source.strict,
                   [item.fingerprint() for item in part]) for part in parts]
    key = digest("shingle", keys, inputs)
    record = _up_to_date(work, "shingle", key)
    if record is not None and all(work.part_done("shingle", i, k, SHINGLE_FILES) for i, k in enumerate(keys)):
        runner.log(f"shingle: up to date ({_shingle_summary(record)})")
        _report_problems(runner, record)
        return record
    if params.unit == "word":
        word_characters()  # built once here, inherited by the forked workers
    reused = _map_partitions(
        runner, "shingle", shingle_partition, keys, SHINGLE_FILES,
        lambda i: PartitionTask(str(work.root), i, keys[i], params, tuple(parts[i]), source),
        sizes=[sum(item.size for item in part) for part in parts], unit="B")
    dones = [work.part_done("shingle", i, k, SHINGLE_FILES) for i, k in enumerate(keys)]
    totals: dict = {"skipped": listing.skipped}
    for done in dones:
        for name, value in done.items():
            if name == "messages":
                totals.setdefault("messages", []).extend(value)
            elif isinstance(value, int) and name != "key":
                totals[name] = totals.get(name, 0) + value
    docs = [done["docs"] for done in dones]
    record = {"key": key, "params": asdict(params), "source": asdict(source), "inputs": inputs, "partitions": keys,
              "docs": docs, "stats": totals}
    _check_documents(runner, record, params, args)
    work.record_stage("shingle", record)
    runner.log(f"shingle: {_shingle_summary(record)}" + (f"; {reused} of {len(keys)} partitions reused" if reused
                                                          else ""))
    _report_problems(runner, record)
    return record


def _check_documents(runner: Runner, record: dict, params: ShingleParams, args: list[str]) -> None:
    stats = record["stats"]
    where = " ".join(args)
    if not stats.get("docs"):
        raise InputError(f"{where}: no readable text documents (binary: {stats.get('binary', 0)}, unreadable: "
                         f"{stats.get('unreadable', 0) + stats.get('vanished', 0)})")
    if stats.get("docs") == stats.get("short"):
        raise InputError(f"{where}: no document is long enough for one {params.k}-{params.unit} shingle; "
                         f"lower -k or use --unit char")
    if record["source"]["jsonl"]:
        ids = [doc["id"] for doc in load_docs(runner.work, record)]
        if len(set(ids)) != len(ids):
            seen, dup = set(), []
            for i in ids:
                if i in seen and i not in dup:
                    dup.append(i)
                seen.add(i)
            raise InputError(f"{where}: duplicate ids in field {record['source']['id_field']!r}: "
                             f"{', '.join(map(repr, dup[:5]))}{' ...' if len(dup) > 5 else ''}; "
                             f"ids must be unique")


def _shingle_summary(record: dict) -> str:
    s = record["stats"]
    params = record["params"]
    text = (f"{s['docs']} documents, {s['bytes'] / 1e6:.1f} MB, {s['shingles']} {params['k']}-{params['unit']} "
            f"shingles in {len(record['partitions'])} partition{'s' if len(record['partitions']) != 1 else ''}")
    notes = [f"{s[k]} {label}" for k, label in (
        ("short", "too short for one shingle (kept, never paired)"), ("binary", "binary files skipped"),
        ("replaced", "with invalid UTF-8 replaced"), ("bad_lines", "bad JSONL lines skipped"))
        if s.get(k)]
    notes += [f"{n} {kind} skipped" for kind, n in s.get("skipped", {}).items() if n]
    return text + ("; " + "; ".join(notes) if notes else "")


def _report_problems(runner: Runner, record: dict) -> None:
    stats = record["stats"]
    for message in stats.get("messages", []):
        runner.log(f"warning: {message}")
    runner.soft_errors += stats.get("unreadable", 0) + stats.get("vanished", 0)


def load_docs(work: WorkDir, shingle_record: dict | None = None) -> list[dict]:
    """Every document record, in global order, with `arg` (index of the argument it was found under) and
    `reference` (found under a --reference path)."""
    record = shingle_record or require(work, "shingle")
    docs = []
    for i in range(len(record["partitions"])):
        docs.extend(work.load_jsonl(work.part("shingle", i, "docs.jsonl"), "shingle"))
    inputs = record.get("inputs", [])
    prefixes = [(p["path"] if p["path"].endswith("/") else p["path"] + "/") for p in inputs]
    for doc in docs:
        arg = next((i for i, p in enumerate(inputs) if doc["id"] == p["path"] or doc["id"].startswith(prefixes[i])),
                   0)
        doc["arg"] = arg
        doc["reference"] = bool(inputs) and inputs[arg]["reference"]
    return docs


# ---------------------------------------------------------------------------------------------- 2. signature

def signature_partition(task: PartitionTask) -> None:
    work = WorkDir(task.root)
    values = work.load_array(work.part("shingle", task.index, "values.npy"), "shingle")
    offsets = work.load_array(work.part("shingle", task.index, "offsets.npy"), "shingle")
    if task.params.method == "oph":
        sig = minhash.oph_signatures(values, offsets, task.params.num_perm, task.params.seed)
    else:
        a, b = work.load_array(work.path("signature", "permutations.npy"), "signature")
        sig = minhash.affine_signatures(values, offsets, a, b)
    work.save_array(work.part("signature", task.index, "npy"), sig)
    work.mark_part_done("signature", task.index, task.key, suffixes=("npy",), stats={"docs": len(sig)})


def signature(runner: Runner, params: SignatureParams) -> dict:
    work = runner.work
    upstream = require(work, "shingle", consumer="signature")
    keys = [digest("signature", FORMAT, params, k) for k in upstream["partitions"]]
    key = digest("signature", keys)
    record = _up_to_date(work, "signature", key)
    if record is not None and all(work.part_done("signature", i, k, ("npy",)) for i, k in enumerate(keys)):
        runner.log(f"signature: up to date ({params.num_perm} {params.method} permutations)")
        return record
    if params.method == "permutation":
        work.save_array(work.path("signature", "permutations.npy"),
                        np.stack(minhash.draw_affine_parameters(params.num_perm, params.seed)))
    reused = _map_partitions(runner, "signature", signature_partition, keys, ("npy",),
                             lambda i: PartitionTask(str(work.root), i, keys[i], params),
                             sizes=upstream["docs"], unit="doc")
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys,
              "docs": upstream["docs"]}
    work.record_stage("signature", record)
    runner.log(f"signature: {sum(upstream['docs'])} signatures of {params.num_perm} {params.method} permutations"
               + (f"; {reused} of {len(keys)} partitions reused" if reused else ""))
    return record


# ---------------------------------------------------------------------------------------------- 3. band

def band_partition(task: PartitionTask) -> None:
    work = WorkDir(task.root)
    sig = work.load_array(work.part("signature", task.index, "npy"), "signature")
    work.save_array(work.part("band", task.index, "npy"), lsh.band_keys(sig, task.params.bands, task.params.rows))
    work.mark_part_done("band", task.index, task.key, suffixes=("npy",), stats={"docs": len(sig)})


def choose_bands(num_perm: int, threshold: float | None, bands: int | None, rows: int | None) -> BandParams:
    """Explicit --bands/--rows (one of them may be derived from num_perm), else (b, r) from the threshold."""
    if bands and rows:
        params = BandParams(bands, rows, None)
    elif bands:
        params = BandParams(bands, num_perm // bands, None)
    elif rows:
        params = BandParams(num_perm // rows, rows, None)
    else:
        t = threshold if threshold is not None else DEFAULT_THRESHOLD
        params = BandParams(*lsh.optimal_bands(min(t, 0.99), num_perm), t)
    if params.bands < 1 or params.rows < 1 or params.bands * params.rows > num_perm:
        raise ParameterError(
            f"band: {params.bands} bands x {params.rows} rows need {params.bands * params.rows} permutations but "
            f"signatures have {num_perm}; lower --bands/--rows or re-run the signature stage with "
            f"--num-perm {max(params.bands * params.rows, 1)}")
    return params


def band(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None) -> dict:
    work = runner.work
    upstream = require(work, "signature", consumer="band")
    num_perm = upstream["params"]["num_perm"]
    params = choose_bands(num_perm, threshold, bands, rows)
    keys = [digest("band", FORMAT, params, k) for k in upstream["partitions"]]
    key = digest("band", keys)
    summary = describe_bands(params, num_perm)
    record = _up_to_date(work, "band", key)
    if record is not None and all(work.part_done("band", i, k, ("npy",)) for i, k in enumerate(keys)):
        runner.log(f"band: up to date ({summary})")
        return record
    _map_partitions(runner, "band", band_partition, keys, ("npy",),
                    lambda i: PartitionTask(str(work.root), i, keys[i], params), sizes=upstream["docs"], unit="doc")
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys}
    work.record_stage("band", record)
    runner.log(f"band: {summary}")
    return record


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={params.bands} bands x r={params.rows} rows ({num_perm - used} of {num_perm} permutations unused); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")


# ---------------------------------------------------------------------------------------------- 4. candidates

def candidates(runner: Runner, params: CandidateParams) -> dict:
    work = runner.work
    upstream, key, record = _begin(runner, "candidates", params)
    shingle_record = require(work, "shingle")
    if record is not None:
        runner.log(f"candidates: up to date ({record['stats']['candidates']} pairs)")
        return record
    starts = part_starts(shingle_record)
    keys, ids = [], []
    for i, start in enumerate(starts.tolist()):
        offsets = work.load_array(work.part("shingle", i, "offsets.npy"), "shingle")
        has_set = np.flatnonzero(np.diff(offsets) > 0)  # empty sets have no similarity: never candidates
        keys.append(work.load_array(work.part("band", i, "npy"), "band")[has_set])
        ids.append(has_set + start)
    keys, ids = np.concatenate(keys), np.concatenate(ids).astype(np.int64)
    found, large = [], []
    for j in range(keys.shape[1]):
        pairs, big = lsh.bucket_pairs(keys[:, j], ids, params.max_bucket)
        found.append(pairs)
        large.extend({"band": j, "anchor": int(a), "size": int(s)} for a, s, _ in big.tolist())
    pairs = lsh.unique_pairs(np.concatenate(found))
    work.save_array(work.path("candidates", "pairs.npy"), pairs)
    work.save_jsonl(work.path("candidates", "large_buckets.jsonl"), large)
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"],
              "files": _files(work, "candidates", "pairs.npy", "large_buckets.jsonl"),
              "stats": {"candidates": int(len(pairs)), "large_buckets": len(large)}}
    work.record_stage("candidates", record)
    runner.log(f"candidates: {len(pairs)} pairs share a bucket in at least one band")
    if large:
        docs = load_docs(work, shingle_record)
        for bucket in large[:10]:
            runner.log(f"warning: band {bucket['band']} has a bucket of {bucket['size']} documents (over "
                       f"--max-bucket {params.max_bucket}); paired each with {docs[bucket['anchor']]['id']} only")
        if len(large) > 10:
            runner.log(f"warning: {len(large) - 10} more large buckets, listed in {work.path('candidates', 'large_buckets.jsonl')}")
    return record


# ---------------------------------------------------------------------------------------------- 5. verify

@dataclasses.dataclass(frozen=True)
class VerifyTask:
    root: str
    lo: int
    hi: int
    starts: tuple

    def __post_init__(self):
        _resolved(self, root=os.path.join(os.getcwd(), self.root))


def set_overlap(shingles: PartitionArrays, starts: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(|A ∩ B|, |A|, |B|) of the stored shingle sets of documents a[i] and b[i]."""
    va, la = sets.gather_sets(shingles, starts, a)
    vb, lb = sets.gather_sets(shingles, starts, b)
    return sets.intersection_sizes(va, la, vb, lb), la, lb


def verify_chunk(task: VerifyTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For candidate pairs [lo, hi): |A ∩ B|, |A|, |B| of the shingle sets and the signature agreement."""
    work = WorkDir(task.root)
    pairs = np.asarray(work.load_array(work.path("candidates", "pairs.npy"), "candidates", mmap=True)[task.lo:task.hi])
    starts = np.asarray(task.starts, dtype=np.int64)
    inter, la, lb = set_overlap(PartitionArrays(work, "shingle", ("values.npy", "offsets.npy")), starts,
                                pairs[:, 0], pairs[:, 1])
    signatures = PartitionArrays(work, "signature", ("npy",))
    agree = (sets.gather_rows(signatures, starts, pairs[:, 0]) == sets.gather_rows(signatures, starts, pairs[:, 1]))
    return inter, la, lb, agree.mean(axis=1)


def verify(runner: Runner, params: VerifyParams) -> dict:
    work = runner.work
    upstream, key, record = _begin(runner, "verify", params)
    if record is not None:
        runner.log(f"verify: up to date ({record['stats']['pairs']} pairs with Jaccard >= {params.threshold})")
        return record
    shingle_record = require(work, "shingle")
    n = upstream["stats"]["candidates"]
    starts = tuple(part_starts(shingle_record).tolist())
    tasks = [VerifyTask(str(work.root), lo, min(lo + VERIFY_CHUNK, n), starts) for lo in range(0, n, VERIFY_CHUNK)]
    results = runner.engine.map(verify_chunk, tasks, desc="verify", sizes=[t.hi - t.lo for t in tasks], unit="pair")
    pairs = work.load_array(work.path("candidates", "pairs.npy"), "candidates")
    if results:
        inter, la, lb, estimate = (np.concatenate(column) for column in zip(*results))
    else:
        inter = la = lb = np.empty(0, np.int64)
        estimate = np.empty(0)
    similarity = sets.jaccard(inter, la, lb)
    keep = np.flatnonzero(similarity >= params.threshold)
    docs = load_docs(work, shingle_record)
    out = []
    for p in keep.tolist():
        a, b = docs[pairs[p, 0]]["id"], docs[pairs[p, 1]]["id"]
        if b < a:
            a, b = b, a
        out.append({"a": a, "b": b, "jaccard": float(similarity[p]), "estimate": float(estimate[p]),
                    "intersection": int(inter[p]),
                    "union": int(la[p] + lb[p] - inter[p])})
    out.sort(key=lambda r: (-r["jaccard"], r["a"], r["b"]))
    work.save_array(work.path("verify", "pairs.npy"), pairs[keep])
    work.save_array(work.path("verify", "scores.npy"), np.stack([similarity[keep], estimate[keep]], axis=1)
                    if len(keep) else np.empty((0, 2)))
    work.save_jsonl(work.path("verify", "pairs.jsonl"), out)
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"],
              "files": _files(work, "verify", "pairs.npy", "scores.npy", "pairs.jsonl"),
              "stats": {"candidates": int(n), "pairs": len(out), "rejected": int(n - len(out))}}
    work.record_stage("verify", record)
    runner.log(f"verify: {len(out)} of {n} candidate pairs have exact Jaccard >= {params.threshold}")
    return record


# ---------------------------------------------------------------------------------------------- 6. cluster

def cluster(runner: Runner, params: ClusterParams) -> dict:
    work = runner.work
    shingle_record = require(work, "shingle")
    upstream, key, record = _begin(runner, "cluster", params, shingle_record["inputs"])
    if record is not None:
        runner.log(f"cluster: up to date ({_cluster_summary(record)})")
        return record
    docs = load_docs(work, shingle_record)
    edges = work.load_array(work.path("verify", "pairs.npy"), "verify")
    anchors = {b["anchor"] for b in work.load_jsonl(work.path("candidates", "large_buckets.jsonl"), "candidates")}
    starts = part_starts(shingle_record)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"))  # mapped once for every call

    def similarity(a, b):
        out = []
        for lo in range(0, len(a), VERIFY_CHUNK):
            inter, la, lb = set_overlap(shingles, starts, a[lo:lo + VERIFY_CHUNK], b[lo:lo + VERIFY_CHUNK])
            out.append(sets.jaccard(inter, la, lb))
        return np.concatenate(out) if out else np.empty(0)

    rules = KeeperRules.parse(",".join(params.keep), params.prefer)
    groups = build_groups(docs, edges, upstream["params"]["threshold"], rules, params.link, similarity, anchors)
    work.save_jsonl(work.path("cluster", "clusters.jsonl"), groups)
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"],
              "files": _files(work, "cluster", "clusters.jsonl"), "stats": {
        "groups": len(groups), "documents": sum(g["size"] for g in groups),
        "duplicates": sum(m["role"] == "duplicate" for g in groups for m in g["members"]),
        "anchored": sum(g["anchored"] for g in groups)}}
    work.record_stage("cluster", record)
    runner.log(f"cluster: {_cluster_summary(record)}")
    return record


def _cluster_summary(record: dict) -> str:
    s = record["stats"]
    return (f"{s['groups']} groups of {s['documents']} documents ({s['duplicates']} duplicates of a keeper; "
            f"link {record['params']['link']})")


def clusters(work: WorkDir) -> list[dict]:
    require(work, "cluster")
    return work.load_jsonl(work.path("cluster", "clusters.jsonl"), "cluster")


def verified_pairs(work: WorkDir) -> list[dict]:
    require(work, "verify")
    return work.load_jsonl(work.path("verify", "pairs.jsonl"), "verify")


def inherited_threshold(work: WorkDir, given: float | None) -> float:
    """--threshold for verify: as given, else the threshold the band stage was chosen for, else the default."""
    if given is not None:
        return given
    record = work.read_manifest()["stages"].get("band")
    if record and record["params"].get("threshold") is not None:
        return record["params"]["threshold"]
    return DEFAULT_THRESHOLD


def default_workdir(args: list[str], source: SourceParams, params: ShingleParams) -> str:
    """A work dir under the user's cache directory, keyed by the resolved inputs and the shingle parameters."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    inputs = [arg if arg == "-" else os.path.abspath(arg) for arg in args]
    return os.path.join(base, "neardup", digest(inputs, source, params)[:16])
