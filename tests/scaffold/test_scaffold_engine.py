"""The generated single-stage AR skeleton, loaded from its generated tree (its own
``_vllm_seam``: real vLLM-Omni classes where installed, named stand-ins elsewhere;
no module stubbed into ``sys.modules``) and run with a stand-in upstream model
through the engine contract, passes the ``rng`` and ``lifecycle`` checks; with its
RNG swap removed it fails them (so the test can fail)."""

from __future__ import annotations

import textwrap

import pytest
from scaffold_helpers import make_scaffold

torch = pytest.importorskip("torch")

MODEL = "vllm_omni/model_executor/models/my_tts/modeling_my_tts.py"

SPEC = textwrap.dedent('''
    """Port spec: the generated skeleton (loaded from its tree, through its own _vllm_seam)
    with a stand-in upstream that samples from the global RNGs."""
    import importlib
    import sys
    import types

    import numpy as np
    import torch
    from torch import nn

    TREE = {tree!r}


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
        # The generated tree under a private package name: no vllm / vllm_omni module is replaced.
        if "_pk_skeleton" not in sys.modules:
            pkg = types.ModuleType("_pk_skeleton")
            pkg.__path__ = [TREE + "/vllm_omni"]
            sys.modules["_pk_skeleton"] = pkg
        module = importlib.import_module("_pk_skeleton.model_executor.models.my_tts.modeling_my_tts")
        ns = types.SimpleNamespace
        cfg = ns(model_config=ns(hf_config=ns(), model="stand-in"), scheduler_config=ns(max_num_seqs=4),
                 device_config=ns(device="cpu"))
        return module.MyTtsForGeneration(vllm_config=cfg, upstream=StandIn())
''')


def _spec(tmp_path, tree):
    path = tmp_path / "skeleton_spec.py"
    path.write_text(SPEC.format(tree=str(tree)))
    return path


def _ensure_parents(monkeypatch):
    """Forget the private package between tests (each test has its own tree)."""
    import sys

    for name in [n for n in sys.modules if n == "_pk_skeleton" or n.startswith("_pk_skeleton.")]:
        monkeypatch.delitem(sys.modules, name)


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
