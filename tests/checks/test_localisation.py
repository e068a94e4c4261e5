"""Localisation never stops at <root> while aligned children exist; full tensors per block confirm.

On the Meta-vs-HF Llama pair (slow): RoPE scaling dropped (every sketch under the screening
bound) is placed in layer 0's attention; a softmax scale wrong in layer 1 (large, and off by
0.03 %, which only a norm later carries past float32's tolerance) in layer 1's attention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py"


@pytest.mark.slow
@pytest.mark.parametrize("variant,reference,candidate", [
    ("scaling", "model.layers.0.self_attn", "layers.0.attention"),
    ("attn_scale", "model.layers.1.self_attn", "layers.1.attention"),
    ("attn_scale_small", "model.layers.1.self_attn", "layers.1.attention"),
])
def test_llama_attention_faults_are_placed_in_the_attention(variant, reference, candidate):
    pytest.importorskip("llama_models")
    pytest.importorskip("fairscale")
    report = run_check(load_spec(LLAMA, variant=variant), only="parity")
    (f,) = [f for f in report.findings if f.code == "parity.first_divergence"]
    assert (f.where.reference, f.where.candidate) == (reference, candidate)
    assert report.first_divergence["reference_module"] == reference
    if variant == "attn_scale_small":
        # under the sketch screen and within tolerance itself; model.norm carries it past atol
        assert f.evidence["within_tolerance"] is True
        assert 1e-6 < f.evidence["rel_err"] < 1e-4
    assert report.exit_code == 1
