"""porting-kit scaffold: facts from config.json, the files of each shape, safety, --into."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from scaffold_helpers import SHAPES, make_scaffold, unpack_tree, write_config

from porting_kit.cli import main as cli
from porting_kit.errors import InputError
from porting_kit.scaffold.generate import ScaffoldOptions, _safe_target, ruff_check, scaffold
from porting_kit.scaffold.facts import read_model_facts
from porting_kit.adapters.vllm_omni.registry import add_adapter_import, add_pipeline_registration, only_added
from porting_kit.scaffold.validate import validate_static


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_facts_read_nested_audio_values(tmp_path):
    facts = read_model_facts(write_config(tmp_path))
    assert facts.sample_rate.value == 24000 and facts.sample_rate.source == "codec_config.sampling_rate"
    assert facts.hop_length.value == 8 * 5 * 4 * 3
    assert "upsampling_ratios" in facts.hop_length.source
    assert facts.num_codebooks.value == 8
    assert facts.stop_token_ids.value == [2]
    assert facts.rope_theta.value == 1000000.0 and facts.rope_theta.source == "rope_parameters.rope_theta"
    assert facts.rope_scaling is None  # rope_type default is not scaling
    assert facts.architecture == "MyTTSForConditionalGeneration"
    # L (4h^2 + 3hi) + V h
    assert facts.param_count == 8 * (4 * 512 * 512 + 3 * 512 * 1536) + 4096 * 512


def test_codec_eos_preferred_over_text_eos(tmp_path):
    cfg = write_config(tmp_path, talker_config={"codec_eos_token_id": 4001, "hop_length": 320})
    facts = read_model_facts(cfg)
    assert facts.stop_token_ids.value == [4001] and facts.stop_token_ids.source == "talker_config.codec_eos_token_id"
    assert facts.hop_length.value == 320  # a direct hop_length wins over ratios


def _ruff(root):
    """ruff over a scaffold; skipped, naming the package, where ruff is not installed (the GPU
    machine's image has no ruff)."""
    import shutil

    if shutil.which("ruff") is None:
        pytest.skip("needs the package ruff (not installed; pip install ruff)")
    return ruff_check(root)


@pytest.mark.parametrize("shape", SHAPES)
def test_vllm_omni_shape_scaffolds_validates_and_passes_ruff(tmp_path, shape):
    out = make_scaffold(tmp_path, shape)
    man = json.loads((out / ".porting-kit/scaffold-my_tts.json").read_text())
    files = set(man["files"].values())
    m = "my_tts"
    assert {f"vllm_omni/model_executor/models/{m}/pipeline.py", f"vllm_omni/deploy/{m}.yaml",
            f"vllm_omni/entrypoints/openai/tts_adapters/{m}.py",
            f"vllm_omni/model_executor/models/{m}/modeling_{m}.py",
            f"examples/offline_inference/text_to_speech/{m}/end2end.py",
            f"tests/model_executor/models/{m}/test_{m}_config.py"} <= files
    assert (f"vllm_omni/model_executor/models/{m}/{m}_code2wav.py" in files) == (shape == "two-stage")
    rc, text = _ruff(out)
    assert rc == 0, text
    deploy_text = (out / f"vllm_omni/deploy/{m}.yaml").read_text()
    deploy = yaml.safe_load(deploy_text)
    assert deploy["async_chunk"] is (shape == "two-stage")
    assert all(s["max_num_seqs"] >= 4 for s in deploy["stages"])
    pipeline = (out / f"vllm_omni/model_executor/models/{m}/pipeline.py").read_text()
    # native-ar: the config's eos_token_id 2 is the text LM's; the model stops on its own stop flag 1
    assert f'"stop_token_ids": [{1 if shape == "native-ar" else 2}]' in pipeline
    report = validate_static(out, prefer_real=False)
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]
    (tier,) = report.by_code("scaffold.tier")
    assert tier.status == "skip" and tier.evidence["tier"] == "stored" and "0.30.0" in tier.message
    # on CPU without the framework it names both tiers it did not run, and why
    assert tier.evidence["skipped"] == "real,gpu" and tier.evidence["reason"] == "real tier not requested"
    assert tier.evidence["reason"] in tier.message
    assert "GPU tier" in tier.message


