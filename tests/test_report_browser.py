"""The HTML report in a real headless Chromium: it loads with no console errors, every figure renders, the figures'
numbers equal metrics.json, and a screenshot (saved under test-artifacts/) is not blank. A 1,024-GPU, 20-step run's
report stays under 10 MB and renders too.

Chromium is Debian's (/usr/bin/chromium; .ci/run installs it), driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: NUL-separated JSON on file descriptors 3 and 4), so no driver or browser download is needed.
In CI the browser tests never skip.
"""
from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import re
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rlsim.cli import main
from rlsim.report.figures import MAX_TIMELINE_ROWS
from tests.sim_scenarios import scenario_yaml

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
FIGURES = ("timeline", "gpu_time", "steps", "lengths", "engines", "staleness")
TIMEOUT_S = 60.0


class DevTools:
    """A headless Chromium and a DevTools-protocol session over its debugging pipe."""

    def __init__(self):
        self.profile = tempfile.TemporaryDirectory(prefix="rlsim-chromium-", ignore_cleanup_errors=True)
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def on_fds_3_and_4():
            # Chromium reads commands on fd 3 and writes replies on fd 4. Duplicate above 10 first so that moving one
            # pipe end onto 3 or 4 never closes the other.
            read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
             f"--user-data-dir={self.profile.name}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4, to_browser_r, from_browser_w), preexec_fn=on_fds_3_and_4, process_group=0,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            self.events.append(self._receive())

    def _receive(self) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"Chromium sent nothing for {TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (status {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def close(self) -> None:
        # Chromium's renderer and helper processes are in the group it leads; end them all before removing the profile.
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    devtools = DevTools()
    yield devtools
    devtools.close()


def console_errors(events: list[dict], session: str) -> list[str]:
    errors = []
    for event in events:
        if event.get("sessionId") != session:
            continue
        params = event.get("params", {})
        if event["method"] == "Runtime.exceptionThrown":
            errors.append(json.dumps(params["exceptionDetails"])[:500])
        elif event["method"] == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            errors.append(json.dumps(params["args"])[:500])
        elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(params["entry"]["text"][:500])
    return errors


def render(browser: DevTools, page: Path, artifact: str) -> tuple[list[str], Image.Image, dict]:
    """Open `page`, wait for every figure, screenshot it (saved as test-artifacts/<artifact>.png); return the console
    errors, the screenshot and the GPU-time figure's data as the page holds it."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, session=session)
    browser.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired", session)
    deadline = time.monotonic() + TIMEOUT_S
    rendered = 0
    while time.monotonic() < deadline:
        rendered = browser.call("Runtime.evaluate", {
            "expression": "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 ? "
                          "[...document.querySelectorAll('.js-plotly-plot')].filter("
                          "d => d.querySelector('.main-svg') && d._fullLayout).length : 0",
            "returnByValue": True}, session=session)["result"]["value"]
        if rendered == len(FIGURES):
            break
        time.sleep(0.1)
    assert rendered == len(FIGURES), f"{rendered} of {len(FIGURES)} figures rendered"
    gpu_time = json.loads(browser.call("Runtime.evaluate", {
        "expression": "JSON.stringify(document.getElementById('fig-gpu_time').data.map("
                      "t => ({name: t.name, y: Array.from(t.y)})))", "returnByValue": True},
        session=session)["result"]["value"])
    height = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
    shot = browser.call("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": 1400, "height": min(height, 6000), "scale": 1}}, session=session)
    png = base64.b64decode(shot["data"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"{artifact}.png").write_bytes(png)
    errors = console_errors(browser.events, session)
    browser.call("Target.closeTarget", {"targetId": target})
    return errors, Image.open(io.BytesIO(png)).convert("RGB"), {t["name"]: t["y"] for t in gpu_time}


def assert_not_blank(image: Image.Image) -> None:
    inked = int((np.asarray(image).min(axis=2) < 235).sum())
    colours = image.getcolors(maxcolors=1 << 20)
    assert inked > 0.05 * image.width * image.height, "the screenshot is (almost) all white"
    assert colours is None or len(colours) > 50, "the screenshot has too few colours to hold figures"


def run_scenario(folder: Path, text: str) -> Path:
    scenario = folder / "scenario.yaml"
    scenario.write_text(text)
    assert main(["run", str(scenario), "--out", str(folder / "run"), "--json"]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    return run_scenario(tmp_path_factory.mktemp("small"), scenario_yaml(
        mode="disaggregated", rollout_gpus=6, training_gpus=2, schedule="async", staleness=1, steps=4))


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    """1,024 GPUs for 20 steps, cheap to simulate: a small model and few, short responses (one per engine)."""
    return run_scenario(tmp_path_factory.mktemp("big"), scenario_yaml(
        gpus=1024, nodes=128, prompts=32, samples=16, steps=20, mode="disaggregated", rollout_gpus=1016,
        training_gpus=8, response="{kind: lognormal, median_tokens: 60, sigma: 0.8}", max_response=512))


def test_report_loads_without_console_errors_and_matches_metrics(browser, small_run):
    errors, image, gpu_time = render(browser, small_run / "report.html", "report-small")
    assert errors == []
    assert_not_blank(image)
    metrics = json.loads((small_run / "metrics.json").read_text())
    [pool] = metrics["pools"].values()
    assert set(gpu_time) == {label for label, s in pool["gpu_seconds_by_label"].items() if s}
    for label, values in gpu_time.items():
        assert values == [pool["gpu_seconds_by_label"][label]]
    assert sum(v[0] for v in gpu_time.values()) == pytest.approx(sum(metrics["gpu_seconds_by_label"].values()))


def test_big_cluster_report_stays_small_and_downsampled(big_run):
    size = (big_run / "report.html").stat().st_size
    assert size < 10 * 2**20, f"report.html is {size / 2**20:.1f} MiB"
    page = (big_run / "report.html").read_text()
    rows = re.search(r"Timeline: (\d+) of (\d+) GPU groups", page)
    assert rows and MAX_TIMELINE_ROWS // 2 <= int(rows[1]) <= MAX_TIMELINE_ROWS and int(rows[2]) == 1024
    # The training ranks keep rows among a thousand engines (plotly writes "·" as is, or escaped without orjson).
    assert "GPU 1016 · dp0" in page or "GPU 1016 \\u00b7 dp0" in page
    assert "median of 1016 engines" in page


def test_big_cluster_report_renders(browser, big_run):
    errors, image, gpu_time = render(browser, big_run / "report.html", "report-1024-gpus")
    assert errors == []
    assert_not_blank(image)
    metrics = json.loads((big_run / "metrics.json").read_text())
    assert sum(v[0] for v in gpu_time.values()) == pytest.approx(sum(metrics["gpu_seconds_by_label"].values()))
