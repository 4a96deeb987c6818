"""The HTML report at scale (issue 21): a corpus of GROUPS groups (each a ~1 KB text of random words and a copy
with one word changed) and UNIQUE other texts, `neardup run` on it, then `neardup report`: the report should be
written in under 10% of the run's time and open in headless Chromium in under 2 s.

    python bench/report.py [--groups 10000] [--unique 0] [--out bench/out/report]
    python bench/report.py --ab REV_A REV_B [--reps 5]      # two commits, interleaved: before/after a change
    python bench/report.py --screenshot docs/report.png     # the README's screenshot, of sample_corpus

Prints the timings as JSON: wall clock and CPU seconds (user + sys of the whole process tree: the machine is shared,
and CPU time moves less with the other tenants' load than wall time). The opening time is the page's own navigation
timing (navigationStart to loadEventEnd: the inline script has parsed the data and drawn the first page by then)
and the wall clock of the driver's get().

With --ab, both commits are exported (bench/run.py's snapshots) and timed alternately, A then B, REPS times, each
time on a fresh work dir: `run`, `run --report` and `report` on the work dir the second left. The report's cost in a
run is the difference of the medians of `run --report` and `run` (one interpreter, the run's imports shared); the
`report` command alone also pays its own start. Medians of CPU seconds, and the load average when it ended.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
NEARDUP = [sys.executable, "-m", "nearDup"]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync")


def make_corpus(folder: Path, groups: int, unique: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20000)]
    for i in range(groups + unique):
        sub = folder / f"{i // 1000:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        words = rng.choices(vocab, k=rng.randint(120, 200))
        (sub / f"{i:06d}.txt").write_text(" ".join(words), encoding="utf-8")
        if i < groups:
            words[len(words) // 2] = "changed"
            (sub / f"{i:06d}_edit.txt").write_text(" ".join(words), encoding="utf-8")


def timed(args: list, **kwargs) -> tuple[float, float]:
    """Wall clock and CPU seconds (user + sys, the process and the workers it waited for) of a command."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, **kwargs)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def browser(width: int = 1280, height: int = 900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def open_time(report: Path) -> tuple[float, float]:
    driver = browser()
    try:
        driver.get("about:blank")
        start = time.perf_counter()
        driver.get(report.as_uri())
        wall = time.perf_counter() - start
        assert driver.execute_script("return document.body.dataset.ready") == "1"
        timing = driver.execute_script("const t = performance.timing; return t.loadEventEnd - t.navigationStart")
        return wall, timing / 1000
    finally:
        driver.quit()


def screenshot(target: Path) -> None:
    """A report of sample_corpus: its top, and the pair view of a reordered copy below it, as one small PNG."""
    from PIL import Image  # (the bench extra)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        subprocess.run([*NEARDUP, "-w", f"{tmp}/w", "run", "sample_corpus", "--report", str(out)], check=True,
                       cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        driver = browser(1280, 1400)
        try:
            driver.get(out.as_uri())
            top = Path(tmp) / "top.png"
            driver.save_screenshot(str(top))
            driver.set_window_size(1280, 620)
            driver.execute_script("document.querySelector('button[data-view=\"1\"]').click();"
                                  "document.getElementById('pair').scrollIntoView();")
            pair = Path(tmp) / "pair.png"
            driver.save_screenshot(str(pair))
        finally:
            driver.quit()
        parts = [Image.open(p).convert("RGB") for p in (top, pair)]
        image = Image.new("RGB", (parts[0].width, sum(p.height for p in parts)), "white")
        image.paste(parts[0], (0, 0))
        image.paste(parts[1], (0, parts[0].height))
        scale = 960 / image.width
        image = image.resize((960, round(image.height * scale)), Image.Resampling.LANCZOS)
        image.quantize(48).save(target, optimize=True)
    print(f"{target}: {target.stat().st_size} bytes")


