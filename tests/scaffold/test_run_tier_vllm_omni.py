"""The run tier in the vLLM-Omni environment (``.ci/vllm-omni-env.sh``): the generated
seam resolves to the real vLLM-Omni classes and vLLM's paged ``Attention`` (driven on
vLLM's CPU attention backend through its forward context), and the pipeline still runs
end to end."""

from __future__ import annotations

import pytest
from scaffold_helpers import SHAPES, make_scaffold

from porting_kit.adapters.vllm_omni.schema import real_available
from porting_kit.scaffold.validate import load_manifests, run_tier

AVAILABLE, WHY = real_available()
pytestmark = [pytest.mark.vllm_omni, pytest.mark.slow,
              pytest.mark.skipif(not AVAILABLE, reason=f"vLLM-Omni not importable ({WHY}); "
                                 "run in the .ci/vllm-omni-env.sh environment")]


@pytest.mark.parametrize("shape", SHAPES)
def test_run_tier_with_the_real_seam(tmp_path, shape):
    root = make_scaffold(tmp_path, shape)
    findings = run_tier(root, load_manifests(root)[0])
    assert [f.code for f in findings] == ["run.ok"], [(f.code, f.message) for f in findings]
    ev = findings[0].evidence
    assert ev["seam"] == "real", ev
    assert "OmniOutput" in ev["seam_detail"]
    # The AR stages attend through vLLM's own paged Attention (CPU backend), its KV cache
    # and metadata provided by the driver through vLLM's forward context.
    if shape != "single-stage-ar":
        assert ev["attention"].startswith("real"), ev


def test_planted_handoff_with_the_real_payload_structs(tmp_path):
    root = make_scaffold(tmp_path, "two-stage")
    proc = root / "vllm_omni/model_executor/stage_input_processors/my_tts.py"
    proc.write_text(proc.read_text().replace("flat = torch.stack(window).T.contiguous().reshape(-1) if window",
                                             "flat = torch.stack(window).T.contiguous() if window"))
    fails = [f for f in run_tier(root, load_manifests(root)[0]) if f.status == "fail"]
    assert fails and fails[0].code == "run.handoff_shape", [(f.code, f.message) for f in fails]
