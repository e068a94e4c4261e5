"""Tables a user reads back: example names and quality figures are never cut or folded (issue 26 point 3)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from porting_kit.report.render import print_quality_table

QUALITY = {"prompts": {"p01": "a", "p02": "b"}, "takes": 3, "sample_rates": {"reference": 22050, "candidate": 22050},
           "metrics": [{"metric": "duration", "unit": "ratio", "reference_spread": 0.0412, "candidate": 0.0718,
                        "threshold": 0.132, "verdict": "pass", "worst_prompt": "p01", "note": ""},
                       {"metric": "mcd", "unit": "dB", "reference_spread": 14.48, "candidate": 95.8,
                        "threshold": 23.72, "verdict": "fail", "worst_prompt": "p02", "note": ""}],
           "cannot_see": ["prosody beyond MOS"], "hooks": "--asr module:function"}


@pytest.mark.parametrize("width", [20, 30, 50, 60, 80, 200])
@pytest.mark.parametrize("terminal", [True, False])
def test_quality_figures_are_whole_at_every_width(width, terminal):
    buf = io.StringIO()
    print_quality_table(QUALITY, Console(file=buf, width=width, force_terminal=terminal, color_system=None))
    text = buf.getvalue()
    for token in ("0.0718", "0.132", "95.8", "23.72", "duration (ratio)", "PASS", "FAIL"):
        assert token in text, (width, terminal, text)


@pytest.mark.parametrize("columns", ["30", "60", "200"])
def test_examples_names_are_whole_in_a_pipe_at_any_width(columns, capsys, monkeypatch):
    from porting_kit.cli import main
    from porting_kit.spec import list_examples

    monkeypatch.setenv("COLUMNS", columns)
    assert main(["examples"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {line.split("  ", 1)[0] for line in lines[1:]}
    assert {name for name, _ in list_examples()} <= names
