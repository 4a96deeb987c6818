"""Golden scenarios: nearDup's stdout and work-dir files for fixed inputs, rendered as one text per scenario.

Each scenario builds its inputs in a fresh folder (sample_corpus copied, or a generated corpus), gives every input
file a fixed mtime (keeper rules read mtimes), runs a sequence of real CLI command lines there (ids are relative
to it) and records, for each command: its exit status, its stdout and a digest of every file of its work dir.

What legitimately differs between two runs, machines or checkouts is normalised, and nothing else:
- the scenario's folder (an absolute tmp path, in scripts and manifests): {ROOT};
- inode and device numbers (in the catalog and shard tables, and the identity checks of action scripts): inodes
  are renamed I1, I2, ... in order of first appearance within the scenario (so a renamed file keeps its label),
  devices become {DEV};
- stage and partition keys (digests that include the inodes): renamed K1, K2, ... in order of first appearance,
  in the manifest, the done markers and the key prefixes of file names, so which record points to which is kept;
- in manifest.json: "completed" timestamps and "version" (the package version) are dropped, "cwd" is {ROOT};
  sealed.json keeps only which stages are sealed with which record (the folders' mtimes vary);
  on stdout the package version (jsonl header, script comment) is {VERSION};
- files nearDup keeps for itself only: the lock and cache.json (a run's timing), temporary files.
A .npz is recorded as its size and members (name, compression) and a digest per array (dtype, shape, bytes), so
the inode column can be normalised.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from conftest import generate_corpus  # tests/ is on sys.path: pytest puts it there, and so does freeze.py

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
SAMPLE = REPO / "sample_corpus"
GOLDEN = Path(__file__).resolve().parent
MTIME = 1_600_000_000  # the mtimes given to every input file: base + a fixed, name-ordered shuffle of hours

IGNORED = {"lock", "cache.json"}
KEY = re.compile(r"\b[0-9a-f]{32}\b")
KEY_PREFIX = re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?=\.)")
VERSION = re.compile(r'("version": "|nearDup )\d+(?:\.\d+)+(?:[-+.]?[a-z0-9]+)*')  # 0.1.0, 1.2.0rc1, 2.0.dev3
IDENT = re.compile(r"'(\d+) (\d+)'")  # 'device inode' in an action script (its other fields hold three numbers)


def fix_mtimes(folder: Path) -> None:
    """Give every file under folder a distinct, fixed mtime, not in name order (so 'oldest' decides something)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for i, path in enumerate(files):
        t = MTIME + (i * 37 % 101) * 3600
        os.utime(path, (t, t))


def sample(root: Path) -> None:
    shutil.copytree(SAMPLE, root / "sample_corpus")
    fix_mtimes(root / "sample_corpus")


def generated(root: Path) -> None:
    """About 100 short documents with edited copies (tests/conftest.py generate_corpus, n_base=60, seed=7)."""
    generate_corpus(root / "docs", n_base=60, seed=7)
    fix_mtimes(root / "docs")


def write(path: str, text: str, mtime: int) -> Callable[[Path], None]:
    def act(root: Path) -> None:
        (root / path).write_text(text, encoding="utf-8")
        os.utime(root / path, (mtime, mtime))
    return act


def copy(src: str, dst: str, mtime: int) -> Callable[[Path], None]:
    def act(root: Path) -> None:
        shutil.copyfile(root / src, root / dst)
        os.utime(root / dst, (mtime, mtime))
    return act


def delete(path: str) -> Callable[[Path], None]:
    return lambda root: (root / path).unlink()


def rename(src: str, dst: str) -> Callable[[Path], None]:
    return lambda root: (root / src).rename(root / dst)


def touch(path: str, mtime: int) -> Callable[[Path], None]:
    return lambda root: os.utime(root / path, (mtime, mtime))


@dataclass
class Step:
    """A change to the inputs (described, then done) or a command line (run in the scenario's folder)."""
    args: list[str] = field(default_factory=list)
    workdir: str | None = None  # the work dir to record after the command (a glob pattern: every match)
    change: str = ""
    act: Callable[[Path], None] | None = None


