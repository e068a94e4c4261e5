"""The run tier: every vLLM-Omni shape, generated from the embedded example's config
and from an independent TTS config, runs end to end (``run.ok``); planted runtime
mistakes give their exact codes; SGLang-Omni is skipped with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold_helpers import SHAPES, make_scaffold

from porting_kit.scaffold.examples import example_config
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold
from porting_kit.scaffold.validate import load_manifests, run_tier

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MODELS = "vllm_omni/model_executor/models/my_tts"
TALKER = f"{MODELS}/modeling_my_tts.py"
CODEC = f"{MODELS}/my_tts_code2wav.py"
PROC = "vllm_omni/model_executor/stage_input_processors/my_tts.py"
#: An independent TTS config: other sizes, vocabulary, stop ids, codebooks, hop, rate.
OTHER = example_config("other_speech")


def _run(root: Path) -> list:
    return run_tier(root, load_manifests(root)[0])


def _codes(findings) -> list[str]:
    return [f.code for f in findings]


def _plant(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("shape", SHAPES)
def test_example_config_runs(tmp_path, shape):
    findings = _run(make_scaffold(tmp_path, shape))
    assert _codes(findings) == ["run.ok"], [(f.code, f.message) for f in findings]
    ev = findings[0].evidence
    assert ev["seam"] in ("real", "stand-ins") and ev["requests"] == 4 and ev["samples"] > 0
    if shape == "two-stage":
        assert ev["async_chunk"] is True and ev["chunks"] > 4  # several chunks per request


@pytest.mark.parametrize("shape", SHAPES)
def test_independent_config_runs(tmp_path, shape):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(OTHER))
    out = tmp_path / "out"
    scaffold(ScaffoldOptions(framework="vllm-omni", shape=shape, model_type="other_speech", config=cfg, out=out))
    assert "HOP_LENGTH = 320" in (out / "vllm_omni/model_executor/models/other_speech/modeling_other_speech.py"
                                  ).read_text() or shape == "two-stage"
    findings = _run(out)
    assert _codes(findings) == ["run.ok"], [(f.code, f.message) for f in findings]


def test_two_stage_full_payload_mode_runs(tmp_path):
    root = make_scaffold(tmp_path, "two-stage")
    _plant(root, "vllm_omni/deploy/my_tts.yaml", "async_chunk: true", "async_chunk: false")
    findings = _run(root)
    assert _codes(findings) == ["run.ok"], [(f.code, f.message) for f in findings]
    assert findings[0].evidence["async_chunk"] is False


# -- planted runtime mistakes --------------------------------------------------------------
PLANTS = [
    # processor hands stage 1 a 2-D tensor instead of flat codebook-major codes
    ("processor_reshape", PROC, "flat = torch.stack(window).T.contiguous().reshape(-1) if window",
     "flat = torch.stack(window).T.contiguous() if window", "run.handoff_shape"),
    # the talker emits (1, NUM_CODEBOOKS - 1) rows (the measured 15-vs-16 contradiction)
    ("talker_rows", TALKER, "audio = torch.stack(frames) if frames", "audio = torch.stack(frames)[:, 1:] if frames",
     "run.handoff_shape"),
    # left_context read under another key than the processor writes
    ("left_context_key", CODEC, 'context = min(_meta_int(info.get("meta") or {}, "left_context_size"), frames)',
     'context = min(_meta_int(info, "left_context_size"), frames)', "run.handoff_shape"),
    # the codec stage without the additional-information update: it decodes a stale payload
    ("codec_no_info_update", CODEC, "    enable_update_additional_information = True\n", "", "run.handoff_shape"),
    # code2wav merges the batch into one request
    ("codec_merges_batch", CODEC, "        sr = torch.tensor(SAMPLE_RATE, dtype=torch.int32)\n",
     "        outputs = [torch.cat(outputs)] if outputs else outputs\n"
     "        sr = torch.tensor(SAMPLE_RATE, dtype=torch.int32)\n", "run.handoff_shape"),
    # the codec returns nothing
    ("codec_silent", CODEC, "outputs.append(self.decode(codes, context))", "outputs.append(empty)", "run.no_audio"),
    # a stage raising
    ("codec_raises", CODEC, "        with torch.autocast(device_type=codes.device.type, enabled=False):",
     "        raise RuntimeError('planted')\n        with torch.autocast(device_type=codes.device.type, enabled=False):",
     "run.stage_exception"),
    # the per-request generator keyed by a constant
    ("generator_constant_key", TALKER, "key = _request_key(info)\n        gen = self._generators.get(key)",
     'key = "shared"\n        gen = self._generators.get(key)', "rng.crosstalk"),
]


@pytest.mark.parametrize(("name", "rel", "old", "new", "code"), PLANTS, ids=[p[0] for p in PLANTS])
def test_planted_two_stage_mistake(tmp_path, name, rel, old, new, code):
    root = make_scaffold(tmp_path, "two-stage")
    _plant(root, rel, old, new)
    findings = [f for f in _run(root) if f.status == "fail"]
    assert findings and findings[0].code == code, [(f.code, f.message) for f in findings]
    if code == "run.stage_exception":
        assert findings[0].evidence["file"] == CODEC and findings[0].evidence["line"] > 0
        assert findings[0].evidence["stage"] == 1


def test_native_ar_generator_leak(tmp_path):
    root = make_scaffold(tmp_path, "native-ar")
    _plant(root, TALKER, "self._states.pop(str(request_id), None)", "pass")
    findings = [f for f in _run(root) if f.status == "fail"]
    assert _codes(findings) == ["rng.generator_leak"], [(f.code, f.message) for f in findings]


def test_single_stage_without_rng_swap_crosstalk(tmp_path):
    root = make_scaffold(tmp_path, "single-stage-ar")
    model = root / TALKER
    model.write_text(model.read_text().replace("with _request_rng(stream):", "with contextlib.nullcontext():"))
    findings = [f for f in _run(root) if f.status == "fail"]
    assert "rng.crosstalk" in _codes(findings), [(f.code, f.message) for f in findings]


def test_sglang_run_tier_skips(tmp_path):
    root = make_scaffold(tmp_path, "two-stage", framework="sglang-omni")
    findings = _run(root)
    assert [(f.code, f.status) for f in findings] == [("run.skipped", "skip")]
    assert "SGLang-Omni" in findings[0].message


@pytest.mark.parametrize("shape", SHAPES)
def test_generated_model_tests_pass_in_the_generated_tree(tmp_path, shape):
    root = make_scaffold(tmp_path, shape)
    test = root / "tests/model_executor/models/my_tts/test_my_tts_model.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                          cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_missing_generated_file_is_an_input_error(tmp_path):
    from porting_kit.errors import InputError

    root = make_scaffold(tmp_path, "native-ar")
    (root / "vllm_omni/deploy/my_tts.yaml").unlink()
    with pytest.raises(InputError, match="my_tts.yaml not found"):
        _run(root)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
def test_example_config_runs_on_cuda(tmp_path, shape):
    """The run tier on a CUDA device (issue 13 point 2): the same four interleaved requests, an
    abort and the dummy call, with the stage models and processors on the GPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("gpu: CUDA not available (torch.cuda.is_available() is False)")
    root = make_scaffold(tmp_path, shape)
    findings = run_tier(root, load_manifests(root)[0], device="cuda")
    assert _codes(findings) == ["run.ok"], [(f.code, f.message) for f in findings]
    assert findings[0].evidence["device"] == "cuda" and findings[0].evidence["requests"] == 4


def test_framework_package_inits_needing_vllm_do_not_fail_the_run(tmp_path):
    """After scaffold --into a vLLM-Omni checkout, models/__init__.py imports registry.py, which
    imports vllm: without vLLM the run still drives the generated files through their stand-ins
    (run.ok), as for --out, never run.stage_exception on the framework's own import."""
    root = make_scaffold(tmp_path, "single-stage-ar")
    for rel, text in {"vllm_omni/model_executor/__init__.py": "from . import models  # noqa\n",
                      "vllm_omni/model_executor/models/__init__.py": "from .registry import OmniModelRegistry\n",
                      "vllm_omni/model_executor/models/registry.py":
                          "import vllm_not_installed_here  # noqa\nOmniModelRegistry = None\n"}.items():
        (root / rel).write_text(text)
    findings = _run(root)
    assert _codes(findings) == ["run.ok"], [(f.code, f.message) for f in findings]
