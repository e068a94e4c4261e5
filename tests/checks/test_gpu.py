"""The GPU tier: serving-dtype parity and the engine contract on CUDA (``gpu`` marker).

Skipped with the reason where CUDA is not available (tests/conftest.py).
"""

from pathlib import Path

import pytest
import torch

from porting_kit.runner import run_check

pytestmark = pytest.mark.gpu
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


def test_engine_contract_on_cuda_interleaved_join_abort_and_cuda_rng_untouched():
    from porting_kit.adapters.vllm_omni.engine import run_contract_suite
    from porting_kit.embedded.generator_model import build_model

    torch.cuda.init()
    before = torch.cuda.get_rng_state()
    suite = run_contract_suite(build_model, device="cuda")
    assert torch.equal(torch.cuda.get_rng_state(), before)
    names = [b.name for b in suite.batches]
    assert {"interleaved", "permuted", "joining"} <= set(names)
    assert len(suite.solo) >= 4
    rep = run_check(example="generator", only="rng,lifecycle", device="cuda")
    assert rep.codes() == ["rng.ok", "lifecycle.ok"]
    assert torch.equal(torch.cuda.get_rng_state(), before)


def test_engine_contract_on_cuda_names_planted_crosstalk():
    rep = run_check(example="generator:sampling_global_rng", only="rng", device="cuda")
    assert {"rng.global_state_mutated", "rng.crosstalk"} <= set(rep.codes())