def cmd(line: str, workdir: str | None = None) -> Step:
    return Step(line.split(), workdir)


def change(text: str, act: Callable[[Path], None]) -> Step:
    return Step(change=text, act=act)


@dataclass
class Scenario:
    name: str
    setup: Callable[[Path], None]
    steps: list[Step]


# -j 1 everywhere (the default is the machine's core count); the jobs scenario compares -j 1 with -j 2.
SAMPLE_RUN = "-j 1 -w w run sample_corpus"
GEN = "-j 1 -w w run docs"
IDX = "-j 1 run --index idx docs"
NEW_TEXT = "a new document about lighthouses keepers and their lamps " * 8


def index_steps() -> list[Step]:
    steps = [cmd(IDX, "idx")]
    changes = [
        ("add doc9000.txt (a copy of doc0003.txt) and doc9001.txt (new text)",
         [copy("docs/doc0003.txt", "docs/doc9000.txt", MTIME + 500 * 3600),
          write("docs/doc9001.txt", NEW_TEXT, MTIME + 501 * 3600)]),
        ("change doc0007.txt: doc0006.txt's text and three more words", [lambda root: write(
            "docs/doc0007.txt", (root / "docs/doc0006.txt").read_text(encoding="utf-8") + " three more words",
            MTIME + 502 * 3600)(root)]),
        ("delete doc0000.txt", [delete("docs/doc0000.txt")]),
        ("rename doc0012.txt to renamed.txt", [rename("docs/doc0012.txt", "docs/renamed.txt")]),
        ("touch doc0015.txt (new mtime, same text)", [touch("docs/doc0015.txt", MTIME + 503 * 3600)]),
    ]
    for text, acts in changes:
        steps.append(change(text, lambda root, acts=acts: [a(root) for a in acts]))
        steps.append(cmd(IDX + " --new-only", "idx"))
        steps.append(cmd(IDX, "idx"))
    steps.append(cmd(IDX + " --new-only", "idx"))  # nothing new since the last report
    steps.append(cmd("query --index idx docs/doc0003.txt docs/doc0030.txt", "idx"))
    steps.append(cmd("query --index idx --format jsonl docs/doc9001.txt", "idx"))
    return steps


SCENARIOS = [
    Scenario("sample_outputs", sample, [
        cmd(SAMPLE_RUN, "w"),
        cmd(SAMPLE_RUN + " --format jsonl", "w"),
        cmd(SAMPLE_RUN + " --format csv"),
        cmd(SAMPLE_RUN + " --format fdupes"),
        cmd(SAMPLE_RUN + " --format human --color never"),
        cmd(SAMPLE_RUN + " --groups --format jsonl", "w"),
        cmd(SAMPLE_RUN + " --groups"),
        cmd(SAMPLE_RUN + " --print dupes"),
        cmd(SAMPLE_RUN + " --print keepers"),
        cmd(SAMPLE_RUN + " --print uniques"),
        cmd(SAMPLE_RUN + " --print dupes -0"),
        cmd(SAMPLE_RUN + " --keep newest,alpha --print keepers"),
        cmd(SAMPLE_RUN + " --link connected --groups --format jsonl"),
        cmd(SAMPLE_RUN + " -t 0.5", "w"),
    ]),
    Scenario("sample_default_workdir", sample, [  # run without -w: a work dir in the cache, reused
        cmd("-j 1 run sample_corpus", ".cache/neardup/*"),
        cmd("-j 1 run sample_corpus --groups", ".cache/neardup/*"),
    ]),
    Scenario("sample_scripts", sample, [
        cmd(SAMPLE_RUN + " --print script", "w"),
        cmd(SAMPLE_RUN + " --print script --action move --quarantine q"),
        cmd(SAMPLE_RUN + " --print script --action link"),
    ]),
    Scenario("gen_word_oph", generated, [
        cmd(GEN + " --unit word --minhash oph", "w"),
        cmd(GEN + " --unit word --minhash oph --groups --format jsonl"),
        cmd(GEN + " --unit word --minhash oph -t 0.5", "w"),
    ]),
    Scenario("gen_word_permutation", generated, [
        cmd(GEN + " --unit word --minhash permutation", "w"),
        cmd(GEN + " --unit word --minhash permutation -t 0.5", "w"),
    ]),
    Scenario("gen_char_oph", generated, [
        cmd(GEN + " --unit char -k 9 --minhash oph", "w"),
        cmd(GEN + " --unit char -k 9 --minhash oph --groups --format jsonl"),
    ]),
    Scenario("gen_char_permutation", generated, [
        cmd(GEN + " --unit char -k 9 --minhash permutation", "w"),
        cmd(GEN + " --unit char -k 9 --minhash permutation -t 0.5", "w"),
    ]),
    Scenario("gen_stages", generated, [
        cmd("-j 1 -w w shingle docs signature --num-perm 64 band -t 0.7 candidates verify cluster", "w"),
        cmd("-j 1 -w w verify -t 0.9", "w"),
        cmd("-j 1 -w w cluster --format jsonl", "w"),
    ]),
    Scenario("gen_index", generated, index_steps()),
    Scenario("gen_jobs", generated, [
        cmd("-j 1 -w w1 run docs --groups --format jsonl", "w1"),
        cmd("-j 2 -w w2 run docs --groups --format jsonl", "w2"),
    ]),
    Scenario("compare_tune", sample, [
        cmd("compare sample_corpus/lighthouses_original.txt sample_corpus/lighthouses_light_edit.txt"),
        cmd("compare --unit char -k 7 sample_corpus/chess_openings_original.txt "
            "sample_corpus/chess_openings_rewrite.txt"),
        cmd("tune"),
        cmd("tune -t 0.5 --num-perm 64"),
        cmd("tune --bands 16 --rows 8"),
    ]),
]


