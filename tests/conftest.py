"""Shared fixtures: generated corpora and a brute-force reference that shares no code with nearDup."""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_corpus"
NO_TMPFS = "needs unshare(1) with a user and mount namespace (or root) to fill a small tmpfs"


def tmpfs_flags(folder: Path) -> list[str] | None:
    """The unshare(1) flags under which this user may mount a tmpfs of its own (a user and mount namespace; as
    root, a mount namespace), or None: tests of a really full disk fill one."""
    import subprocess

    folder.mkdir(exist_ok=True)
    for flags in (["-rm"], ["-m"]):
        try:
            if subprocess.run(["unshare", *flags, "mount", "-t", "tmpfs", "-o", "size=64k", "none", str(folder)],
                              capture_output=True, timeout=30).returncode == 0:
                return flags
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


def reference_shingles(text: str, unit: str = "word", k: int = 5) -> set:
    """Shingles as strings/tuples (no hashing): NFKC, casefold, then \\w+ words or whitespace-collapsed chars."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if unit == "word":
        tokens = re.findall(r"\w+", text)
        return {tuple(tokens[i:i + k]) for i in range(len(tokens) - k + 1)}
    text = " ".join(text.split())
    return {text[i:i + k] for i in range(len(text) - k + 1)}


def brute_force_pairs(texts: dict[str, str], threshold: float, unit: str = "word", k: int = 5) -> dict:
    """{(a, b): J} for every pair of documents (a < b) with exact Jaccard >= threshold, by comparing all pairs."""
    sets = {name: reference_shingles(text, unit, k) for name, text in texts.items()}
    out = {}
    for a, b in itertools.combinations(sorted(sets), 2):
        sa, sb = sets[a], sets[b]
        if sa and sb:
            j = len(sa & sb) / len(sa | sb)
            if j >= threshold:
                out[(a, b)] = j
    return out


def edit(words: list[str], rate: float, rng: random.Random, vocab: list[str]) -> list[str]:
    """Substitute, delete or insert a random word at each position with probability rate."""
    out = []
    for w in words:
        r = rng.random()
        if r < rate / 3:
            out.append(rng.choice(vocab))
        elif r < 2 * rate / 3:
            continue
        elif r < rate:
            out.extend([w, rng.choice(vocab)])
        else:
            out.append(w)
    return out


def generate_corpus(folder: Path, n_base: int = 120, seed: int = 7) -> dict[str, str]:
    """Random-vocabulary documents plus edited copies (edit rates 0-30%): similarities spread across [0, 1]."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)] + ["élan", "Straße", "ﬁsh", "naïve"]
    texts = {}
    for i in range(n_base):
        words = [rng.choice(vocab) for _ in range(rng.randint(60, 250))]
        texts[f"doc{i:04d}.txt"] = " ".join(words)
        if i % 3 == 0:
            for j, rate in enumerate(rng.sample([0.0, 0.01, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3], 2)):
                texts[f"doc{i:04d}_v{j}.txt"] = " ".join(edit(words, rate, rng, vocab))
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return {str(folder / name): text for name, text in texts.items()}


def refuse_open(monkeypatch, suffix: str, error: OSError) -> None:
    """Make nearDup's reader fail on files ending with suffix (states root cannot stage: CI runs as root)."""
    from nearDup.text import read as reader

    real_open, real_read_file = open, reader._read_file

    def refusing_open(path, *args, **kwargs):
        if str(path).endswith(suffix):
            raise error
        return real_open(path, *args, **kwargs)

    def refusing_read_file(path, *args, **kwargs):  # small files are read with os.open/os.read
        if str(path).endswith(suffix):
            raise error
        return real_read_file(path, *args, **kwargs)

    monkeypatch.setattr(reader, "open", refusing_open, raising=False)
    monkeypatch.setattr(reader, "_read_file", refusing_read_file)


@pytest.fixture(autouse=True)
def no_user_settings(monkeypatch, tmp_path_factory):
    """No test reads the config file or NEARDUP_ variables of whoever runs the suite (subprocesses inherit this)."""
    for name in [n for n in os.environ if n.startswith("NEARDUP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "no-config"))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen") / "docs"
    return folder, generate_corpus(folder)


def stage_output(workdir, stage: str, name: str):
    """Path of a whole-stage output of the work dir's current record (the file name carries the stage key)."""
    record = json.loads((Path(workdir) / "manifest.json").read_text())["stages"][stage]
    return Path(workdir) / stage / f"{record['key'][:12]}.{name}"


def stage_files(root: Path) -> dict[str, bytes]:
    """Every file a run leaves in its work dir, except the manifest (completion times), its seal (folder times)
    and the lock: what two runs that must write the same work compare."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("manifest.json", "sealed.json", "lock")}
