"""Reports and findings render themselves as HTML in JupyterLab (``_repr_html_``); text stays text."""

import re

import numpy as np
import pytest

from porting_kit.report.findings import Finding, Report, Where
from porting_kit.report.html import alignment_html, audio_players, checks_summary_html

FD = {"reference_module": "model.layers.1.self_attn", "candidate_module": "layers.1.attn",
      "metric": {"rel_err": 0.8088, "max_abs": 0.0366, "tolerance": "float32"}, "order": 2}
ROWS = [
    {"order": 0, "reference": "model.embed", "candidate": "embed", "reference_type": "Embedding",
     "candidate_type": "Embedding", "source": "weights", "rel_err": 0.0, "status": "match"},
    {"order": 1, "reference": "model.layers.0", "candidate": "layers.0", "reference_type": "Layer",
     "candidate_type": "Layer", "source": "weights", "rel_err": 1e-7, "status": "match"},
    {"order": 2, "reference": "model.layers.1.self_attn", "candidate": "layers.1.attn",
     "reference_type": "Attn", "candidate_type": "Attn", "source": "parent", "rel_err": 0.81,
     "status": "differs"},
    {"order": 3, "reference": "model.norm", "candidate": "norm", "reference_type": "RMSNorm",
     "candidate_type": "RMSNorm", "source": "weights", "rel_err": 0.5, "status": "differs"},
]


def _report():
    fault = Finding("parity", "parity.first_divergence", "fail", "First divergence at <attn> & co.",
                    {"rel_err": 0.80884850285, "max_abs_index": "(0, 3, 29)", "nan": float("nan")},
                    Where(reference="model.layers.1.self_attn", candidate="layers.1.attn"),
                    hint="Compare <the> two modules")
    return Report("check", [fault, Finding("rope", "rope.skipped", "skip", "no rotary found")],
                  first_divergence=FD, extras={"alignment": ROWS})


def test_report_html_escapes_and_shows_status_findings_and_divergence():
    html = _report()._repr_html_()
    assert "FAIL" in html and "1 fail, 1 skip" in html
    assert "First divergence at &lt;attn&gt; &amp; co." in html and "<attn>" not in html
    assert "fix:</i> Compare &lt;the&gt; two modules" in html
    assert "<code>parity.first_divergence</code>" in html
    assert "0.8088" in html and "0.80884850285" not in html   # evidence rounded to 4 digits
    assert "nan" in html
    assert "<script" not in html


def test_first_divergence_row_is_highlighted_and_only_that_one():
    html = alignment_html(ROWS, FD)
    rows = re.findall(r"<tr style=\"([^\"]*)\">(.*?)</tr>", html)
    assert len(rows) == 4
    bold = [body for style, body in rows if "font-weight:bold" in style]
    assert len(bold) == 1 and "model.layers.1.self_attn" in bold[0] and "first divergence" in bold[0]
    assert rows[0][0] == "" and rows[3][0] != ""          # match plain, later differs tinted
    assert alignment_html([], FD) == ""


def test_a_passing_report_has_no_divergence_box():
    rep = Report("check", [Finding("parity", "parity.ok", "pass", "no fault found")])
    html = rep._repr_html_()
    assert "PASS" in html and "first divergence" not in html and "aligned modules" not in html


def test_text_repr_is_unchanged():
    f = _report().findings[0]
    assert repr(f).startswith("Finding(check='parity', code='parity.first_divergence'")
    assert "<" not in repr(_report()).split("findings=")[0]
    single = f._repr_html_()
    assert "porting-kit-finding" in single and "<details>" not in single   # evidence shown open
    assert "max_abs_index" in single


def test_checks_summary_names_skip_reasons():
    html = checks_summary_html(_report())
    assert re.search(r"<code>parity</code></td><td[^>]*>FAIL</td><td[^>]*>1 fail</td>", html)
    assert re.search(r"<code>rope</code></td><td[^>]*>SKIP</td><td[^>]*>1 skip</td><td[^>]*>"
                     r"no rotary found</td>", html)


def test_audio_players_one_per_clip_and_silence_is_not_an_error():
    pytest.importorskip("IPython")
    players = audio_players({"reference": (np.sin(np.arange(800) / 5.0), 8000),
                             "candidate <served>": (np.zeros((2, 400)), 8000),
                             "empty": (np.zeros(0), 8000)})
    html = players._repr_html_()
    assert html.count("<audio") == 2 and "(no samples)" in html
    assert "candidate &lt;served&gt;" in html and "0.10 s at 8000 Hz" in html
