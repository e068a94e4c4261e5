"""The terminal report: codes and module names whole at any width (issue 26, point 3)."""

import io
import subprocess
import sys

import pytest
from rich.console import Console

from porting_kit.report.findings import Finding, Report, Where
from porting_kit.report.render import print_report

LONG_REF = "model.decoder.layers.11.self_attention.linear_qkv.layer_norm_weight_adapter"
LONG_CAND = "talker.transformer.blocks.11.attention.fused_qkv_projection.norm"


def _report() -> Report:
    return Report(command="check", findings=[
        Finding(check="config", code="config.ok", status="pass", message="5 static keys agree."),
        Finding(check="parity", code="parity.first_divergence", status="fail",
                message="First divergence: " + "the outputs differ by a lot " * 8,
                where=Where(reference=LONG_REF, candidate=LONG_CAND), hint="Compare the two modules."),
        Finding(check="tp", code="tp.skipped", status="skip", message="runs with --tp N"),
    ])


def _render(width: int, terminal: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None, emoji=False)
    print_report(_report(), console)
    return buf.getvalue()


@pytest.mark.parametrize("width,terminal", [(20, False), (40, False), (80, False), (200, False),
                                            (30, True), (60, True), (80, True), (240, True)])
def test_codes_and_module_names_are_whole_at_any_width(width, terminal):
    out = _render(width, terminal)
    for whole in ("parity.first_divergence", "config.ok", "tp.skipped", LONG_REF, LONG_CAND):
        assert whole in out, (width, terminal, out)
    assert "…" not in out


def test_not_a_terminal_gets_one_block_per_finding():
    out = _render(80, False)
    lines = out.splitlines()
    assert "FAIL parity.first_divergence" in lines
    assert f"  where: ref: {LONG_REF}; cand: {LONG_CAND}" in lines
    assert "  hint: Compare the two modules." in lines
    assert "┃" not in out and "│" not in out  # no table


def test_wide_terminal_gets_a_table_narrow_one_blocks():
    assert "│" in _render(240, True)
    narrow = _render(60, True)
    assert "│" not in narrow and "FAIL parity.first_divergence" in narrow.splitlines()


def test_pass_rows_have_a_where():
    out = _render(80, False)
    blocks = out.split("PASS config.ok", 1)[1].splitlines()
    assert blocks[2] == "  where: (everything checked)"
    wide = _render(240, True)
    row = next(line for line in wide.splitlines() if "config.ok" in line)
    assert "(everything checked)" in row


@pytest.mark.slow
def test_cli_check_piped_keeps_codes_whole():
    """``porting-kit check | tee log``: stdout is a pipe, Rich would default to 80 columns."""
    proc = subprocess.run([sys.executable, "-m", "porting_kit.cli", "check", "--example", "tts:rope_theta_default",
                           "--only", "config,rope"], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "COLUMNS": "40"})
    assert proc.returncode == 1, proc.stderr
    assert "FAIL rope.theta_mismatch" in proc.stdout.splitlines()
    assert "…" not in proc.stdout
