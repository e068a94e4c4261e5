"""The GPU tier: serving-dtype parity and the engine contract on CUDA (``gpu`` marker).

Skipped with the reason where CUDA is not available (tests/conftest.py).
"""

from pathlib import Path

import pytest
import torch

from porting_kit.runner import run_check

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
LLAMA = str(Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py")


def _bad(rep):
    return [f.code for f in rep.findings if f.status in ("fail", "warn")]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_clean_llama_pair_passes_on_cuda(dtype):
    pytest.importorskip("llama_models", reason="needs llama-models (carry the examples extra)")
    pytest.importorskip("fairscale", reason="needs fairscale (carry the examples extra)")
    rep = run_check(LLAMA, device="cuda", dtype=dtype, only="config,parity,rope,norm")
    assert _bad(rep) == []
    (rope,) = [f for f in rep.findings if f.check == "rope"]
    assert rope.code == "rope.ok"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_clean_embedded_tts_passes_on_cuda(dtype):
    rep = run_check(example="tts", device="cuda", dtype=dtype,
                    only="config,parity,rope,norm,dtype")
    assert _bad(rep) == []


def test_fp16_overflow_named_on_cuda():
    rep = run_check(example="tts:fp16_overflow", device="cuda", dtype="float16", only="parity,dtype")
    over = {f.evidence["side"]: f.evidence["module"] for f in rep.findings
            if f.code == "dtype.fp16_overflow"}
    assert over == {"candidate": "talker.layers.0.mlp.down_proj",
                    "reference": "lm.model.layers.0.mlp.down_proj"}


def _cuda_factory():
    from porting_kit.embedded.generator_model import build_model

    def factory():
        model = build_model(device="cuda")
        assert {p.device.type for p in model.parameters()} == {"cuda"}
        return model
    return factory


def test_engine_contract_on_cuda_interleaved_join_abort_and_cuda_rng_untouched():
    """The generator model with its weights and sampling generators on the GPU: 4 seeded
    requests interleaved, two of them joining mid-stream, one aborted; each batched request
    gets exactly its solo audio (no crosstalk, no truncation), the aborted request's generator
    is closed, and neither the CPU nor the CUDA process RNG moves."""
    from porting_kit.adapters.vllm_omni.engine import run_contract_suite
    from porting_kit.probes.engine_suite import same_chunk

    torch.cuda.init()
    cuda_before, cpu_before = torch.cuda.get_rng_state(), torch.get_rng_state()
    suite = run_contract_suite(_cuda_factory(), device=DEVICE)
    assert torch.equal(torch.cuda.get_rng_state(), cuda_before)
    assert torch.equal(torch.get_rng_state(), cpu_before)
    assert len(suite.requests) >= 4 and all(r.seed is not None for r in suite.requests)
    by_name = {b.name: b for b in suite.batches}
    assert [r.arrival_step for r in suite.requests] == [0] * len(suite.requests)
    for name in ("interleaved", "permuted", "joining"):
        sc = by_name[name]
        assert max(len(c.req_ids) for c in sc.calls) >= 3, name  # requests really interleaved
        for rid, res in sc.results.items():
            solo = suite.solo[rid].results[rid]
            assert res.finished_by == "eos", (name, rid)
            assert len(res.chunks) == len(solo.chunks) and res.waveform().numel() > 0, (name, rid)
            assert all(same_chunk(a, b) for a, b in zip(res.chunks, solo.chunks)), (name, rid)
    first_step = {rid: min(c.step for c in by_name["joining"].calls if rid in c.req_ids)
                  for rid in by_name["joining"].results}
    assert sorted(first_step.values())[-1] >= 2  # joined mid-stream
    for sc in suite.scenarios():  # no model call moved a process RNG, CUDA's included
        assert all(not c.rng_changed for c in sc.calls), sc.name
    probe = suite.abort
    assert probe.has_on_requests_finished and probe.survivors_running == 2
    assert probe.after_generators == probe.before_generators - 1
    assert len(probe.after_temp_files) == len(probe.before_temp_files) - 1  # its finally ran


def test_engine_contract_checks_pass_on_cuda():
    torch.cuda.init()
    before = torch.cuda.get_rng_state()
    rep = run_check(example="generator", only="rng,lifecycle", device="cuda")
    assert rep.codes() == ["rng.ok", "lifecycle.ok"]
    assert torch.equal(torch.cuda.get_rng_state(), before)


def test_engine_contract_on_cuda_names_planted_crosstalk():
    """Sampling from the process RNG on the GPU moves CUDA's generator (not the CPU one)."""
    rep = run_check(example="generator:sampling_global_rng", only="rng", device="cuda")
    assert {"rng.global_state_mutated", "rng.crosstalk"} <= set(rep.codes())
    (mut,) = [f for f in rep.findings if f.code == "rng.global_state_mutated"]
    assert "torch_cuda" in mut.message


@pytest.mark.parametrize("variant, code", [
    ("no_on_requests_finished", "rng.generator_leak"),
    ("key_constant", "rng.request_key_collapse"),
    ("cumulative_output", "lifecycle.cumulative_output"),
])
def test_engine_contract_on_cuda_names_planted_faults(variant, code):
    rep = run_check(example=f"generator:{variant}", only="rng,lifecycle", device="cuda")
    assert code in rep.codes()
