"""The HTML report in a real browser (issue 21): Debian's Chromium, headless, driven by Selenium through the
system's chromedriver (nothing is downloaded). Skipped, with the reason, where either is missing; .ci/run installs
them. One browser for the module: about 3 s to start."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SAMPLE

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
if missing:
    pytest.skip(f"no {' and no '.join(missing)}: install Debian's chromium and chromium-driver (as .ci/run does) to "
                f"run the browser tests", allow_module_level=True)
pytest.importorskip("selenium", reason="the browser tests drive Chromium with selenium (in the test extra)")
pytest.importorskip("jinja2", reason="the report needs nearDup[report]")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from nearDup.cli import cli  # noqa: E402
from nearDup.report import html  # noqa: E402

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--window-size=1280,900")


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="neardup-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    docs = root / "docs"
    shutil.copytree(SAMPLE, docs)
    words = (docs / "lighthouses_original.txt").read_text(encoding="utf-8").split(" ")
    words[len(words) // 2] = "Zanzibar"  # one word changed: two shared passages, one each side of it
    (docs / "lighthouses_one_word.txt").write_text(" ".join(words), encoding="utf-8")
    out = root / "report.html"
    r = CliRunner().invoke(cli, ["-j", "1", "-w", str(root / "w"), "run", str(docs), "--groups", "--format", "jsonl",
                                 "--report", str(out)])
    assert r.exit_code == 0, r.output
    groups = [g for g in map(json.loads, r.stdout.splitlines()) if g["type"] == "group"]
    return {"report": out, "groups": groups, "docs": docs}


def open_page(driver, path: Path):
    driver.get_log("performance")  # drop what came before
    driver.get(path.as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "1"


def shown_groups(driver) -> list[dict]:
    return driver.execute_script("""return Array.from(document.querySelectorAll('tbody.group')).map(b => ({
        group: +b.dataset.group, keeper: b.querySelector('tr.head td.path').textContent,
        members: Array.from(b.querySelectorAll('tr.member')).map(r => [r.cells[0].textContent,
                                                                     r.cells[2].textContent, r.cells[5].textContent])
    }))""")


def test_loads_without_console_errors_or_any_request(browser, sample):
    open_page(browser, sample["report"])
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    page = sample["report"].as_uri()
    events = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    requests = [e["params"] for e in events if e["method"] == "Network.requestWillBeSent"]
    assert [r["request"]["url"] for r in requests if r["request"]["url"] == page]  # the log works
    assert [r["request"]["url"] for r in requests if r.get("documentURL") == page and r["request"]["url"] != page] \
        == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_groups_show_what_the_results_say(browser, sample):
    open_page(browser, sample["report"])
    shown = shown_groups(browser)
    assert [g["group"] for g in shown] == [g["group"] for g in sample["groups"]]
    for s, g in zip(shown, sample["groups"]):
        assert s["keeper"] == g["keeper"]
        assert s["members"] == [[m["role"], f"{m['jaccard']:.4f}", m["id"]] for m in g["members"]]  # keeper first
    assert browser.find_element(By.ID, "count").text == f"Groups 1–{len(shown)} of {len(shown)} shown"


def test_filtering_by_path_and_score(browser, sample):
    open_page(browser, sample["report"])
    box = browser.find_element(By.ID, "filter")
    box.send_keys("CHESS")
    expected = [g["group"] for g in sample["groups"] if any("chess" in m["id"] for m in g["members"])]
    assert expected and [g["group"] for g in shown_groups(browser)] == expected
    for field, text in ((box, ""), (browser.find_element(By.ID, "min"), "0.95")):
        field.send_keys(Keys.CONTROL, "a")  # (as a user does: clear() fires no input event)
        field.send_keys(Keys.DELETE, text)
    expected = [g["group"] for g in sample["groups"] if g["min_jaccard"] >= 0.95]
    assert 0 < len(expected) < len(sample["groups"])
    assert [g["group"] for g in shown_groups(browser)] == expected
    browser.find_element(By.CSS_SELECTOR, "th[data-key=size] button").click()
    by_size = sorted((g for g in sample["groups"] if g["min_jaccard"] >= 0.95), key=lambda g: (g["size"], g["group"]))
    assert [g["group"] for g in shown_groups(browser)] == [g["group"] for g in by_size]
    assert browser.find_element(By.CSS_SELECTOR, "th[data-key=size]").get_attribute("aria-sort") == "ascending"


def test_pair_view_by_keyboard_shows_both_texts_and_their_scores(browser, sample, tmp_path):
    open_page(browser, sample["report"])
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys("/")
    assert browser.switch_to.active_element.get_attribute("id") == "filter"
    group = next(g for g in sample["groups"] if any("one_word" in m["id"] for m in g["members"]))
    keeper = group["keeper"]
    member = next(m["id"] for m in group["members"][1:] if "one_word" in m["id"] or "one_word" in keeper)
    button = browser.execute_script("""return Array.from(document.querySelectorAll('tr.member'))
        .find(r => r.cells[5].textContent === arguments[0]).querySelector('button')""", member)
    # Tab from the filter reaches the button: every control is in the tab order
    for _ in range(60):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.switch_to.active_element == button:
            break
    assert browser.switch_to.active_element == button
    button.send_keys(Keys.ENTER)
    assert browser.find_element(By.ID, "pair").is_displayed()
    assert browser.find_element(By.ID, "name-a").text == f"A: {keeper}"
    text_a = browser.execute_script("return document.getElementById('text-a').textContent")
    assert text_a == Path(keeper).read_text(encoding="utf-8")  # the original text, whole
    view = html.pair_view(keeper, member, keeper, member, html.ShingleParams())
    scores = browser.find_element(By.ID, "scores").text
    assert f"exact Jaccard {view.scores['jaccard']:.4f}" in scores
    assert f"containment A in B {view.scores['containment_a_in_b']:.4f}" in scores
    assert f"shingles A {view.scores['shingles_a']}, B {view.scores['shingles_b']}" in scores
    # the marks: underlined (not colour alone), reachable by keyboard, each leading to its passage in B
    marks = browser.find_elements(By.CSS_SELECTOR, "#text-a mark")
    assert len(marks) == len(view.peers_a) > 1
    assert "underline" in marks[0].value_of_css_property("text-decoration")
    marks[0].send_keys(Keys.ENTER)
    peer = browser.switch_to.active_element
    assert peer.get_attribute("id") == f"pb{view.peers_a[0]}"
    marks[0].send_keys("n")
    assert browser.switch_to.active_element == marks[1]
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    assert not browser.find_element(By.ID, "pair").is_displayed()
    assert browser.switch_to.active_element == button  # focus back where the view was opened
    shot = tmp_path / "pair.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_many_groups_are_paged_and_n_turns_the_page(browser, tmp_path):
    groups = [{"type": "group", "group": i, "keeper": f"k{i}.txt", "size": 2, "min_jaccard": 0.9, "max_jaccard": 0.9,
               "pairwise": "all pairs", "anchored": False,
               "members": [{"id": f"k{i}.txt", "role": "keeper", "jaccard": 1.0, "reference": False},
                           {"id": f"d{i}.txt", "role": "duplicate", "jaccard": 0.9, "reference": False}]}
              for i in range(1, 121)]
    page = tmp_path / "many.html"
    page.write_text(html.render(html.ReportData("many", [], {}, groups_json=json.dumps(groups))), encoding="utf-8")
    open_page(browser, page)
    assert [g["group"] for g in shown_groups(browser)] == list(range(1, 51))
    browser.find_element(By.TAG_NAME, "body").send_keys("n")
    assert [g["group"] for g in shown_groups(browser)] == list(range(51, 101))
    assert browser.find_element(By.ID, "page").text == "page 2 of 3"
    shot = tmp_path / "many.png"
    assert browser.save_screenshot(str(shot))


def test_the_report_of_one_pair_opens_on_its_pair_view(browser, sample, tmp_path):
    a, b = sample["docs"] / "lighthouses_original.txt", sample["docs"] / "lighthouses_one_word.txt"
    out = tmp_path / "pair.html"
    assert CliRunner().invoke(cli, ["compare", str(a), str(b), "--report", str(out)]).exit_code == 0
    open_page(browser, out)
    assert browser.find_element(By.ID, "pair").is_displayed()
    assert browser.execute_script("return document.getElementById('text-b').textContent") == b.read_text("utf-8")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#text-a mark")) == 2  # either side of the changed word
    assert len(browser.find_elements(By.CSS_SELECTOR, "#text-b mark.alt")) == 1
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
