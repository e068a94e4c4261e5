"""The benchmark scripts run and print their figures (correctness, not timing)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_check_overhead_quick_prints_both_ratios():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_overhead.py"), "--quick"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ratio = float(re.search(r"^overhead_ratio=([\d.]+)$", proc.stdout, re.M).group(1))
    depth = float(re.search(r"^depth_memory_ratio=([\d.]+)$", proc.stdout, re.M).group(1))
    assert ratio > 0 and depth > 0