def ab(revs: list[str], docs: Path, out: Path, reps: int) -> dict:
    """Both commits alternately (see the module's docstring): medians of CPU seconds, and the report's share."""
    import peers

    import common
    import run as bench_run

    neardup = str(Path(sys.executable).with_name("neardup"))
    sides = []
    for rev in revs:
        source, sha = bench_run.neardup_snapshot(rev)
        sides.append({"rev": rev, "sha": sha[:12], "env": {**peers.neardup_env(source),  # type: ignore[dict-item]
                                                           "XDG_CACHE_HOME": str(out / "cache")},
                      "run": [], "run_report": [], "report": []})
    peers.warm_cache(str(docs))
    for _ in range(reps):
        for n, side in enumerate(sides):
            work, report = out / f"w{n}", out / f"report{n}.html"
            for key, extra in (("run", []), ("run_report", ["--report", str(report)])):
                shutil.rmtree(work, ignore_errors=True)
                side[key].append(common.timed([neardup, "-w", str(work), "run", str(docs), "--groups", *extra],
                                              side["env"])[1])
            side["report"].append(common.timed([neardup, "-w", str(work), "report", "-o", str(report)],
                                               side["env"])[1])
    result = {}
    for n, side in enumerate(sides):
        run, with_report, alone = (statistics.median(side[k]) for k in ("run", "run_report", "report"))
        result[side["rev"]] = {"sha": side["sha"], "run_cpu_s": round(run, 3),
                               "run_report_cpu_s": round(with_report, 3),
                               "in_run_report_cpu_s": round(with_report - run, 3),
                               "in_run_share": round((with_report - run) / run, 3),
                               "report_command_cpu_s": round(alone, 3), "report_command_share": round(alone / run, 3),
                               "report_bytes": (out / f"report{n}.html").stat().st_size}
    opened: list[list[float]] = [[] for _ in sides]  # opening the reports: alternately too
    for _ in range(reps):
        for n in range(len(sides)):
            opened[n].append(open_time(out / f"report{n}.html")[1])
    for n, side in enumerate(sides):
        result[side["rev"]]["open_load_event_s"] = round(statistics.median(opened[n]), 2)
    return {"reps": reps, "load_average_end": os.getloadavg(), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=10000)
    parser.add_argument("--unique", type=int, default=0, help="texts in no group, beside the groups")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "report")
    parser.add_argument("--screenshot", type=Path, help="write the README's screenshot to this PNG instead")
    parser.add_argument("--ab", nargs=2, metavar="REV", help="time two commits alternately (before/after)")
    parser.add_argument("--reps", type=int, default=5, help="with --ab: repetitions of each")
    args = parser.parse_args()
    if args.screenshot:
        screenshot(args.screenshot)
        return
    out = args.out.resolve()  # (a file:// address needs an absolute path)
    shutil.rmtree(out, ignore_errors=True)
    docs = out / "docs"
    make_corpus(docs, args.groups, args.unique)
    if args.ab:
        print(json.dumps({"groups": args.groups, "documents": 2 * args.groups + args.unique,
                          **ab(args.ab, docs, out, args.reps)}, indent=1))
        return
    env = {**os.environ, "XDG_CACHE_HOME": str(out / "cache")}
    work, report = out / "w", out / "report.html"
    run = timed([*NEARDUP, "-w", str(work), "run", str(docs), "--groups"], env=env, stderr=subprocess.DEVNULL)
    write = timed([*NEARDUP, "-w", str(work), "report", "-o", str(report)], env=env, stderr=subprocess.DEVNULL)
    groups = sum(1 for line in subprocess.run([*NEARDUP, "-w", str(work), "cluster", "--format", "jsonl"],
                                              env=env, capture_output=True, text=True, check=True).stdout.splitlines()
                 if '"type": "group"' in line)
    wall, page = open_time(report)
    print(json.dumps({"groups": groups, "documents": 2 * args.groups + args.unique,
                      "run_wall_s": round(run[0], 2), "run_cpu_s": round(run[1], 2),
                      "report_wall_s": round(write[0], 2), "report_cpu_s": round(write[1], 2),
                      "report_share_wall": round(write[0] / run[0], 3), "report_share_cpu": round(write[1] / run[1], 3),
                      "report_bytes": report.stat().st_size, "open_wall_s": round(wall, 2),
                      "open_load_event_s": round(page, 2)}, indent=1))


if __name__ == "__main__":
    main()