def test_two_stage_topology_and_connectors(tmp_path):
    out = make_scaffold(tmp_path, "two-stage")
    pipeline = (out / "vllm_omni/model_executor/models/my_tts/pipeline.py").read_text()
    for needle in ("StageExecutionType.LLM_AR", "StageExecutionType.LLM_GENERATION", "input_sources=(0,)",
                   'engine_output_type="latent"', "async_chunk_process_next_stage_input_func", "owns_tokenizer=True"):
        assert needle in pipeline
    deploy = yaml.safe_load((out / "vllm_omni/deploy/my_tts.yaml").read_text())
    assert deploy["stages"][0]["output_connectors"] == {"to_stage_1": "connector_of_shared_memory"}
    assert deploy["stages"][1]["input_connectors"] == {"from_stage_0": "connector_of_shared_memory"}
    proc = (out / "vllm_omni/model_executor/stage_input_processors/my_tts.py").read_text()
    assert "NUM_CODEBOOKS = 8" in proc and "480 samples" in proc


def test_every_non_default_deploy_value_has_a_comment(tmp_path):
    out = make_scaffold(tmp_path, "single-stage-ar")
    lines = (out / "vllm_omni/deploy/my_tts.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(("max_num_seqs", "gpu_memory_utilization", "enforce_eager", "async_chunk",
                                "enable_prefix_caching", "max_model_len")):
            assert lines[i - 1].strip().startswith("#"), f"no comment above {stripped!r}"
    text = "\n".join(lines)
    assert "gpu_memory_utilization: ~" in text and "GiB bf16 weights" in text  # sized from params


def test_serial_reason_pins_max_num_seqs_1_with_reason(tmp_path):
    out = make_scaffold(tmp_path, "single-stage-ar", serial_reason="upstream codec keeps one streaming decoder.")
    text = (out / "vllm_omni/deploy/my_tts.yaml").read_text()
    assert "max_num_seqs: 1" in text and "# max_num_seqs 1: upstream codec keeps one streaming decoder." in text
    model = (out / "vllm_omni/model_executor/models/my_tts/modeling_my_tts.py").read_text()
    assert "REQUIRES_SERIAL = True" in model
    report = validate_static(out, prefer_real=False)
    assert report.status == "pass" and not report.codes("warn")


def test_max_num_seqs_below_4_needs_a_reason(tmp_path):
    with pytest.raises(InputError, match="serial-reason"):
        make_scaffold(tmp_path, "single-stage-ar", max_num_seqs=2)


def test_sglang_scaffold_real_validation(tmp_path):
    pytest.importorskip("sglang_omni.config", reason="sglang-omni config layer not installed (.ci/run installs it)")
    out = make_scaffold(tmp_path, "two-stage", framework="sglang-omni")
    config = (out / "sglang_omni/models/my_tts/config.py").read_text()
    for needle in ("wait_for=", "merge_fn=", "stream_to=", 'process="pipeline"', "next=", "terminal=True"):
        assert needle in config
    rc, text = _ruff(out)
    assert rc == 0, text
    report = validate_static(out)
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]
    (tier,) = report.by_code("scaffold.tier")
    assert tier.status == "pass" and tier.evidence["tier"] == "real"


@pytest.mark.parametrize("shape", ["single-stage-ar", "native-ar"])
def test_sglang_other_shapes_stored_and_real(tmp_path, shape):
    out = make_scaffold(tmp_path, shape, framework="sglang-omni")
    config = (out / "sglang_omni/models/my_tts/config.py").read_text()
    assert ("vocoder" in config) == (shape == "native-ar")
    stored = validate_static(out, prefer_real=False)
    assert stored.status == "pass", [(f.code, f.message) for f in stored.findings]
    assert stored.by_code("scaffold.tier")[0].evidence["tier"] == "stored"


