"""Norm eps read from what runs (issue 17, point 2): functional norm calls are traced."""

import torch
import torch.nn.functional as F
from torch import nn

from porting_kit.checks.norm import functional_eps_findings
from porting_kit.probes.norms import capture_functional_norms
from porting_kit.runner import run_check


class _Block(nn.Module):
    def __init__(self, eps=None):
        super().__init__()
        self.w = nn.Parameter(torch.ones(8))
        self.ln = nn.LayerNorm(8, eps=1e-6)
        self.eps = eps

    def forward(self, x):
        x = self.ln(x)
        if self.eps is None:
            return F.rms_norm(x, (8,), self.w)
        return F.rms_norm(x, (8,), self.w, eps=self.eps)


def _calls(model):
    with capture_functional_norms(model) as calls:
        model(torch.randn(2, 8))
    return calls


def test_functional_calls_are_traced_with_their_eps_once_each():
    calls = _calls(_Block(1e-5))
    assert [(c.function, c.eps, c.width, c.module, c.explicit_eps) for c in calls] == [
        ("layer_norm", 1e-6, 8, "ln", True), ("rms_norm", 1e-5, 8, "<root>", True)]


def test_hard_coded_eps_is_eps_mismatch_and_equal_eps_passes():
    ref = _calls(_Block(1e-6))
    (f,) = functional_eps_findings(ref, _calls(_Block(1e-5)), [])
    assert f.code == "norm.eps_mismatch"
    assert (f.evidence["candidate_eps"], f.evidence["reference_eps"]) == (1e-5, 1e-6)
    assert functional_eps_findings(ref, _calls(_Block(1e-6)), []) == []
    assert functional_eps_findings(ref, _calls(_Block(None)), []) == []  # default eps: not judged


def test_tts_functional_final_norm_eps_is_found():
    rep = run_check(example="tts:norm_functional_eps", only="norm")
    (f,) = [f for f in rep.findings if f.status == "fail"]
    assert f.code == "norm.eps_mismatch"
    assert (f.evidence["candidate_eps"], f.evidence["reference_eps"]) == (1e-5, 1e-6)
    assert f.evidence["function"] == "rms_norm" and f.evidence["candidate_module"] == "talker"
