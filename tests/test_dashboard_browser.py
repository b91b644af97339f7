"""The dashboard in a real browser: headless Debian Chromium driven by Selenium.

Starts ``abm dashboard RUN --port P`` on a small run, searches for an applicant, opens its
timeline and checks that the events on the page are exactly that applicant's rows of
events.parquet. A screenshot lands in ``outputs/dashboard-timeline.png``. Needs the system
``chromium`` and ``chromedriver`` (``make install`` puts them there with apt); without them
the test skips and says so. Selenium is given the driver's path, so it never downloads one.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, SCENARIOS

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1300")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
    reason="the browser test needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
           "`make install` installs them with apt-get where apt is available")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"dashboard exited with {server.returncode}: {server.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"dashboard did not answer at {url} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    scenario = load_scenario(SCENARIOS / "eutopia.yaml", ["population.n_male=300", "population.n_female=300",
                                                          "episodes.count=5", "arrivals.base_intercept=10.0"])
    folder, _ = run_to_folder(scenario, tmp_path_factory.mktemp("browser"))
    return folder


def _serve(*args: str):
    """``abm dashboard ARGS --port P`` in a subprocess: yields its URL, stops it afterwards."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "abm.cli", "dashboard", *args, "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", server)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def dashboard(run_dir):
    yield from _serve(str(run_dir))


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("selenium", reason="selenium is installed by `make install` (setup.cfg)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="abm-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _expected_rows(events: pd.DataFrame) -> list[list[str]]:
    """events.parquet rows as the page prints them: 4 decimals, NaN as an empty cell."""
    def num(v) -> str:
        return "" if pd.isna(v) else f"{v:.4f}"

    return [[f"{r.time:.4f}", str(r.episode), str(r.kind), num(r.amount), num(r.wealth_after), num(r.decision_prob)]
            for r in events.itertuples(index=False)]


def test_search_open_timeline_and_compare_with_the_event_log(dashboard, browser, run_dir):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    agents = pd.read_parquet(run_dir / "agents.parquet")
    agent_id = int(agents["approvals"].idxmax())  # the applicant with the longest history
    from selenium.common.exceptions import StaleElementReferenceException

    # Solara re-renders tables after the counters update: read them inside waits that retry
    # when an element goes stale, and compare once the page has settled on the expected rows.
    wait = WebDriverWait(browser, 90, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(dashboard)
    tab = wait.until(lambda d: [t for t in d.find_elements(By.CSS_SELECTOR, ".v-tab") if t.text.upper() == "APPLICANTS"]
                     or None)[0]
    assert len(browser.find_elements(By.TAG_NAME, "img")) >= 6  # the group-metric panels
    tab.click()
    search = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".abm-search input") or None)[0]
    search.send_keys(str(agent_id))
    time.sleep(0.3)  # let the field take the text before Enter commits it
    search.send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".abm-count").text == "1 applicant matches")
    def agent_rows(d):
        return [r.get_attribute("data-agent") for r in d.find_elements(By.CSS_SELECTOR, "table.abm-applicants tbody tr")]

    wait.until(lambda d: agent_rows(d) == [str(agent_id)])
    assert agent_rows(browser) == [str(agent_id)]
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f".abm-open-{agent_id}")).click()
    every = pd.read_parquet(run_dir / "events.parquet")
    expected = _expected_rows(every[every["agent_id"] == agent_id])
    assert len(expected) >= 3

    def timeline(d):
        return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                for row in d.find_elements(By.CSS_SELECTOR, "table.abm-timeline tbody tr")]

    try:  # settle: the table is complete once it shows as many rows as the log holds
        wait.until(lambda d: len(timeline(d)) == len(expected))
    except Exception:
        pass  # fall through to the assertion, which shows the difference
    assert timeline(browser) == expected
    out = ROOT / "outputs"
    out.mkdir(exist_ok=True)
    timeline = browser.find_element(By.CSS_SELECTOR, "table.abm-timeline")
    browser.execute_script("arguments[0].scrollIntoView({block: 'end'});", timeline)
    assert browser.save_screenshot(str(out / "dashboard-timeline.png"))
    assert (out / "dashboard-timeline.png").stat().st_size > 10_000


