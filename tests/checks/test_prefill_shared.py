"""The prefill families share the parity pass's forward (issue 13, point 5).

On a clean pair, ``--only parity,rope,norm,config,dtype`` runs each model's forward once:
rope takes layer 0's q/k and cos/sin, norm its norm calls, from the parity pass
(porting_kit/probes/prefill.py), and their screens pass without the expensive diagnosis
(rope's pairing/angle fit, norm's fingerprints). Before that change each family ran its
own forward of both models (3 per side).
"""

from __future__ import annotations

import importlib

import pytest

from porting_kit.context import CheckContext
from porting_kit.load import load_pair
from porting_kit.runner import FAMILIES, parse_only
from porting_kit.spec import load_spec

PREFILL = "parity,rope,norm,config,dtype"
#: Forwards of each model on a clean pair with the prefill families: the parity pass only.
MAX_FORWARDS = 1


def _run(example: str, only: str):
    spec = load_spec(example=example)
    families = parse_only(only)
    ctx = CheckContext(spec=spec, families=tuple(families))
    pair = load_pair(ctx)
    counts = {"reference": 0, "candidate": 0}

    def counter(side):
        def pre(module, args):
            counts[side] += 1
        return pre

    handles = [pair.reference.register_forward_pre_hook(counter("reference")),
               pair.candidate.register_forward_pre_hook(counter("candidate"))]
    findings = []
    try:
        for fam in families:
            findings += importlib.import_module(f"porting_kit.checks.{FAMILIES[fam]}").run(ctx)
    finally:
        for h in handles:
            h.remove()
    return counts, findings


@pytest.mark.slow
def test_clean_pair_runs_each_forward_once_with_prefill_families():
    counts, findings = _run("tts", PREFILL)
    assert counts == {"reference": MAX_FORWARDS, "candidate": MAX_FORWARDS}
    codes = {f.code: f.status for f in findings}
    assert codes["rope.ok"] == "pass" and codes["norm.ok"] == "pass" and codes["parity.ok"] == "pass"
    assert not [f.code for f in findings if f.status in ("fail", "warn")]
    # rope passed its screen (q/k equal), norm its screen (no fingerprint needed)
    rope = next(f for f in findings if f.code == "rope.ok")
    assert rope.evidence["qk_relative_residual"] < 1e-5


@pytest.mark.slow
def test_planted_faults_still_named_from_the_shared_forward():
    """The diagnosis runs from the shared capture when the screen fails: same codes."""
    _, rope_f = _run("tts:rope_position_offset", PREFILL)
    assert "rope.position_offset" in {f.code for f in rope_f if f.status == "fail"}
    counts, norm_f = _run("tts:norm_no_fp32_upcast", PREFILL)
    assert "norm.no_fp32_upcast" in {f.code for f in norm_f if f.status == "fail"}
    assert counts == {"reference": MAX_FORWARDS, "candidate": MAX_FORWARDS}  # parity passes in fp32
