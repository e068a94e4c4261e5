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


@pytest.mark.slow
def test_check_overhead_cpu_time_clock_times_both_terms_in_cpu_seconds():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_overhead.py"), "--quick",
                           "--no-memory", "--cpu-time", "--repeats", "2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "clock=cpu" in proc.stdout
    assert float(re.search(r"^overhead_ratio=([\d.]+)$", proc.stdout, re.M).group(1)) > 0
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_overhead.py"), "--quick",
                          "--cpu-time", "--device", "cuda"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "--cpu-time" in bad.stderr
