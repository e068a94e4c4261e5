"""cudagraph family: skip on CPU with the reason; each planted fault's code on CUDA (gpu marker)."""

import pytest
import torch

from porting_kit.probes.cudagraph import first_shape_change
from porting_kit.runner import run_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip path")
def test_cpu_skips_with_reason():
    (f,) = run_check(example="generator", only="cudagraph").findings
    assert (f.code, f.status) == ("cudagraph.skipped", "skip")
    assert f.message.startswith("CUDA graphs need a CUDA device: no CUDA device here (torch ")


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


def _graph_run(**kw):
    from porting_kit.probes.cudagraph import GraphRun

    base = dict(steps=3, eager_shapes=[(4, 16)] * 3, graph_shapes=[(4, 16)] * 3,
                equal=[True] * 3, max_abs_diff=[0.0] * 3, equals_last=[False] * 3)
    base.update(kw)
    return GraphRun(**base)


def test_verdicts_from_graph_run_facts_on_cpu():
    """The check's verdicts on measured facts, so the codes are exercised without CUDA."""
    from porting_kit.checks.cudagraph import _replay_finding, _shape_changed
    from porting_kit.probes.cudagraph import ShapeChange

    assert _shape_changed(_graph_run(), {}) is None
    assert _replay_finding(_graph_run(), {}).code == "cudagraph.ok"
    stale = _replay_finding(_graph_run(equal=[False, False, True], max_abs_diff=[0.5, 0.25, 0.0],
                                       equals_last=[True, True, True]), {})
    assert (stale.code, stale.evidence["mismatched_steps"], stale.evidence["max_abs_diff"]) == \
        ("cudagraph.stale_output", "0, 1", 0.5)
    other = _replay_finding(_graph_run(equal=[True, False, True], max_abs_diff=[0.0, 1e-3, 0.0]), {})
    assert other.code == "cudagraph.unexplained"
    moved = _shape_changed(_graph_run(shape_change=ShapeChange("emb", 1, (4, 1, 16), (4, 2, 16))), {})
    assert (moved.code, moved.where.candidate, moved.evidence["replay_shape"]) == \
        ("cudagraph.shape_changed", "emb", "(4, 2, 16)")
    batch = _shape_changed(_graph_run(graph_shapes=[(4, 16), (2, 16), (4, 16)]), {})
    assert (batch.code, batch.evidence["step"], batch.where.candidate) == ("cudagraph.shape_changed", 1, None)
