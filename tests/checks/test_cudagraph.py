"""cudagraph family: skip on CPU with the reason; each planted fault's code on CUDA (gpu marker)."""

import pytest
import torch

from porting_kit.probes.cudagraph import first_shape_change
from porting_kit.runner import run_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip path")
def test_cpu_skips_with_reason():
    (f,) = run_check(example="generator", only="cudagraph").findings
    assert (f.code, f.status, f.message) == ("cudagraph.skipped", "skip", "CUDA not available")


def test_spec_without_decode_step_skips():
    (f,) = run_check(example="tts", only="cudagraph").findings
    assert f.status == "skip" and "decode_step()" in f.message


def test_first_shape_change_names_module_and_both_shapes():
    per_step = [{"emb": (4, 16), "emb (call 2)": (4, 1, 16)}, {"emb": (4, 16), "emb (call 2)": (4, 2, 16)}]
    sc = first_shape_change(per_step)
    assert (sc.module, sc.step, sc.capture_shape, sc.step_shape) == ("emb (call 2)", 1, (4, 1, 16), (4, 2, 16))
    assert first_shape_change([{"a": (1,)}, {"a": (1,)}]) is None


@pytest.mark.gpu
@pytest.mark.parametrize("variant, code", [
    (None, "cudagraph.ok"),
    ("graph_stale_output", "cudagraph.stale_output"),
    ("graph_shape_changed", "cudagraph.shape_changed"),
    ("graph_capture_generator", "cudagraph.capture_failed"),
])
def test_planted_cudagraph_fault_is_named(variant, code):
    ex = "generator" + (f":{variant}" if variant else "")
    (f,) = run_check(example=ex, only="cudagraph", device="cuda").findings
    assert f.code == code, f.message
    if code == "cudagraph.stale_output":
        assert f.evidence["mismatched_steps"] == "0, 1, 2"
    if code == "cudagraph.shape_changed":
        assert f.evidence["capture_shape"] == "(4, 1, 16)" and f.evidence["replay_shape"] == "(4, 2, 16)"
    if code == "cudagraph.capture_failed":
        assert f.evidence["error"]
