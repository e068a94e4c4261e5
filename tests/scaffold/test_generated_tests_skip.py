"""Generated tests outside a vLLM-Omni checkout skip with the reason and know their marks (issue 26, point 6)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from scaffold_helpers import make_scaffold


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["two-stage", "single-stage-ar"])
def test_generated_tests_skip_outside_a_checkout(tmp_path, shape):
    out = make_scaffold(tmp_path, shape)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--strict-markers",
         "-W", "error::pytest.PytestUnknownMarkWarning", "tests"],
        cwd=out, env=env, capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    skipped = [line for line in text.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 3, text  # the L1 config test file, the L2/L3 and L4 online files
    assert all("vLLM-Omni checkout" in line for line in skipped), skipped
    assert " passed" in text and "failed" not in text  # the stage-model tests run on CPU from the generated files
    assert "No module named" not in text and "Unknown pytest.mark" not in text
