"""porting-kit validate --static: planted errors in generated files name their exact code.

These run on the stored schema tier (no vLLM-Omni in the main environment);
``test_validate_vllm_omni.py`` repeats the planted errors on the real framework.
"""

from __future__ import annotations

import json

import pytest
from scaffold_helpers import copy_tree, make_scaffold

from porting_kit.cli import main as cli
from porting_kit.scaffold.validate import validate_static

DEPLOY = "vllm_omni/deploy/my_tts.yaml"
ADAPTER = "vllm_omni/entrypoints/openai/tts_adapters/my_tts.py"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    return {shape: make_scaffold(root, shape) for shape in ("two-stage", "single-stage-ar")}


def plant(tree, rel, old, new):
    path = tree / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))


PLANTS = {
    # (file, old, new) -> exact code
    "unknown_deploy_key": (DEPLOY, "    max_model_len: 4096\n", "    max_model_len: 4096\n    max_num_seq: 8\n",
                           "scaffold.unknown_deploy_key"),
    "topology_key_in_deploy": (DEPLOY, "    max_model_len: 4096\n",
                               "    max_model_len: 4096\n    model_stage: talker\n", "scaffold.topology_key_in_deploy"),
    "stage_id_mismatch": (DEPLOY, "  - stage_id: 0\n", "  - stage_id: 3\n", "scaffold.stage_id_mismatch"),
    "adapter_without_stage_keys": (ADAPTER, '    stage_keys = frozenset({"my_tts"})\n', "",
                                   "scaffold.adapter_missing_stage_keys"),
}


@pytest.mark.parametrize("plant_name", sorted(PLANTS))
@pytest.mark.parametrize("shape", ["two-stage", "single-stage-ar"])
def test_planted_error_names_its_code(base, tmp_path, plant_name, shape):
    rel, old, new, code = PLANTS[plant_name]
    tree = copy_tree(base[shape], tmp_path / "t")
    plant(tree, rel, old, new)
    report = validate_static(tree, prefer_real=False)
    assert report.status == "fail" and report.exit_code == 1
    assert code in report.codes("fail"), report.codes()
    assert "scaffold.ok" not in report.codes()
    (finding,) = [f for f in report.findings if f.code == code][:1]
    assert finding.check == "scaffold" and finding.where.candidate == rel and finding.hint


def test_messages_name_file_line_and_key(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    plant(tree, DEPLOY, "    max_model_len: 4096\n", "    max_model_len: 4096\n    execution_type: llm_ar\n")
    (f,) = validate_static(tree, prefer_real=False).by_code("scaffold.topology_key_in_deploy")
    assert f.message.startswith(f"{DEPLOY}:") and "'execution_type'" in f.message and "pipeline.py" in f.hint
    assert f.evidence["key"] == "execution_type" and isinstance(f.evidence["line"], int)


def test_top_level_topology_key(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    plant(tree, DEPLOY, "async_chunk: false\n", "async_chunk: false\nmodel_arch: Foo\n")
    assert "scaffold.topology_key_in_deploy" in validate_static(tree, prefer_real=False).codes("fail")


def test_unexplained_max_num_seqs_is_a_warning(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    text = (tree / DEPLOY).read_text()
    lines = [ln for ln in text.splitlines() if "# max_num_seqs" not in ln]
    (tree / DEPLOY).write_text("\n".join(lines).replace("max_num_seqs: 4", "max_num_seqs: 2") + "\n")
    report = validate_static(tree, prefer_real=False)
    assert report.status == "pass" and "scaffold.max_num_seqs_unexplained" in report.codes("warn")


def test_adapter_extracting_unforwarded_value(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    plant(tree, ADAPTER, '        info: dict[str, Any] = {"text": [request.input]}\n',
          '        info: dict[str, Any] = {"text": [request.input]}\n        speed = request.speed\n')
    report = validate_static(tree, prefer_real=False)
    (f,) = report.by_code("scaffold.adapter_unforwarded_value")
    assert "'speed'" in f.message


def test_missing_processor_function(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    plant(tree, "vllm_omni/model_executor/stage_input_processors/my_tts.py",
          "def my_tts2code2wav_token_only(", "def renamed_token_only(")
    assert "scaffold.processor_missing" in validate_static(tree, prefer_real=False).codes("fail")


def test_test_without_markers(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    plant(tree, "tests/e2e/online_serving/test_my_tts_expansion.py", "@pytest.mark.full_model\n", "")
    assert "scaffold.test_marker_missing" in validate_static(tree, prefer_real=False).codes("fail")


def test_cli_json_report_and_exit_codes(base, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli(["validate", "--static", str(base["two-stage"]), "--stored-only", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "porting-kit/report/1" and doc["command"] == "validate" and doc["status"] == "pass"
    assert {f["code"] for f in doc["findings"]} == {"scaffold.tier", "scaffold.ok"}
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    plant(tree, *PLANTS["stage_id_mismatch"][:3])
    assert cli(["validate", "--static", str(tree), "--stored-only"]) == 1


def test_cli_input_errors_exit_2(tmp_path, capsys):
    assert cli(["validate", "--static", str(tmp_path)]) == 2
    assert "not a porting-kit scaffold" in capsys.readouterr().err
    assert cli(["validate"]) == 2
    assert "validate needs PATH" in capsys.readouterr().err


# -- SGLang-Omni ------------------------------------------------------------------------------
SG_YAML = "configs/my_tts.yaml"


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    return make_scaffold(tmp_path_factory.mktemp("sg"), "two-stage", framework="sglang-omni")


@pytest.mark.parametrize("prefer_real", [False, True])
@pytest.mark.parametrize("old,new,code", [
    ("  vocoder:\n", "  vocodr:\n", "scaffold.unknown_stage_override"),
    ("    gpu_memory_fraction: 0.1\n", "    gpu_memory_fraction: 0.1\n    next: tts_engine\n",
     "scaffold.topology_key_in_deploy"),
    ("    gpu_memory_fraction: 0.1\n", "    gpu_memory_fractoin: 0.1\n", "scaffold.unknown_deploy_key"),
])
def test_sglang_planted_override_errors(sg, tmp_path, old, new, code, prefer_real):
    if prefer_real:
        pytest.importorskip("sglang_omni.config", reason="sglang-omni config layer not installed")
    tree = copy_tree(sg, tmp_path / "t")
    plant(tree, SG_YAML, old, new)
    report = validate_static(tree, prefer_real=prefer_real)
    assert code in report.codes("fail"), report.codes()


def test_sglang_real_framework_rejects_broken_wiring(sg, tmp_path):
    pytest.importorskip("sglang_omni.config", reason="sglang-omni config layer not installed")
    tree = copy_tree(sg, tmp_path / "t")
    plant(tree, "sglang_omni/models/my_tts/config.py", '            merge_fn=f"{_PKG}.stages.merge_for_engine",\n', "")
    report = validate_static(tree)
    (f,) = report.by_code("scaffold.sglang_invalid")
    assert "wait_for but no merge_fn" in f.message
    stored = validate_static(tree, prefer_real=False)
    assert "scaffold.sglang_invalid" in stored.codes("fail")  # the stored tier's own graph check
