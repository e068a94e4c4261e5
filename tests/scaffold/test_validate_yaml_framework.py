"""``validate FILE.yaml`` judges a single file by the framework it belongs to (issue 26, point 4)."""

from __future__ import annotations

import pytest
from scaffold_helpers import make_scaffold

from porting_kit.cli import main as cli
from porting_kit.scaffold.validate import validate, yaml_framework


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("yaml_fw")
    return (make_scaffold(base, "two-stage", "sglang-omni"), make_scaffold(base, "two-stage", "vllm-omni"))


def test_the_scaffolds_own_sglang_config_passes(trees, capsys):
    sglang, _ = trees
    path = sglang / "configs" / "my_tts.yaml"
    assert yaml_framework(path) == "sglang-omni"
    report = validate(path)
    assert report.status == "pass", [f.message for f in report.findings if f.status == "fail"]
    assert "scaffold.ok" in report.codes("pass")
    assert "config.py" in report.by_code("scaffold.ok")[0].evidence["config_py"]
    assert cli(["validate", str(path)]) == 0
    assert "vLLM-Omni" not in capsys.readouterr().out


def test_vllm_deploy_yaml_is_still_judged_by_vllm_omni(trees):
    _, vllm = trees
    path = vllm / "vllm_omni" / "deploy" / "my_tts.yaml"
    assert yaml_framework(path) == "vllm-omni"
    assert validate(path).status == "pass"
    bad = path.with_name("bad.yaml")
    bad.write_text(path.read_text() + "config_cls_typo: 1\n")
    assert "scaffold.unknown_deploy_key" in validate(bad, ["static"]).codes("fail")


def test_planted_sglang_faults_get_sglang_codes(trees, tmp_path):
    sglang, _ = trees
    path = sglang / "configs" / "my_tts.yaml"
    text = path.read_text()
    unknown_stage = path.with_name("stage.yaml")
    unknown_stage.write_text(text.replace("  tts_engine:", "  tts_enigne:", 1))
    assert validate(unknown_stage, ["static"]).codes("fail") == ["scaffold.unknown_stage_override"]
    topo = path.with_name("topo.yaml")
    topo.write_text(text.replace("    gpu_memory_fraction:", "    terminal: true\n    gpu_memory_fraction:", 1))
    assert "scaffold.topology_key_in_deploy" in validate(topo, ["static"]).codes("fail")


def test_framework_option_overrides_detection(trees):
    sglang, _ = trees
    path = sglang / "configs" / "my_tts.yaml"
    forced = validate(path, ["static"], framework="vllm-omni")
    assert "scaffold.unknown_deploy_key" in forced.codes("fail")  # the user asked for vLLM-Omni's schema
    assert cli(["validate", str(path), "--framework", "sglang-omni", "--static"]) == 0


def test_a_vllm_deploy_forced_to_sglang_is_one_input_line(trees, capsys):
    """`stages:` as a list under --framework sglang-omni: one InputError line, no AttributeError."""
    _, vllm = trees
    path = vllm / "vllm_omni" / "deploy" / "my_tts.yaml"
    assert cli(["validate", str(path), "--framework", "sglang-omni"]) == 2
    err = capsys.readouterr().err
    assert "its `stages:` is a list" in err and "--framework vllm-omni" in err and "AttributeError" not in err


def test_a_lone_sglang_yaml_is_never_paired_with_another_trees_config(trees, tmp_path):
    """Outside an SGLang-Omni tree the YAML is judged by keys only, even when a sibling project's
    config.py defines its config_cls (the old search went up to path.parent.parent)."""
    sglang, _ = trees
    text = (sglang / "configs" / "my_tts.yaml").read_text()
    other = tmp_path / "other_project"
    (other / "pkg").mkdir(parents=True)
    (other / "pkg" / "config.py").write_text((sglang / "sglang_omni/models/my_tts/config.py").read_text())
    lone = tmp_path / "lone" / "my_tts.yaml"
    lone.parent.mkdir()
    lone.write_text(text.replace("  tts_engine:", "  tts_enigne:", 1))  # would be unknown_stage_override
    report = validate(lone, ["static"], framework="sglang-omni")
    assert report.codes("fail") == [], [f.message for f in report.findings if f.status == "fail"]
    ok = report.by_code("scaffold.ok")[0]
    assert ok.evidence["config_py"] == "" and "not inside an SGLang-Omni tree" in ok.message
    # inside its own tree (a YAML a level deeper than configs/) the stage names are still read
    nested = sglang / "configs" / "deep" / "stage.yaml"
    nested.parent.mkdir()
    nested.write_text(lone.read_text())
    assert validate(nested, ["static"]).codes("fail") == ["scaffold.unknown_stage_override"]


def test_a_scaffolded_tree_says_its_other_model_folders_were_not_validated(trees, tmp_path, capsys):
    """validate TREE --framework vllm-omni after scaffold --into: the manifest decides, and a note on
    stderr names the upstream folders left out (silently dropped before)."""
    import shutil

    _, vllm = trees
    tree = shutil.copytree(vllm, tmp_path / "tree")
    assert cli(["validate", str(tree), "--framework", "vllm-omni", "--static"]) == 0
    assert "were not" not in capsys.readouterr().err  # only the kit's own folder: nothing left out
    other = tree / "vllm_omni/model_executor/models/upstream_tts/pipeline.py"
    other.parent.mkdir()
    other.write_text("")
    report = validate(tree, ["static"], framework="vllm-omni")
    assert report.status == "pass"
    assert len(report.extras["notes"]) == 1 and "(upstream_tts) were not" in report.extras["notes"][0]
    assert cli(["validate", str(tree), "--framework", "vllm-omni", "--static"]) == 0
    assert "(upstream_tts) were not" in capsys.readouterr().err
