"""``porting-kit validate PATH [--tier ...]`` (issue 12, point 0): tiers as families, single deploy YAMLs.

A scaffold folder gets every tier; a deploy YAML the static and consistency
tiers, paired with the pipeline.py of its tree that names it (``pipeline:`` key or
``default_deploy_config_name``; ``base_config`` followed; a file holding several
pipelines read per pipeline). A tier that cannot run is one ``<family>.skipped``
finding with the reason.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from scaffold_helpers import make_scaffold

import porting_kit
from porting_kit.cli import main as cli
from porting_kit.errors import InputError
from porting_kit.scaffold.validate import TIERS, parse_tiers, validate


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return make_scaffold(tmp_path_factory.mktemp("tiers"), "single-stage-ar")


def test_every_tier_is_a_family_and_impossible_tiers_skip(single):
    report = validate(single)
    assert porting_kit.validate is validate
    families = [f.check for f in report.findings]
    assert families == sorted(families, key=["scaffold", "consistency", "run", "gpu"].index)
    assert {"scaffold.ok", "consistency.ok", "run.ok"} <= set(report.codes("pass"))
    skipped = {f.code: f.message for f in report.findings if f.status == "skip" and f.check in ("run", "gpu")}
    if not torch_cuda():
        assert skipped == {"gpu.skipped": skipped["gpu.skipped"]} and "CUDA" in skipped["gpu.skipped"]
    assert report.exit_code == 0


def test_cli_run_shorthand_and_json(single, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli(["validate", "--run", str(single), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"] == "validate" and [f["code"] for f in doc["findings"]] == ["run.ok"]
    assert doc["findings"][0]["evidence"]["seam"] in ("real", "stand-ins")


def torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_cli_tier_list(single, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli(["validate", str(single), "--tier", "consistency,gpu", "--json", str(out)]) == 0
    codes = [f["code"] for f in json.loads(out.read_text())["findings"]]
    # the GPU tier runs where CUDA is (the H200 suite), else it skips naming why
    assert codes[0] == "consistency.ok" and codes[-1] == ("gpu.ok" if torch_cuda() else "gpu.skipped")


def test_static_flag_keeps_working(single, tmp_path):
    out = tmp_path / "r.json"
    assert cli(["validate", "--static", str(single), "--stored-only", "--json", str(out)]) == 0
    assert {f["check"] for f in json.loads(out.read_text())["findings"]} == {"scaffold"}


@pytest.mark.parametrize("argv", [["--tier", "static,bogus"], ["--tier", ","]])
def test_bad_tier_is_exit_2(single, capsys, argv):
    assert cli(["validate", str(single), *argv]) == 2
    assert "--tier takes" in capsys.readouterr().err


def test_parse_tiers_orders_and_dedups():
    assert parse_tiers("gpu,static,gpu") == ("static", "gpu")
    assert parse_tiers(None) is None and TIERS == ("static", "consistency", "run", "gpu")
    with pytest.raises(InputError):
        parse_tiers("speed")


def test_not_a_yaml_file_is_exit_2(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("hi")
    assert cli(["validate", str(tmp_path / "x.txt")]) == 2
    assert "neither a scaffold folder nor a deploy YAML" in capsys.readouterr().err
    assert cli(["validate", str(tmp_path / "missing")]) == 2


# -- single deploy YAML -------------------------------------------------------------------------
PIPELINES = '''
from vllm_omni.config.stage_config import PipelineConfig, StagePipelineConfig

_TALKER = StagePipelineConfig(stage_id=0, model_stage="talker")

TTS = PipelineConfig(
    model_type="toy_tts",
    default_deploy_config_name="toy_tts.yaml",
    stages=(_TALKER, StagePipelineConfig(stage_id=1, model_stage="code2wav")),
)

TTS_SINGLE = PipelineConfig(
    model_type="toy_tts_single",
    default_deploy_config_name="toy_single.yaml",
    stages=(StagePipelineConfig(stage_id=0, model_stage="talker"),),
)
'''
BASE = '''
async_chunk: true
connectors:
  shm:
    name: SharedMemoryConnector
stages:
  - stage_id: 0
    max_num_seqs: 8
    output_connectors:
      to_stage_1: shm
  - stage_id: 1
    max_num_seqs: 8
    input_connectors:
      from_stage_0: shm
'''


def _tree(tmp_path, files: dict[str, str]):
    pkg = tmp_path / "vllm_omni"
    (pkg / "model_executor/models/toy_tts").mkdir(parents=True)
    (pkg / "model_executor/models/toy_tts/pipeline.py").write_text(textwrap.dedent(PIPELINES))
    (pkg / "deploy").mkdir()
    for name, text in files.items():
        (pkg / "deploy" / name).write_text(textwrap.dedent(text).lstrip())
    return pkg / "deploy"


def test_yaml_paired_with_its_pipeline_passes(tmp_path):
    deploy = _tree(tmp_path, {"toy_tts.yaml": BASE})
    report = validate(deploy / "toy_tts.yaml")
    assert report.codes() == ["scaffold.ok", "consistency.ok"]
    assert report.findings[0].evidence["pipeline"].endswith("toy_tts/pipeline.py:6")


def test_yaml_stage_the_paired_pipeline_lacks(tmp_path):
    deploy = _tree(tmp_path, {"toy_single.yaml": "stages:\n  - stage_id: 0\n    max_num_seqs: 8\n"
                                                 "  - stage_id: 1\n    max_num_seqs: 8\n"})
    (f,) = validate(deploy / "toy_single.yaml", "static").by_code("scaffold.stage_id_mismatch")
    assert f.status == "fail" and "pipeline.py:12" in f.message and "[1]" in f.message


def test_base_config_stages_are_inherited(tmp_path):
    overlay = "base_config: toy_tts.yaml\nstages:\n  - stage_id: 1\n    max_num_seqs: 16\n"
    deploy = _tree(tmp_path, {"toy_tts.yaml": BASE, "toy_tts_big.yaml": "pipeline: toy_tts\n" + overlay})
    report = validate(deploy / "toy_tts_big.yaml")
    assert report.codes() == ["scaffold.ok", "consistency.ok"]
    assert report.findings[0].evidence["base_config"] == "toy_tts_big.yaml <- toy_tts.yaml"
    bad = _tree(tmp_path / "b", {"toy_tts.yaml": BASE,
                                 "toy_tts_big.yaml": "pipeline: toy_tts\n" + overlay.replace("stage_id: 1", "stage_id: 4")})
    assert "scaffold.stage_id_mismatch" in validate(bad / "toy_tts_big.yaml").codes("fail")


def test_yaml_connector_mistakes_are_consistency_findings(tmp_path):
    deploy = _tree(tmp_path, {"toy_tts.yaml": BASE.replace("from_stage_0: shm", "from_stage_0: nixl")})
    report = validate(deploy / "toy_tts.yaml")
    (f,) = [f for f in report.findings if f.code == "consistency.key_mismatch" and f.evidence["key"] == "nixl"]
    assert "toy_tts.yaml:13" in f.message and "connectors defines only ['shm']" in f.message


def test_yaml_gets_no_run_tier(tmp_path, capsys):
    deploy = _tree(tmp_path, {"toy_tts.yaml": BASE})
    report = validate(deploy / "toy_tts.yaml", "run")
    (f,) = report.findings
    assert f.code == "run.skipped" and "single deploy YAML" in f.message
    assert cli(["validate", str(deploy / "toy_tts.yaml")]) == 0


def test_adapter_inheriting_build_from_a_concrete_adapter_is_not_flagged(single, tmp_path):
    import shutil

    from porting_kit.scaffold.validate import check_adapter

    tree = tmp_path / "t"
    shutil.copytree(single, tree)
    rel = "vllm_omni/entrypoints/openai/tts_adapters/my_tts.py"
    src = (tree / rel).read_text()
    start, end = src.index("    async def build("), src.index("        return PreparedRequest(")
    body_end = src.index("        )\n", end) + len("        )\n")
    without_build = src[:start] + src[body_end:]
    (tree / rel).write_text(without_build)
    assert [f.code for f in check_adapter(tree, rel, "my_tts", "my_tts")] == ["scaffold.adapter_build_failed"]
    (tree / rel).write_text(without_build.replace("(ARTTSAdapter):", "(MossTTSAdapter):"))
    assert check_adapter(tree, rel, "my_tts", "my_tts") == []


@pytest.mark.parametrize("shape", ["two-stage", "single-stage-ar", "native-ar"])
def test_clean_scaffold_of_every_shape_passes_static_and_consistency(shape, tmp_path):
    """The generated files agree with each other: what the adapter forwards, the stages read;
    what stage 0 writes, the processor and stage 1 read."""
    root = make_scaffold(tmp_path, shape)
    report = validate(root, tiers="static,consistency")
    bad = [(f.code, f.message) for f in report.findings if f.status in ("fail", "warn")]
    assert bad == [] and {"scaffold.ok", "consistency.ok"} <= set(report.codes("pass"))
