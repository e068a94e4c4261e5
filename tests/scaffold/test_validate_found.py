"""``validate DIR --framework vllm-omni`` on a port the kit did not generate (issue 26, point 5).

A small vLLM-Omni-shaped tree is written here (no network): a model folder whose pipeline.py
holds two pipelines, a codec file, a stage input processor reading connector keys, a deploy
YAML, and a request adapter registered by ``stage_keys`` whose ``name`` is not the model type.
Clean, it passes both tiers; planted copies give their codes. A test on vLLM-Omni 0.30.0's own
TTS folders (slow; skipped when its wheel cannot be had) asserts zero fail findings there.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from porting_kit.cli import main as cli
from porting_kit.errors import InputError
from porting_kit.scaffold.discover import discover_vllm_omni
from porting_kit.scaffold.validate import validate

PIPELINE = '''\
from vllm_omni.config.stage_config import PipelineConfig, StageExecutionType, StagePipelineConfig

_PROC = "vllm_omni.model_executor.stage_input_processors.tiny_proc"

_TALKER = StagePipelineConfig(
    stage_id=0, model_stage="tiny_talker", execution_type=StageExecutionType.LLM_AR, input_sources=(),
    custom_process_next_stage_input_func=f"{_PROC}.talker2codec",
    sampling_constraints={"detokenize": False, "stop_token_ids": [4097]},
)
_CODEC = StagePipelineConfig(stage_id=1, model_stage="codec", input_sources=(0,), final_output=True,
                             final_output_type="audio")

TINY_PIPELINE = PipelineConfig(model_type="tiny_tts", default_deploy_config_name="tiny_tts.yaml",
                               model_arch="TinyTTSForConditionalGeneration", stages=(_TALKER, _CODEC))
TINY_SOLO = PipelineConfig(model_type="tiny_tts_solo", default_deploy_config_name="tiny_tts_solo.yaml",
                           model_arch="TinyTTSForConditionalGeneration", stages=(_TALKER,))
'''
MODEL = '''\
class TinyTalker:
    def forward(self, input_ids, runtime_additional_information=None):
        info = runtime_additional_information[0]
        return info.get("speaker_name"), info.get("ref_text")
'''
PROCESSOR = '''\
def talker2codec(transfer_manager, request, is_finished=False):
    raw_cfg = getattr(transfer_manager.connector, "config", {}) or {}
    cfg = raw_cfg.get("extra", raw_cfg)
    chunk = int(cfg.get("codec_chunk_frames", 25))
    left = int(cfg.get("codec_left_context_frames", 25))
    ref = int(cfg.get("ref_context_frames") or left)  # a setting of its own beside the deploy's key
    return chunk, left, ref
'''
ADAPTER = '''\
from vllm_omni.entrypoints.openai.tts_adapters import register_tts_adapter
from vllm_omni.entrypoints.openai.tts_adapters.base import ARTTSAdapter, PreparedRequest


@register_tts_adapter
class TinyAdapter(ARTTSAdapter):
    stage_keys = frozenset({"tiny_talker"})
    name = "tiny"

    def validate(self, request):
        return None

    async def build(self, request, sampling_params_list, has_inline_ref_audio):
        info = {"speaker_name": request.voice, "ref_text": request.ref_text}
        if request.language:
            self.pick_language(request.language)  # used here, not forwarded: nothing to prove
        return PreparedRequest(prompt={"input": request.input}, tts_params=info, model_type="tiny_tts")
'''
DEPLOY = '''\
async_chunk: true
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      codec_chunk_frames: 25
      codec_left_context_frames: 72
stages:
  - stage_id: 0
    max_num_seqs: 4
    output_connectors:
      to_stage_1: shm
    default_sampling_params:
      max_tokens: 2048
  - stage_id: 1
    max_num_seqs: 4
    input_connectors:
      from_stage_0: shm
'''
SOLO = '''\
async_chunk: false
stages:
  - stage_id: 0
    max_num_seqs: 4
'''


def write_tree(root: Path) -> Path:
    files = {
        "vllm_omni/model_executor/models/tiny_tts/__init__.py": "",
        "vllm_omni/model_executor/models/tiny_tts/pipeline.py": PIPELINE,
        "vllm_omni/model_executor/models/tiny_tts/talker.py": MODEL,
        "vllm_omni/model_executor/models/not_tts/pipeline.py": PIPELINE.replace("tiny_talker", "vision")
        .replace("tiny_tts", "not_tts"),
        "vllm_omni/model_executor/stage_input_processors/tiny_proc.py": PROCESSOR,
        "vllm_omni/entrypoints/openai/tts_adapters/tiny.py": ADAPTER,
        "vllm_omni/deploy/tiny_tts.yaml": DEPLOY,
        "vllm_omni/deploy/tiny_tts_solo.yaml": SOLO,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def tree(tmp_path):
    return write_tree(tmp_path / "checkout")


def _plant(tree: Path, rel: str, old: str, new: str) -> None:
    path = tree / "vllm_omni" / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


def test_discovery_reads_the_facts_from_the_files(tree):
    root, manifests = discover_vllm_omni(tree)
    assert root == tree.resolve()
    by_type = {m["model_type"]: m for m in manifests}
    assert set(by_type) == {"tiny_tts", "tiny_tts_solo"}  # not_tts: no adapter serves its entry stage
    m = by_type["tiny_tts"]
    assert (m["stage_ids"], m["entry_stage"], m["const_name"], m["mode"]) == ([0, 1], "tiny_talker",
                                                                               "TINY_PIPELINE", "found")
    kinds = {k.split(":", 1)[0]: v for k, v in m["files"].items()}
    assert kinds["deploy"] == "vllm_omni/deploy/tiny_tts.yaml"
    assert kinds["adapter"] == "vllm_omni/entrypoints/openai/tts_adapters/tiny.py"
    assert kinds["processor"] == "vllm_omni/model_executor/stage_input_processors/tiny_proc.py"
    assert by_type["tiny_tts_solo"]["stage_ids"] == [0]
    # the same from the package folder and from the model folder
    assert len(discover_vllm_omni(tree / "vllm_omni")[1]) == 2
    assert len(discover_vllm_omni(tree / "vllm_omni/model_executor/models/tiny_tts")[1]) == 2


def test_clean_port_passes_static_and_consistency(tree, capsys):
    report = validate(tree, framework="vllm-omni")
    assert report.codes("fail") == [] and report.codes("warn") == [], [f.message for f in report.findings]
    assert report.codes("pass").count("scaffold.ok") == 2 and report.codes("pass").count("consistency.ok") == 2
    assert {f.code for f in report.findings if f.status == "skip"} == {"scaffold.tier", "run.skipped",
                                                                        "gpu.skipped"}
    assert cli(["validate", str(tree), "--framework", "vllm-omni", "--tier", "static,consistency"]) == 0


def test_without_framework_the_refusal_says_how(tree, capsys):
    with pytest.raises(InputError, match="--framework vllm-omni"):
        validate(tree)
    assert cli(["validate", str(tree)]) == 2
    assert "--framework vllm-omni" in capsys.readouterr().err


@pytest.mark.parametrize("rel,old,new,code", [
    ("deploy/tiny_tts.yaml", "      max_tokens: 2048\n", "      max_tokens: 2048\n      stop_token_ids: [2]\n",
     "consistency.stop_ids"),
    ("entrypoints/openai/tts_adapters/tiny.py", '"speaker_name": request.voice', '"speaker": request.voice',
     "consistency.field_dropped"),
    ("deploy/tiny_tts.yaml", "      codec_chunk_frames: 25\n", "      codec_chunk_frame: 25\n",
     "consistency.key_mismatch"),
    ("deploy/tiny_tts.yaml", "      to_stage_1: shm\n", "      to_stage_1: shm2\n", "consistency.key_mismatch"),
    ("deploy/tiny_tts.yaml", "  - stage_id: 1\n", "  - stage_id: 2\n", "scaffold.stage_id_mismatch"),
    ("deploy/tiny_tts.yaml", "    max_num_seqs: 4\n", "    max_num_seq: 4\n", "scaffold.unknown_deploy_key"),
    ("model_executor/models/tiny_tts/pipeline.py", 'f"{_PROC}.talker2codec"', 'f"{_PROC}.talker2codecs"',
     "scaffold.processor_missing"),
    ("entrypoints/openai/tts_adapters/tiny.py", 'frozenset({"tiny_talker"})', 'frozenset({"tiny_talker", "x"})\n'
     '    model_archs = frozenset()', None),
])
def test_planted_faults_are_caught_with_their_codes(tree, rel, old, new, code):
    _plant(tree, rel, old, new)
    report = validate(tree, ["static", "consistency"], framework="vllm-omni", model_type="tiny_tts")
    if code is None:
        assert report.codes("fail") == []
    else:
        assert code in report.codes("fail"), [f.message for f in report.findings if f.status != "pass"]


@pytest.mark.slow
@pytest.mark.vllm_omni
def test_vllm_omni_0_30_shipped_tts_folders_have_no_fail_finding(tmp_path):
    """The real thing: every TTS pipeline of vLLM-Omni 0.30.0 (skipped when its wheel cannot be had)."""
    from scaffold_helpers import unpack_tree

    root = unpack_tree(tmp_path / "vo")
    _, manifests = discover_vllm_omni(root)
    assert len(manifests) >= 20  # 28 pipelines in 21 model folders in 0.30.0
    report = validate(root, ["static", "consistency"], framework="vllm-omni")
    assert report.codes("fail") == [], [f.message for f in report.findings if f.status == "fail"]
    assert report.codes("pass").count("consistency.ok") == len(manifests)
    planted = tmp_path / "planted"
    shutil.copytree(root, planted)
    _plant(planted, "deploy/qwen3_tts.yaml", "      codec_chunk_frames: 25\n", "      codec_chunk_frame: 25\n")
    _plant(planted, "deploy/qwen3_tts.yaml", "      min_tokens: 2\n", "      min_tokens: 2\n      stop_token_ids: [1]\n")
    _plant(planted, "entrypoints/openai/tts_adapters/ming_flash_omni_tts.py", '"voice_name"', '"voice_id"')
    qwen = validate(planted / "vllm_omni/model_executor/models/qwen3_tts", ["consistency"], framework="vllm-omni")
    assert sorted(set(qwen.codes("fail"))) == ["consistency.key_mismatch", "consistency.stop_ids"]
    ming = validate(planted / "vllm_omni/model_executor/models/ming_flash_omni", ["consistency"],
                    framework="vllm-omni")
    assert "consistency.field_dropped" in ming.codes("fail")


def test_a_deploy_overlay_is_read_with_its_base_config(tree):
    """bagel_think.yaml of vLLM-Omni 0.30.0 is ``base_config: bagel.yaml`` + ``pipeline:``: its stage
    ids are the base's, not [] (a false scaffold.stage_id_mismatch before)."""
    deploy = tree / "vllm_omni/deploy"
    (deploy / "tiny_base.yaml").write_text(DEPLOY, encoding="utf-8")
    (deploy / "tiny_tts.yaml").write_text("base_config: tiny_base.yaml\npipeline: tiny_tts\n", encoding="utf-8")
    report = validate(tree / "vllm_omni/model_executor/models/tiny_tts", ["static"], framework="vllm-omni",
                      model_type="tiny_tts")
    assert report.codes("fail") == [], [f.message for f in report.findings if f.status == "fail"]
    # the chain is followed, not ignored: a base without stage 1 is still a mismatch
    (deploy / "tiny_base.yaml").write_text(SOLO, encoding="utf-8")
    report = validate(tree, ["static"], framework="vllm-omni", model_type="tiny_tts")
    assert "scaffold.stage_id_mismatch" in report.codes("fail")
