"""The HTML report in real browsers (issue 21), headless, with nothing downloaded: Debian's Chromium driven by
Selenium through the system's chromedriver, and Debian's Firefox ESR driven through Marionette, its own remote
protocol, by Mozilla's marionette_driver (geckodriver, which Selenium would need, is not packaged by Debian). Every
test runs in both; each browser is skipped, with the reason, where it is missing. .ci/run installs both. One
browser per module: a few seconds to start."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SAMPLE

pytest.importorskip("jinja2", reason="the report needs nearDup[report]")

from nearDup.cli import cli
from nearDup.report import html

CHROMIUM, CHROMEDRIVER, FIREFOX = "/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/firefox"
WIDTH, HEIGHT = 1280, 900
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", f"--window-size={WIDTH},{HEIGHT}")
# Firefox: Marionette on a free port (written to the profile's MarionetteActivePort), content console messages on
# stdout (where the tests read them: Marionette has no log command), and its own background services off.
FIREFOX_PREFS = {"marionette.port": 0, "devtools.console.stdout.content": True,
                 "services.settings.server": "data:,#remote-settings-dummy/v1", "app.normandy.enabled": False,
                 "app.update.disabledForTesting": True, "browser.shell.checkDefaultBrowser": False,
                 "datareporting.policy.dataSubmissionEnabled": False, "toolkit.telemetry.enabled": False,
                 "browser.startup.page": 0, "network.connectivity-service.enabled": False}


class By:  # W3C WebDriver's locator strategies (what selenium's By holds; Marionette takes the same)
    ID, CSS_SELECTOR, TAG_NAME = "id", "css selector", "tag name"


class Keys:  # W3C WebDriver's key codes (selenium's Keys; Marionette's too)
    TAB, ENTER, ESCAPE, CONTROL, DELETE = "\ue004", "\ue007", "\ue00c", "\ue009", "\ue017"


def _missing(*paths: str) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]


def _chromium():
    missing = _missing(CHROMIUM, CHROMEDRIVER)
    if missing:
        pytest.skip(f"no {' and no '.join(missing)}: install Debian's chromium and chromium-driver (as .ci/run does) "
                    f"to run the browser tests in Chromium")
    pytest.importorskip("selenium", reason="the browser tests drive Chromium with selenium (in the test extra)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

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


class _Switch:
    def __init__(self, client):
        self._client = client

    @property
    def active_element(self):
        return self._client.get_active_element()


class Firefox:
    """The few Selenium WebDriver calls these tests make, on a Marionette client (both speak W3C WebDriver's
    commands: the locator strategies and key codes are the same strings)."""

    name = "firefox"

    def __init__(self, client, output: Path):
        self.client, self.output, self._seen = client, output, 0
        self.switch_to = _Switch(client)

    def get(self, url: str) -> None:
        self.client.navigate(url)

    def execute_script(self, script: str, *args):
        return self.client.execute_script(script, script_args=list(args), sandbox=None)  # the page's own window

    def find_element(self, by: str, value: str):
        return self.client.find_element(by, value)

    def find_elements(self, by: str, value: str):
        return self.client.find_elements(by, value)

    def save_screenshot(self, path: str) -> bool:
        Path(path).write_bytes(self.client.screenshot(format="binary", full=False))
        return True

    def get_log(self, kind: str) -> list[dict]:
        """"browser": the errors and warnings of pages that Firefox printed since the last call, as Chromium's
        log entries: script errors in a file:// page, and console.error and .warn of a page (printed with their
        text quoted; Firefox's own modules print theirs unquoted, after their name)."""
        assert kind == "browser", "Firefox has no performance log"
        text = self.output.read_text(encoding="utf-8", errors="replace")
        lines, self._seen = text[self._seen:].splitlines(), len(text)
        return [{"level": "SEVERE" if "error" in line.split(":")[0] else "WARNING", "message": line}
                for line in lines if line.startswith(("JavaScript error: file://", "JavaScript warning: file://",
                                                      'console.error: "', 'console.warn: "'))]


def _firefox():
    if _missing(FIREFOX):
        pytest.skip(f"no {FIREFOX}: install Debian's firefox-esr (as .ci/run does) to run the browser tests in "
                    f"Firefox")
    marionette = pytest.importorskip("marionette_driver.marionette",
                                     reason="the browser tests drive Firefox with marionette_driver (in the test "
                                            "extra)")
    profile = Path(tempfile.mkdtemp(prefix="neardup-firefox-"))
    (profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                             for k, v in FIREFOX_PREFS.items()))
    output = profile / "stdout.txt"
    with open(output, "wb") as out:
        process = subprocess.Popen([FIREFOX, "--headless", "--marionette", "--no-remote", "--profile", str(profile)],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        port_file, deadline = profile / "MarionetteActivePort", time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert process.poll() is None, output.read_text(errors="replace")
            assert time.monotonic() < deadline, "Firefox did not open its Marionette port in 60 s"
            time.sleep(0.1)
        client = marionette.Marionette(host="127.0.0.1", port=int(port_file.read_text()))
        client.start_session()
        client.set_window_rect(width=WIDTH, height=HEIGHT)
        try:
            yield Firefox(client, output)
        finally:
            client.delete_session()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module", params=["chromium", "firefox"])
def browser(request):
    yield from (_chromium() if request.param == "chromium" else _firefox())


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
    driver.get_log("browser")  # drop what came before
    if driver.name == "chrome":
        driver.get_log("performance")
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
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    if browser.name != "chrome":
        return  # Marionette has no network log: the Content-Security-Policy forbids requests (test_report.py)
    page = sample["report"].as_uri()
    events = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    requests = [e["params"] for e in events if e["method"] == "Network.requestWillBeSent"]
    assert [r["request"]["url"] for r in requests if r["request"]["url"] == page]  # the log works
    assert [r["request"]["url"] for r in requests if r.get("documentURL") == page and r["request"]["url"] != page] \
        == []


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


def test_the_console_check_sees_a_script_error(browser, tmp_path):
    """The check that a report loads without errors can fail: a page with a script error is seen (in Firefox,
    through its stdout)."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                    '<script>document.body.dataset.ready = "1"; null.x;</script></body></html>', encoding="utf-8")
    open_page(browser, page)
    for _ in range(50):  # (Firefox's output reaches its file a moment later)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            break
        time.sleep(0.1)
    assert len(errors) == 1 and "null" in errors[0]["message"]
