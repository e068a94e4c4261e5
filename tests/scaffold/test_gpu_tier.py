"""validate's GPU tier (scaffold/validate.py gpu_tier): skips with its reason without CUDA,
names the failing step's codes, and serves the embedded examples clean on CUDA (gpu marker)."""

import pytest

from porting_kit.report.findings import Finding, Report
from porting_kit.scaffold import validate


def test_gpu_tier_skips_with_the_reason_without_cuda(monkeypatch):
    monkeypatch.setattr(validate, "cuda_missing", lambda: "no CUDA device (test)")
    (f,) = validate.gpu_tier(None, None)
    assert (f.code, f.status) == ("gpu.skipped", "skip")
    assert f.message == "GPU tier skipped: no CUDA device (test)."
    rep = Report(command="validate", findings=[f])
    assert rep.exit_code == 0


def test_gpu_tier_names_the_codes_of_a_failing_step(monkeypatch):
    """With CUDA (faked) and a serving-dtype report holding a fail, the tier fails with
    gpu.serving_dtype_failed naming the code; the engine and graph steps that pass add nothing."""
    import porting_kit.runner as runner

    calls = []

    def fake_run_check(spec, *, only, device, dtype=None):
        calls.append((spec.name, only, device, dtype))
        if only.startswith("config"):
            bad = Finding("rope", "rope.low_precision", "fail", "angles drift 0.05 rad.", hint="keep fp32")
            return Report(command="check", findings=[bad])
        fam = only.split(",")[0]
        return Report(command="check", findings=[Finding(fam, f"{fam}.ok", "pass", "")])

    monkeypatch.setattr(validate, "cuda_missing", lambda: None)
    monkeypatch.setattr(runner, "run_check", fake_run_check)
    (f,) = validate.gpu_tier(None, None)
    assert (f.code, f.status) == ("gpu.serving_dtype_failed", "fail")
    assert f.evidence["codes"] == "rope.low_precision" and f.evidence["dtype"] == "bfloat16"
    assert f.hint == "keep fp32"
    assert [c[1:] for c in calls] == [("config,parity,rope,norm,dtype", "cuda", "bfloat16"),
                                      ("rng,lifecycle", "cuda", None), ("cudagraph", "cuda", None)]


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_tier_serves_the_embedded_examples_clean_on_cuda():
    (f,) = validate.gpu_tier(None, None)
    assert (f.code, f.status) == ("gpu.ok", "pass"), f.message
    assert f.evidence["steps_run"] == "serving_dtype, engine_contract, cudagraph"
    for key in ("rtf_c1", "rtf_c4", "ttfa_ms_c1", "syncs_per_step_c1", "decode_eager_us",
                "decode_graph_us"):
        assert f.evidence[key] >= 0, key
    assert f.evidence["decode_graph_us"] < f.evidence["decode_eager_us"]
