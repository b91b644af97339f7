"""Regenerate the README's pictures: ``docs/figures/smoke_frontier.png`` and ``docs/dashboard.png``.

    .venv/bin/python docs/figures/screenshots.py            # about a minute on two cores

Runs the smoke study into ``outputs/studies/smoke`` (finished runs are reused), renders its report
(``abm report``) and copies ``report/frontier.png``; then serves the study with ``abm dashboard``,
opens it in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, as the browser
test), hovers a point of the interactive chart and saves the page as ``docs/dashboard.png``.
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

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "scenarios" / "studies" / "smoke.yaml"
FOLDER = ROOT / "outputs" / "studies" / "smoke"


def abm(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "abm.cli", *args], cwd=ROOT, check=True)


def frontier() -> Path:
    abm("study", str(STUDY), "--workers", "0", "--out", str(FOLDER))
    abm("report", str(FOLDER))
    target = ROOT / "docs" / "figures" / "smoke_frontier.png"
    shutil.copyfile(FOLDER / "report" / "frontier.png", target)
    return target


def dashboard() -> Path:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "abm.cli", "dashboard", str(FOLDER), "--port", str(port)],
                              cwd=ROOT)
    profile = tempfile.mkdtemp(prefix="abm-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1050",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = None
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(240):
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        driver.get(url)
        wait = WebDriverWait(driver, 180, poll_frequency=0.3)
        point = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".abm-metric svg .mark-symbol path") or None)
        ActionChains(driver).move_to_element(point[len(point) // 2]).perform()
        wait.until(lambda d: "value =" in d.find_element(By.CSS_SELECTOR, ".abm-metric-hover").text)
        time.sleep(1.0)
        target = ROOT / "docs" / "dashboard.png"
        driver.save_screenshot(str(target))
        return target
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    for path in (frontier(), dashboard()):
        print(f"wrote {path.relative_to(ROOT)}")
