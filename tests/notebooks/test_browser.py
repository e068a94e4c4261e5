"""End to end in a real browser, as a new user meets it (slow; issue 26, "Done when").

A fresh virtualenv holds exactly the README's notebook install, ``pip install
"porting-kit[torch,audio,notebooks]"`` (the wheel built from this checkout; ``torch==2.13.0``
as the README pins it), cached under ``~/.cache/porting-kit/notebook-venv`` (``$PK_NOTEBOOK_VENV``)
and reused while the extras it was built for are unchanged (the wheel itself is reinstalled
every run). ``jupyter lab`` of that venv starts on 127.0.0.1 (a free port, a token,
``--no-browser``) over a folder filled by ``porting-kit notebooks``; Debian's
``/usr/bin/chromium``, driven by Playwright's Python API (never a downloaded browser), opens
each walkthrough that exists there in a new empty profile, runs all cells from the Run menu,
waits for every cell to finish and saves. Then it reopens the saved notebook in a new page and
finds no error output and no "Error displaying widget" note. Walkthrough 01 also shows its
reports as HTML tables and a plot. Screenshots are kept in ``$PK_ARTIFACTS`` (default: the test's
tmp_path). JupyterLab is stopped at the end whatever happened (SIGTERM, then SIGKILL after 10 s).
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
#: The README's notebook install (README "Walkthroughs"): these extras, nothing else.
EXTRAS = ("torch", "audio", "notebooks")
NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
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
RUN_TIMEOUT_S = 900
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


def _venv_key() -> str:
    """What the cached venv was built for: the extras' requirements (the wheel is reinstalled anyway)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return hashlib.sha256(json.dumps([extras[e] for e in EXTRAS]).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def notebook_venv(tmp_path_factory) -> Path:
    """A venv with exactly ``porting-kit[torch,audio,notebooks]`` (the wheel of this checkout)."""
    venv = Path(os.environ.get("PK_NOTEBOOK_VENV") or Path.home() / ".cache" / "porting-kit" / "notebook-venv")
    dist = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
                   check=True, env=env, timeout=600)
    wheel = next(dist.glob("porting_kit-*.whl"))
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    if not (ready.is_file() and ready.read_text() == _venv_key() and python.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0",
                               f"{wheel}[{','.join(EXTRAS)}]"], env=env, capture_output=True, text=True,
                              timeout=1800)
        if proc.returncode != 0:
            pytest.skip(f"cannot build the notebook venv: {proc.stderr.strip()[-300:]}")
        ready.write_text(_venv_key())
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, env=env, timeout=600)
    return venv


@pytest.fixture(scope="module")
def lab(notebook_venv, tmp_path_factory):
    """A JupyterLab server of the notebook venv over a copy of the walkthroughs: ``(base url, token, root)``."""
    tmp_path = tmp_path_factory.mktemp("lab")
    python = notebook_venv / "bin" / "python"
    root = tmp_path / "walk"
    subprocess.run([str(notebook_venv / "bin" / "porting-kit"), "notebooks", str(root)], check=True,
                   capture_output=True, timeout=120)
    settings = tmp_path / "lab-settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "PYTHONPATH")}
    env.update(JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), PATH=f"{notebook_venv / 'bin'}:{env.get('PATH', '')}")
    port, token = _free_port(), os.urandom(16).hex()
    log_path = tmp_path / "jupyter.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [str(python), "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
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


WIDGET_ERROR = ("Error displaying widget", "model not found")


def _url(base: str, token: str, name: str) -> str:
    """The notebook alone in a workspace of its own, reset: no tab of another walkthrough is restored
    (Run All Cells acts on the active tab)."""
    return f"{base}/lab/workspaces/{Path(name).stem}/tree/{name}?token={token}&reset"


def _run_all(page, base: str, token: str, name: str, n_code: int) -> None:
    page.goto(_url(base, token, name), timeout=120_000)
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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_walkthrough_runs_saves_and_reopens_clean_in_jupyterlab(lab, tmp_path, name):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    base, token, root = lab
    if not (root / name).is_file():
        pytest.skip(f"{name} is not shipped in the wheel")
    stem = Path(name).stem
    artifacts = Path(os.environ.get("PK_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    n_code = sum(c["cell_type"] == "code" for c in json.loads((root / name).read_text())["cells"])
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            _run_all(page, base, token, name, n_code)
            if name.startswith("01_"):
                reports = page.locator(".jp-OutputArea-output .porting-kit-report")
                assert reports.count() >= 2, "the reports were not rendered as HTML"
                reports.first.scroll_into_view_if_needed()
                page.screenshot(path=str(artifacts / f"jupyterlab_{stem}_report.png"))
                images = page.locator(".jp-OutputArea-output img")
                assert images.count() >= 1, "no plot image was rendered"
            page.keyboard.press("Control+s")
            page.wait_for_function(
                "() => !document.querySelector('.jp-mod-dirty')", timeout=60_000, polling=500)
            page.screenshot(path=str(artifacts / f"jupyterlab_{stem}_ran.png"))
            # reopen the saved notebook in a fresh page: what a user sees the next day
            page.close()
            again = context.new_page()
            again.goto(_url(base, token, name), timeout=120_000)
            again.wait_for_selector(".jp-Notebook .jp-Cell .jp-OutputArea-output", timeout=120_000)
            again.wait_for_timeout(3000)  # widget views resolve (or fail) asynchronously
            text = again.locator(".jp-Notebook").inner_text()
            again.screenshot(path=str(artifacts / f"jupyterlab_{stem}_reopened.png"))
            shown = [w for w in WIDGET_ERROR if w in text]
            assert not shown, f"{name} reopened shows {shown}"
            assert again.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
                                 ' .jp-RenderedText:has-text("Traceback")').count() == 0
        except Exception:
            for p in context.pages:
                p.screenshot(path=str(artifacts / f"jupyterlab_{stem}_failure.png"))
            raise
        finally:
            context.close()
    saved = json.loads((root / name).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell did not run"
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    widgets = [o for c in code for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not widgets, f"{name} saved {len(widgets)} widget view(s) whose state a reopened notebook lacks"
    if not name.startswith("00_"):
        assert any("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    shutil.copy(root / name, artifacts / f"jupyterlab_{stem}_executed.ipynb")
