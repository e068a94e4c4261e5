"""The generated single-stage AR skeleton, run with a stand-in upstream model through
the engine contract, passes the ``rng`` and ``lifecycle`` checks; with its RNG
swap removed it fails them (so the test can fail)."""

from __future__ import annotations

import textwrap

import pytest
from scaffold_helpers import make_scaffold

torch = pytest.importorskip("torch")

MODEL = "vllm_omni/model_executor/models/my_tts/modeling_my_tts.py"

SPEC = textwrap.dedent('''
    """Port spec: the generated skeleton with a stand-in upstream (global-RNG sampler)."""
    import importlib.util
    import sys
    import types
    from typing import Any, NamedTuple

    import numpy as np
    import torch
    from torch import nn

    MODEL_FILE = {model_file!r}


    class OmniOutput(NamedTuple):
        text_hidden_states: Any
        multimodal_outputs: Any = None
        intermediate_tensors: Any = None
        next_token_id: Any = None


    class StandIn(nn.Module):
        """Upstream-like: AR + codec in one generator; samples from the GLOBAL torch
        and numpy RNGs; emits stereo (2, T) chunks and a final result event."""

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def inference_stream(self, text, **kwargs):
            for _ in range(2 + len(text) % 3):
                yield {{"type": "audio", "waveform": torch.randn(2, 64) * 0.1 + float(np.random.rand()) * 0.01}}
            yield {{"type": "result", "waveform": torch.zeros(2, 64)}}


    def engine_model():
        saved = {{k: sys.modules.get(k) for k in ("vllm_omni.model_executor.models.output_templates",)}}
        stub = types.ModuleType("vllm_omni.model_executor.models.output_templates")
        stub.OmniOutput = OmniOutput
        sys.modules["vllm_omni.model_executor.models.output_templates"] = stub
        try:
            spec = importlib.util.spec_from_file_location("pk_generated_skeleton", MODEL_FILE)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses look the module up
            spec.loader.exec_module(module)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        ns = types.SimpleNamespace
        cfg = ns(model_config=ns(hf_config=ns(), model="stand-in"), scheduler_config=ns(max_num_seqs=4),
                 device_config=ns(device="cpu"))
        return module.MyTtsForGeneration(vllm_config=cfg, upstream=StandIn())
''')


def _spec(tmp_path, tree):
    path = tmp_path / "skeleton_spec.py"
    path.write_text(SPEC.format(model_file=str(tree / MODEL)))
    return path


def _ensure_parents(monkeypatch):
    """The model file imports vllm_omni.model_executor.models.output_templates; give the
    stub its parent packages when vllm_omni is not installed (undone after the test)."""
    import importlib.util
    import sys
    import types

    if "vllm_omni" not in sys.modules and importlib.util.find_spec("vllm_omni") is None:
        for name in ("vllm_omni", "vllm_omni.model_executor", "vllm_omni.model_executor.models"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.delitem(sys.modules, "pk_generated_skeleton", raising=False)


def test_generated_skeleton_passes_rng_and_lifecycle(tmp_path, monkeypatch):
    from porting_kit.runner import run_check

    _ensure_parents(monkeypatch)
    tree = make_scaffold(tmp_path, "single-stage-ar")  # config stop token 2 (the driver's EOS)
    report = run_check(str(_spec(tmp_path, tree)), only="rng,lifecycle")
    assert report.codes() == ["rng.ok", "lifecycle.ok"], [(f.code, f.message) for f in report.findings]


def test_skeleton_without_rng_swap_fails(tmp_path, monkeypatch):
    from porting_kit.runner import run_check

    _ensure_parents(monkeypatch)
    tree = make_scaffold(tmp_path, "single-stage-ar")
    model = tree / MODEL
    text = model.read_text()
    assert text.count("with _request_rng(stream):") == 2
    model.write_text(text.replace("with _request_rng(stream):", "with contextlib.nullcontext():"))
    report = run_check(str(_spec(tmp_path, tree)), only="rng")
    assert report.status == "fail"
    assert {"rng.global_state_mutated", "rng.crosstalk"} & set(report.codes("fail")), report.codes()
