"""validate --static on the real vLLM-Omni 0.30.0 config layer (the second CI environment,
``.ci/vllm-omni-env.sh``). Skipped in the main environment, which has no vLLM-Omni."""

from __future__ import annotations

import pytest
from scaffold_helpers import SHAPES, copy_tree, make_scaffold, unpack_tree, write_config

from porting_kit.adapters.vllm_omni.schema import real_available
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold
from porting_kit.scaffold.validate import validate_static

AVAILABLE, WHY = real_available()
pytestmark = [pytest.mark.vllm_omni,
              pytest.mark.skipif(not AVAILABLE, reason=f"vLLM-Omni config layer not importable ({WHY}); "
                                 "run in the .ci/vllm-omni-env.sh environment")]

DEPLOY = "vllm_omni/deploy/my_tts.yaml"
ADAPTER = "vllm_omni/entrypoints/openai/tts_adapters/my_tts.py"


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return {shape: make_scaffold(root, shape) for shape in SHAPES}


def plant(tree, rel, old, new):
    path = tree / rel
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_passes_the_real_loader(trees, shape):
    report = validate_static(trees[shape])
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]
    (tier,) = report.by_code("scaffold.tier")
    assert tier.status == "pass" and tier.evidence["tier"] == "real" and tier.evidence["version"] == "0.30.0"


@pytest.mark.parametrize("rel,old,new,code", [
    (DEPLOY, "    max_model_len: 4096\n", "    max_model_len: 4096\n    max_num_seq: 8\n", "scaffold.unknown_deploy_key"),
    (DEPLOY, "    max_model_len: 4096\n", "    max_model_len: 4096\n    owns_tokenizer: true\n",
     "scaffold.topology_key_in_deploy"),
    (DEPLOY, "  - stage_id: 0\n", "  - stage_id: 5\n", "scaffold.stage_id_mismatch"),
    (ADAPTER, '    stage_keys = frozenset({"my_tts"})\n', "", "scaffold.adapter_missing_stage_keys"),
])
def test_planted_errors_fail_on_the_real_tier(trees, tmp_path, rel, old, new, code):
    tree = copy_tree(trees["two-stage"], tmp_path / "t")
    plant(tree, rel, old, new)
    report = validate_static(tree)
    assert code in report.codes("fail"), report.codes()
    assert report.by_code("scaffold.tier")[0].evidence["tier"] == "real"


def test_real_loader_catches_what_only_it_sees(trees, tmp_path):
    # a pipeline without a final stage: the real PipelineConfig raises
    tree = copy_tree(trees["single-stage-ar"], tmp_path / "a")
    plant(tree, "vllm_omni/model_executor/models/my_tts/pipeline.py", "final_output=True,", "final_output=False,")
    (f,) = validate_static(tree).by_code("scaffold.pipeline_invalid")
    assert "No terminal stage" in f.message
    # an adapter serving another stage key: detect_tts_model_type does not find it
    tree = copy_tree(trees["single-stage-ar"], tmp_path / "b")
    plant(tree, ADAPTER, 'name = "my_tts"\n', 'name = "my_tts"\n    detect_priority = 200\n')
    plant(tree, ADAPTER, 'frozenset({"my_tts"})', 'frozenset({"my_tts", "moss_tts_nano"})')
    report = validate_static(tree)
    assert report.status == "pass"  # still detected by its own stage key
    # build() dropping the seed: the real build() output shows it
    tree = copy_tree(trees["native-ar"], tmp_path / "c")
    plant(tree, ADAPTER, '            info["seed"] = [int(seed)]\n', '            info["seed_"] = [int(seed)]\n')
    (f,) = validate_static(tree).by_code("scaffold.adapter_drops_value")
    assert "seed=7" in f.message


def test_into_real_tree_validates_on_the_real_tier(tmp_path):
    tree = unpack_tree(tmp_path / "tree")
    scaffold(ScaffoldOptions("vllm-omni", "single-stage-ar", "my_tts", write_config(tmp_path), into=tree))
    report = validate_static(tree)
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]
    assert report.by_code("scaffold.tier")[0].evidence["tier"] == "real"