@pytest.mark.slow

def _live_controls(browser):
    """The live view's episode counter text (a function of the driver) and its buttons by label."""
    from selenium.webdriver.common.by import By

    def counter(d) -> str:
        from selenium.common.exceptions import StaleElementReferenceException

        found = d.find_elements(By.CSS_SELECTOR, ".abm-live-episode")
        try:
            return found[0].text if found else ""
        except StaleElementReferenceException:  # re-rendered between find and read: read again next poll
            return ""

    def button(label: str):
        return [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip().upper() == label][0]

    return counter, button


def test_live_view_steps_and_plays_to_the_last_episode(browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = _serve("--live", str(SCENARIOS / "eutopia.yaml"), "--set", "population.n_male=300",
                    "--set", "population.n_female=300", "--set", "episodes.count=4")
    url = next(server)
    try:
        wait = WebDriverWait(browser, 90, poll_frequency=0.2)
        browser.get(url)

        counter, button = _live_controls(browser)

        wait.until(lambda d: counter(d).startswith("Episode 0 of 4"))
        button("STEP").click()
        wait.until(lambda d: counter(d).startswith("Episode 1 of 4 (3 to go)"))
        button("▶").click()
        wait.until(lambda d: counter(d).startswith("Episode 4 of 4 (finished)"))
        assert "simulated time 40" in counter(browser)
        wait.until(lambda d: not button("STEP").is_enabled())
    finally:
        server.close()


# A page that tries to open the dashboard's kernel channel and reports how it went. The
# refused handshake (HTTP 403) shows up in the browser as a close with code 1006.
OPEN_WEBSOCKET = """
const done = arguments[arguments.length - 1];
let opened = false;
const ws = new WebSocket(arguments[0]);
ws.onopen = () => { opened = true; done("open"); ws.close(); };
ws.onclose = (e) => { if (!opened) done("closed " + e.code); };
setTimeout(() => done("no answer"), 20000);
"""


@pytest.fixture
def foreign_page():
    """A tiny page served by python's http.server on another loopback port (another origin)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!doctype html><title>foreign</title><p id='foreign'>another site</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_foreign_page_cannot_open_the_kernel_channel_but_the_dashboard_still_works(dashboard, browser,
                                                                                      foreign_page):
    import uuid
    from urllib.parse import urlsplit

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = urlsplit(dashboard).port
    browser.set_script_timeout(60)

    def channel(host: str) -> str:
        kernel = uuid.uuid4().hex
        return f"ws://{host}:{port}/jupyter/api/kernels/{kernel}/channels?session_id={kernel}"

    # from a page of another origin (127.0.0.1, another port: same site, so cookies would go along)
    browser.get(foreign_page)
    assert browser.find_element(By.ID, "foreign").text == "another site"
    assert browser.execute_async_script(OPEN_WEBSOCKET, channel("127.0.0.1")) == "closed 1006"
    assert browser.execute_async_script(OPEN_WEBSOCKET, channel("localhost")) == "closed 1006"
    # the same script on the dashboard's own page opens it: the check above could see an open channel
    browser.get(dashboard)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    wait.until(lambda d: [t for t in d.find_elements(By.CSS_SELECTOR, ".v-tab") if t.text.upper() == "APPLICANTS"]
               or None)
    assert len(browser.find_elements(By.TAG_NAME, "img")) >= 6  # the page rendered over its own channel
    assert browser.execute_async_script(OPEN_WEBSOCKET, channel("127.0.0.1")) == "open"
    assert browser.execute_async_script(OPEN_WEBSOCKET, channel("localhost")) == "closed 1006"  # other origin


# -- interactive figures (issue 21) -----------------------------------------------------------
@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    """2 policies x 2 seeds of a 2 x 200-applicant Eutopia market, 3 episodes each."""
    from abm.study import run_study, study_from_dict

    doc = {"study": {"name": "figs", "seed": 5, "episodes": 3, "seeds": 2},
           "base": str(SCENARIOS / "eutopia.yaml"),
           "overrides": {"population.n_male": 200, "population.n_female": 200, "arrivals.base_intercept": 10.0},
           "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}]}
    folder = tmp_path_factory.mktemp("figs") / "figs"
    run_study(study_from_dict(doc, "figs"), folder, workers=0, quiet=True)
    return folder


def _css(driver, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def _chart_texts(driver, css: str) -> list[str]:
    """The text of a Vega chart's SVG (its title, axis titles, legend)."""
    return [t.text for t in _css(driver, f"{css} svg text")]


def _pick(driver, wait, picker_css: str, option: str) -> None:
    """Choose ``option`` in the Vuetify select with class ``picker_css``."""
    wait.until(lambda d: _css(d, f"{picker_css} .v-select__slot") or None)[0].click()
    wait.until(lambda d: [i for i in _css(d, ".menuable__content__active .v-list-item")
                          if i.text.strip() == option] or None)[0].click()


def test_study_view_switches_metric_shows_hovered_values_and_links_runs(study_dir, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    server = _serve(str(study_dir))
    url = next(server)
    try:
        wait = WebDriverWait(browser, 120, poll_frequency=0.3, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(url)
        # the interactive chart (rendered by the Vega builds solara-assets ships: no internet needed)
        wait.until(lambda d: "mean wealth per group" in _chart_texts(d, ".abm-metric"))
        texts = _chart_texts(browser, ".abm-metric")
        assert "mean wealth ($K)" in texts and "episode" in texts  # labelled axes, with units
        assert any("(n=2)" in t for t in texts)  # n in the legend
        _pick(browser, wait, ".abm-metric-picker", "wealth gap")  # the metric switch changes the chart
        wait.until(lambda d: "wealth gap" in _chart_texts(d, ".abm-metric"))
        assert "mean wealth per group" not in _chart_texts(browser, ".abm-metric")
        assert "mean wealth M - F ($K)" in _chart_texts(browser, ".abm-metric")
        # hovering a point shows its values under the chart
        point = wait.until(lambda d: _css(d, ".abm-metric svg .mark-symbol path") or None)[0]
        ActionChains(browser).move_to_element(point).perform()
        wait.until(lambda d: "value =" in _css(d, ".abm-metric-hover")[0].text)
        assert "(n=2)" in _css(browser, ".abm-metric-hover")[0].text
        # a configuration's run link opens that run in the Runs tab
        link = wait.until(lambda d: _css(d, "table.abm-study-final .abm-run-link") or None)[1]  # first row, r1
        assert link.text.strip().lower() == "r1"
        link.click()
        wait.until(lambda d: [t for t in _css(d, ".v-tab--active") if t.text.upper() == "RUNS"] or None)
        first = sorted(p.name for p in (study_dir / "runs").iterdir() if p.name.startswith("approve_all"))
        wait.until(lambda d: first[1] in " ".join(e.text for e in _css(d, ".abm-run-select")))
        wait.until(lambda d: f"Run {first[1]}" in " ".join(e.text for e in _css(d, "h3")))
    finally:
        server.close()


def test_live_view_has_the_scenarios_parameters_and_draws_from_the_first_step(browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = _serve("--live", str(SCENARIOS / "eutopia.yaml"), "--set", "population.n_male=200",
                    "--set", "population.n_female=200", "--set", "episodes.count=3")
    url = next(server)
    try:
        wait = WebDriverWait(browser, 120, poll_frequency=0.3, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(url)

        counter, button = _live_controls(browser)

        wait.until(lambda d: counter(d).startswith("Episode 0 of 3"))
        wait.until(lambda d: "arrivals.base_slope = 0.02" in counter(d))  # the values in use are shown
        sidebar = browser.find_element(By.CSS_SELECTOR, ".v-navigation-drawer").text
        for label in ("seed", "policy", "arrivals.base_slope", "arrivals.excitation", "arrivals.decay"):
            assert label in sidebar  # the scenario's main parameters as controls
        assert browser.find_elements(By.CSS_SELECTOR, ".abm-live-empty-0")  # no empty axes before a step
        assert not browser.find_elements(By.CSS_SELECTOR, ".abm-live-plot svg")
        button("STEP").click()
        wait.until(lambda d: counter(d).startswith("Episode 1 of 3"))
        # one episode: the plots draw it (points), with labelled axes
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".abm-live-plot svg .mark-symbol path")) >= 2)
        assert "mean wealth ($K)" in _chart_texts(browser, ".abm-live-plot-0")
        # a control: another policy, applied by Reset
        _pick(browser, wait, ".v-navigation-drawer .v-select", "random")
        button("RESET").click()
        wait.until(lambda d: "policy random" in counter(d) and counter(d).startswith("Episode 0 of 3"))
    finally:
        server.close()


@pytest.fixture(scope="module")
def cross_dir(tmp_path_factory):
    """A study across two families: lending (credit_score) and infectious disease."""
    from abm.study import run_study, study_from_dict

    doc = {"study": {"name": "cross", "seed": 5, "seeds": 2},
           "base": str(SCENARIOS / "lending-credit.yaml"),
           "groups": {"lending": {"overrides": {"population.size": 100, "episodes.count": 2, "episodes.horizon": 100},
                                  "policies": [{"name": "max_util"}, {"name": "approve_all"}]},
                      "infectious": {"base": str(SCENARIOS / "infectious-disease.yaml"),
                                     "overrides": {"episodes.count": 3},
                                     "policies": [{"name": "approve_all"}, {"name": "most_connected"}]}}}
    folder = tmp_path_factory.mktemp("cross") / "cross"
    run_study(study_from_dict(doc, "cross"), folder, workers=0, quiet=True)
    return folder


def test_a_study_across_families_shows_each_environment_on_its_own_axes(cross_dir, browser):
    """Its configurations table, metric figures and frontier each have an environment picker: one
    table or axis never pools lending's approve_all with infectious disease's."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    server = _serve(str(cross_dir))
    url = next(server)
    try:
        wait = WebDriverWait(browser, 120, poll_frequency=0.3, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(url)
        wait.until(lambda d: any(t.startswith("lending: ") for t in _chart_texts(d, ".abm-metric")))

        def rows(d) -> dict:  # the configurations table: label -> its run links
            return {r.get_attribute("data-config"): len(r.find_elements("css selector", ".abm-run-link"))
                    for r in _css(d, "table.abm-study-final tbody tr")}

        assert rows(browser) == {"max_util": 2, "approve_all": 2}  # lending's alone, each with its own 2 runs
        _pick(browser, wait, ".abm-config-env", "infectious")
        wait.until(lambda d: rows(d) == {"approve_all": 2, "most_connected": 2})
        wait.until(lambda d: any(t.startswith("infectious: ") for t in _chart_texts(d, ".abm-metric")))
        wait.until(lambda d: [t for t in _css(d, ".v-tab") if t.text.upper() == "FRONTIER AND RATES"] or None)[0].click()
        wait.until(lambda d: _css(d, ".abm-frontier-env") or None)
        wait.until(lambda d: "max_util" in " ".join(_chart_texts(d, ".abm-frontier")))
        assert "most_connected" not in " ".join(_chart_texts(browser, ".abm-frontier"))
        _pick(browser, wait, ".abm-frontier-env", "infectious")
        wait.until(lambda d: "most_connected" in " ".join(_chart_texts(d, ".abm-frontier")))
        assert "max_util" not in " ".join(_chart_texts(browser, ".abm-frontier"))
    finally:
        server.close()