# -- CLI and safety ---------------------------------------------------------------------------
def test_bad_model_type_exits_2(tmp_path, capsys):
    cfg = write_config(tmp_path)
    rc = cli(["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my-tts",
              "--config", str(cfg), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "not a Python identifier" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_missing_config_exits_2(tmp_path, capsys):
    rc = cli(["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my_tts",
              "--config", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "config file not found" in capsys.readouterr().err


def test_missing_flags_without_tty_is_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    rc = cli(["scaffold", "--framework", "vllm-omni"])
    err = capsys.readouterr().err
    assert rc == 2 and "--shape" in err and "--model-type" in err and "not a terminal" in err


def test_out_and_into_are_alternatives(tmp_path):
    cfg = write_config(tmp_path)
    with pytest.raises(InputError, match="exactly one"):
        scaffold(ScaffoldOptions("vllm-omni", "two-stage", "my_tts", cfg, out=tmp_path / "a", into=tmp_path))


def test_no_overwrite_without_force_and_backup_with_force(tmp_path, capsys):
    out = make_scaffold(tmp_path, "two-stage")
    deploy = out / "vllm_omni/deploy/my_tts.yaml"
    deploy.write_text("# my own edits\n")
    before = _digest(out)
    args = ["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my_tts",
            "--config", str(tmp_path / "config.json"), "--out", str(out)]
    assert cli(args) == 2
    assert "--force" in capsys.readouterr().err
    assert _digest(out) == before  # nothing written at all
    assert cli([*args, "--force"]) == 0
    assert (out / "vllm_omni/deploy/my_tts.yaml.bak").read_text() == "# my own edits\n"
    assert "stages:" in deploy.read_text()


def test_rerun_is_a_no_op(tmp_path):
    out = make_scaffold(tmp_path, "native-ar")
    before = _digest(out)
    result = scaffold(ScaffoldOptions("vllm-omni", "native-ar", "my_tts", tmp_path / "config.json", out=out))
    assert result.written == [] and _digest(out) == before


def test_output_paths_cannot_escape(tmp_path):
    with pytest.raises(InputError, match="outside"):
        _safe_target(tmp_path.resolve(), "../evil.py")


def test_into_needs_a_framework_tree(tmp_path):
    cfg = write_config(tmp_path)
    with pytest.raises(InputError, match="not a vllm-omni source tree"):
        scaffold(ScaffoldOptions("vllm-omni", "two-stage", "my_tts", cfg, into=tmp_path))


# -- registration edits -------------------------------------------------------------------------
REGISTRY = '''from a.b import X
from vllm_omni.model_executor.models.zeta.pipeline import ZETA_PIPELINE

OMNI_PIPELINES = {
    "zeta": ZETA_PIPELINE,
}
'''
ADAPTERS = '''x = 1

from vllm_omni.entrypoints.openai.tts_adapters import (  # noqa: E402,F401
    alpha,
    omega,
)
'''


def test_registration_inserts_lines_only_once():
    new = add_pipeline_registration(REGISTRY, "my_tts", "MY_TTS_PIPELINE")
    assert "from vllm_omni.model_executor.models.my_tts.pipeline import MY_TTS_PIPELINE\n" in new
    assert '    "my_tts": MY_TTS_PIPELINE,\n}' in new
    assert only_added(REGISTRY, new)
    assert add_pipeline_registration(new, "my_tts", "MY_TTS_PIPELINE") == new
    adapters = add_adapter_import(ADAPTERS, "my_tts")
    assert "    alpha,\n    my_tts,\n    omega,\n" in adapters  # alphabetical slot
    assert add_adapter_import(adapters, "my_tts") == adapters


def test_only_added_detects_a_changed_line():
    assert not only_added("a\nb\n", "a\nB\n")
    assert only_added("a\nb\n", "a\nx\nb\ny\n")


@pytest.mark.slow
def test_into_real_vllm_omni_tree_is_idempotent(tmp_path):
    tree = unpack_tree(tmp_path / "tree")
    assert not (tree / "tests").exists() and not (tree / "examples").exists()
    original = _digest(tree)
    cfg = write_config(tmp_path)
    opts = ScaffoldOptions("vllm-omni", "two-stage", "my_tts", cfg, into=tree)
    first = scaffold(opts)
    assert set(first.registrations) == {
        "vllm_omni/config/pipeline_registry.py", "vllm_omni/model_executor/models/registry.py",
        "vllm_omni/entrypoints/openai/tts_adapters/__init__.py", "benchmarks/tts/model_configs.yaml"}
    after_first = _digest(tree)
    # existing files: only the three registration files changed, and only by added lines
    changed = {p for p in original if original[p] != after_first[p]}
    assert changed == set(first.registrations) - {"benchmarks/tts/model_configs.yaml"}
    assert (tree / "tests/model_executor/models/my_tts/test_my_tts_config.py").is_file()
    assert (tree / "examples/offline_inference/text_to_speech/my_tts/end2end.py").is_file()
    second = scaffold(opts)
    assert second.written == [] and second.registrations == [] and _digest(tree) == after_first
    report = validate_static(tree, prefer_real=False)
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]
    # a registration line removed by hand is reported
    reg = tree / "vllm_omni/entrypoints/openai/tts_adapters/__init__.py"
    reg.write_text(reg.read_text().replace("    my_tts,\n", ""))
    report = validate_static(tree, prefer_real=False)
    assert "scaffold.registration_missing" in report.codes("fail")


def test_prompts_fill_missing_flags_in_a_terminal(tmp_path, monkeypatch):
    cfg = write_config(tmp_path)
    answers = iter(["vllm-omni", "native-ar", "my_tts", str(cfg), str(tmp_path / "o")])
    asked = []

    def ask(question, **kw):
        asked.append((question, tuple(kw.get("choices") or ())))
        return next(answers)

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("rich.prompt.Prompt.ask", ask)
    assert cli(["scaffold"]) == 0
    assert asked[1] == ("architecture shape", SHAPES)
    assert (tmp_path / "o/vllm_omni/model_executor/models/my_tts/pipeline.py").is_file()


@pytest.mark.parametrize("framework,shape", [("vllm-omni", s) for s in SHAPES] + [("sglang-omni", "two-stage")])
def test_generated_files_pass_the_port_lint_rules(tmp_path, framework, shape):
    from porting_kit.cli import lint_main

    out = make_scaffold(tmp_path, shape, framework=framework)
    files = [str(p) for p in sorted(out.rglob("*")) if p.suffix in (".py", ".yaml") and ".porting-kit" not in p.parts]
    assert lint_main(files) == 0


def test_unknown_shape_is_usage_error(tmp_path, capsys):
    cfg = write_config(tmp_path)
    rc = cli(["scaffold", "--framework", "vllm-omni", "--shape", "three-stage", "--model-type", "my_tts",
              "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert rc == 2 and "three-stage" in capsys.readouterr().err


def test_missing_facts_and_rope_scaling_are_reported(tmp_path):
    cfg = write_config(tmp_path, codec_config={}, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    result = scaffold(ScaffoldOptions("vllm-omni", "two-stage", "my_tts", cfg, out=tmp_path / "o"))
    notes = " ".join(result.notes)
    assert "sample_rate not found" in notes and "num_codebooks not found" in notes and "yarn" in notes


def test_example_configs_scaffold_with_their_own_values(tmp_path):
    """porting_kit.scaffold.examples: each example config scaffolds; its hop reaches the model file."""
    from porting_kit.scaffold.examples import EXAMPLE_CONFIGS, example_config, write_example_config
    from porting_kit.scaffold.generate import ScaffoldOptions, scaffold

    assert set(EXAMPLE_CONFIGS) == {"my_tts", "other_speech"}
    cfg = example_config("my_tts")
    cfg["vocab_size"] = 1
    assert EXAMPLE_CONFIGS["my_tts"]["vocab_size"] == 4096  # a copy
    for name, hop in (("my_tts", 480), ("other_speech", 320)):
        out = tmp_path / name
        scaffold(ScaffoldOptions(framework="vllm-omni", shape="single-stage-ar", model_type=name,
                                 config=write_example_config(name, tmp_path / f"{name}.json"), out=out))
        model = out / f"vllm_omni/model_executor/models/{name}/modeling_{name}.py"
        assert f"HOP_LENGTH = {hop}" in model.read_text()