class Labels:
    """Stable names for values that differ per run or machine, numbered in order of first appearance."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.names: dict[object, str] = {}

    def __call__(self, value) -> str:
        return self.names.setdefault(value, f"{self.prefix}{len(self.names) + 1}")


@dataclass
class Normaliser:
    root: Path
    keys: Labels = field(default_factory=lambda: Labels("K"))
    inodes: Labels = field(default_factory=lambda: Labels("I"))

    def text(self, text: str) -> str:
        for root in sorted({str(self.root.resolve()), str(self.root)}, key=len, reverse=True):  # /private/tmp/x first
            text = text.replace(root, "{ROOT}")
        text = VERSION.sub(lambda m: m[1] + "{VERSION}", text)
        return IDENT.sub(lambda m: f"'{{DEV}} {self.inodes(int(m[2]))}'", text)

    def key(self, text: str) -> str:
        return KEY.sub(lambda m: self.keys(m[0]), text)

    def prefix(self, name: str) -> str:
        """A file name's key prefix as the label of the full key it starts (recorded from the manifest first)."""
        def label(m):
            full = [k for k in self.keys.names if k.startswith(m[0])]
            return self.keys(full[0] if full else m[0])
        return KEY_PREFIX.sub(label, name)

    def json(self, obj):
        if isinstance(obj, dict):
            return {k: self.json(v) for k, v in obj.items() if k not in ("completed", "version")}
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, str):
            return self.key(self.text(obj))  # "cwd" becomes {ROOT}
        return obj

    def array(self, name: str, a: np.ndarray) -> np.ndarray:
        if name == "inode":
            return np.array([self.inodes(int(v)) for v in a]).astype("S")
        return a


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def digest_array(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return f"{a.dtype.str} {a.shape} {sha(a.tobytes())}"


def workdir_record(work: Path, norm: Normaliser) -> list[str]:
    """One line per file nearDup wrote (per array of a .npz), the manifest in full: normalised as documented."""
    lines = []
    manifest = work / "manifest.json"
    if manifest.exists():  # first: its keys name the labels the file names then use
        text = json.dumps(norm.json(json.loads(manifest.read_text(encoding="utf-8"))), indent=1, sort_keys=True)
        lines += ["manifest.json:", *("  " + line for line in text.splitlines())]
    files = []
    for path in work.rglob("*"):
        rel = path.relative_to(work).as_posix()
        if path.is_dir() or rel == "manifest.json" or path.name in IGNORED or ".tmp" in path.name:
            continue
        files.append((norm.prefix(rel), path))
    for rel, path in sorted(files):
        if path.suffix == ".npz":  # the archive's layout, then each array (the bytes hold inodes)
            with zipfile.ZipFile(path) as z:
                members = " ".join(f"{i.filename}:{i.compress_type}" for i in z.infolist())
            lines.append(f"{rel} {path.stat().st_size} bytes: {members}")
            with np.load(path, allow_pickle=False) as data:
                for name in sorted(data.files):
                    lines.append(f"{rel}[{name}] {digest_array(norm.array(name, data[name]))}")
        elif path.suffix == ".npy":
            lines.append(f"{rel} {digest_array(np.load(path, allow_pickle=False))}")
        elif rel == "sealed.json":  # which stages are sealed, with which record (not the folders' mtimes)
            seals = json.loads(path.read_text(encoding="utf-8"))
            lines.append(f"{rel} {json.dumps({stage: norm.key(key) for stage, (key, _) in seals.items()})}")
        elif path.name.endswith(".done.json"):
            obj = norm.json(json.loads(path.read_text(encoding="utf-8")))
            lines.append(f"{rel} {json.dumps(obj, sort_keys=True)}")
        else:
            lines.append(f"{rel} {sha(norm.text(path.read_text(encoding='utf-8')).encode())}")
    return lines


def environment(root: Path) -> dict:
    """No user settings, no terminal, no colour; the cache (of run without -w) inside the scenario's folder; the
    nearDup of this checkout (an editable install may point at another worktree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(XDG_CONFIG_HOME=str(root / ".config"), XDG_CACHE_HOME=str(root / ".cache"), NO_COLOR="1",
               TERM="dumb", COLUMNS="100", LC_ALL="C.UTF-8", PYTHONUTF8="1", PYTHONHASHSEED="0", TZ="UTC")
    return env


def render(scenario: Scenario, root: Path) -> tuple[str, list[str]]:
    """The scenario run in root (an empty folder): its rendered record, and each command's raw stdout."""
    root.mkdir(parents=True, exist_ok=True)
    scenario.setup(root)
    norm = Normaliser(root)
    env = environment(root)
    out, stdouts = [f"# scenario {scenario.name}: regenerate with python tests/golden/freeze.py",
                    f"inputs {inputs_digest(root)}"], []
    previous = None
    for step in scenario.steps:
        if step.act is not None:
            step.act(root)
            out += ["", f"## change: {step.change}", f"inputs {inputs_digest(root)}"]
            continue
        proc = subprocess.run([sys.executable, "-m", "nearDup", *step.args], cwd=root, env=env, check=False,
                              capture_output=True, timeout=120)
        stdouts.append(proc.stdout.decode("utf-8", "surrogateescape"))
        out += ["", "$ neardup " + " ".join(step.args), f"exit {proc.returncode}", "--- stdout"]
        out += norm.text(stdouts[-1].replace("\0", "\\0\n")).splitlines()
        if proc.returncode not in (0, 1):
            out += ["--- stderr", *norm.text(proc.stderr.decode("utf-8", "replace")).splitlines()]
        if step.workdir:  # a path, or a pattern for the cache dir named by a digest of absolute paths
            found = sorted(root.glob(step.workdir))
            files = [line for work in found for line in workdir_record(work, norm)] or ["(no work dir)"]
            out += [f"--- work dir {step.workdir}" + (f" ({len(found)} found)" if "*" in step.workdir else "")]
            out += ["(unchanged)"] if files == previous else files
            previous = files
    return "\n".join(out) + "\n", stdouts


def inputs_digest(root: Path) -> str:
    """What the scenario read: names, texts and mtimes of its input files (a changed generator shows here)."""
    h = hashlib.sha256()
    for folder in ("sample_corpus", "docs"):
        for path in sorted((root / folder).rglob("*")) if (root / folder).exists() else ():
            if path.is_file():
                st = path.stat()
                h.update(f"{path.relative_to(root)}\0{st.st_mtime_ns}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def expected_path(scenario: Scenario) -> Path:
    return GOLDEN / f"{scenario.name}.txt"
