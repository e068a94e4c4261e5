"""End to end in a real browser: JupyterLab serves a copied walkthrough, headless Chromium runs it (slow).

``jupyter lab`` starts on 127.0.0.1 (a free port, a token, ``--no-browser``) over a temporary
folder filled by :func:`porting_kit.copy_notebooks`; Debian's ``/usr/bin/chromium``, driven by
Playwright's Python API (never a downloaded browser), opens walkthrough 01 in a new empty profile,
runs all cells from the Run menu and waits for every cell to finish. Asserted: at least one
rendered plot ``<img>`` in an output, and no error output (read from the notebook as the browser
saved it), and the reports rendered as HTML tables. Screenshots are kept in ``$PK_ARTIFACTS`` (default: the test's tmp_path). JupyterLab is
stopped at the end whatever happened (SIGTERM, then SIGKILL after 10 s).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import porting_kit

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = "01_layer_parity.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: JupyterLab user settings for the test: every cell stays in the DOM (no windowing), no news or
#: update checks (no network), no autosave racing the explicit save.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}
RUN_TIMEOUT_S = 540
#: The status bar reads "Python 3 (ipykernel) | Idle" once a kernel is connected and idle.
_KERNEL_IDLE = "() => /\\(ipykernel\\) \\| Idle/.test(document.querySelector('#jp-main-statusbar')?.textContent || '')"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:]
            raise AssertionError(f"jupyter lab exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"jupyter lab did not answer {url} within {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a copy of the walkthroughs: ``(base url, token, root)``."""
    if importlib_missing("jupyterlab"):
        pytest.skip("jupyterlab is not installed (the notebooks extra)")
    root = tmp_path / "walk"
    porting_kit.copy_notebooks(root)
    settings = tmp_path / "lab-settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    port, token = _free_port(), os.urandom(16).hex()
    log_path = tmp_path / "jupyter.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly", *(["--allow-root"] if os.geteuid() == 0 else [])],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc, log_path)
        yield base, token, root
    finally:
        _stop(proc)
        log.close()


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def test_walkthrough_01_runs_in_jupyterlab_in_chromium(lab, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    base, token, root = lab
    artifacts = Path(os.environ.get("PK_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    n_code = sum(c["cell_type"] == "code" for c in json.loads((root / NOTEBOOK).read_text())["cells"])
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", timeout=120_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            # the kernel has started (the status bar names it and says Idle), then Run > Run All Cells
            page.wait_for_function(_KERNEL_IDLE, timeout=180_000, polling=500)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            # every code cell has run: its prompt holds a number ("[12]:"), none is busy ("[*]:")
            page.wait_for_function(
                """n => { const p = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
                                .map(e => e.textContent.trim());
                          return p.length === n && p.every(t => /^\\[\\d+\\]:$/.test(t)); }""",
                arg=n_code, timeout=RUN_TIMEOUT_S * 1000, polling=1000)
            page.wait_for_function(_KERNEL_IDLE, timeout=60_000, polling=500)
            reports = page.locator(".jp-OutputArea-output .porting-kit-report")
            assert reports.count() >= 2, "the reports were not rendered as HTML"
            reports.first.scroll_into_view_if_needed()
            page.screenshot(path=str(artifacts / "jupyterlab_01_report.png"))
            images = page.locator(".jp-OutputArea-output img")
            assert images.count() >= 1, "no plot image was rendered"
            images.first.scroll_into_view_if_needed()
            page.screenshot(path=str(artifacts / "jupyterlab_01_plot.png"))
            reports.nth(1).scroll_into_view_if_needed()
            page.screenshot(path=str(artifacts / "jupyterlab_01_first_divergence.png"))
            page.keyboard.press("Control+s")
            page.wait_for_function(
                "() => !document.querySelector('.jp-mod-dirty')", timeout=60_000, polling=500)
        except Exception:
            page.screenshot(path=str(artifacts / "jupyterlab_01_failure.png"))
            raise
        finally:
            context.close()
    saved = json.loads((root / NOTEBOOK).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell did not run"
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{errors[0]['ename']}: {errors[0]['evalue']}"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    shutil.copy(root / NOTEBOOK, artifacts / "jupyterlab_01_executed.ipynb")
