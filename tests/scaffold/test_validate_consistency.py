"""The consistency tier (issue 12, point 2): the generated files agree with each other and the config.

Each planted cross-file mistake edits ONE file of a copied scaffold and must give
its exact ``consistency.*`` code, with both files (and lines) named; the clean
twins give ``consistency.ok``. The contradictions measured on the two-stage
templates of main (talker emits ``(1, 15)``, processor expects ``(frames, 16)``;
``left_context_size`` written under ``meta.`` and read bare) are planted as
excerpts of those templates, with their fixed twins.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from scaffold_helpers import copy_tree, make_scaffold

from porting_kit.scaffold.validate import validate

M = "vllm_omni/model_executor/models/my_tts"
MODEL = f"{M}/modeling_my_tts.py"
CODE2WAV = f"{M}/my_tts_code2wav.py"
PROC = "vllm_omni/model_executor/stage_input_processors/my_tts.py"
PIPELINE = f"{M}/pipeline.py"
DEPLOY = "vllm_omni/deploy/my_tts.yaml"
ADAPTER = "vllm_omni/entrypoints/openai/tts_adapters/my_tts.py"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("consistency")
    trees = {shape: make_scaffold(root, shape) for shape in ("two-stage", "single-stage-ar")}
    trees["sglang"] = make_scaffold(root, "two-stage", framework="sglang-omni")
    return trees


def consistency(tree):
    report = validate(tree, "consistency")
    assert {f.check for f in report.findings} == {"consistency"}
    return report


def edit(tree, rel, fn):
    path = tree / rel
    new = fn(path.read_text(encoding="utf-8"))
    assert new != path.read_text(encoding="utf-8"), f"the plant changed nothing in {rel}"
    path.write_text(new, encoding="utf-8")


def the_one(report, code, **evidence):
    hits = [f for f in report.findings if f.code == code
            and all(f.evidence.get(k) == v for k, v in evidence.items())]
    assert hits, (code, evidence, [(f.code, f.evidence) for f in report.findings])
    assert hits[0].status == "fail"
    return hits[0]


def names_both(finding, a, b):
    assert a in finding.message and b in finding.message, finding.message
    assert {finding.evidence["file"], finding.evidence["other_file"]} >= {a.split(":")[0], b.split(":")[0]} - {""}


# -- clean twins ---------------------------------------------------------------------------------
def test_single_stage_scaffold_is_consistent(base):
    report = consistency(base["single-stage-ar"])
    assert report.codes() == ["consistency.ok"] and report.exit_code == 0


def test_sglang_scaffold_is_consistent(base):
    assert consistency(base["sglang"]).codes() == ["consistency.ok"]


# -- planted cross-file mistakes -----------------------------------------------------------------
def test_pipeline_stop_ids_vs_config_eos(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    edit(tree, PIPELINE, lambda t: re.sub(r'"stop_token_ids": \[[^\]]*\]', '"stop_token_ids": [999]', t))
    f = the_one(consistency(tree), "consistency.stop_ids", pipeline="[999]", config="[2]")
    assert PIPELINE in f.message and "eos_token_id" in f.message and f.evidence["line"] > 1


def test_model_stop_ids_vs_pipeline(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    edit(tree, MODEL, lambda t: t + "\nSTOP_TOKEN_IDS = [5]\n")
    f = the_one(consistency(tree), "consistency.stop_ids", model="[5]")
    names_both(f, PIPELINE, MODEL)


def test_deploy_stop_ids_vs_pipeline(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    edit(tree, DEPLOY, lambda t: t.replace("      seed: 42\n", "      seed: 42\n      stop_token_ids: [77]\n", 1))
    f = the_one(consistency(tree), "consistency.stop_ids", deploy="[77]")
    names_both(f, DEPLOY, PIPELINE)


def test_reference_text_forwarded_under_a_key_the_stage_never_reads(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    edit(tree, ADAPTER, lambda t: t.replace('info["ref_text"]', 'info["reference_text"]'))
    f = the_one(consistency(tree), "consistency.field_dropped", field="ref_text", key="reference_text")
    names_both(f, ADAPTER, MODEL)


def test_language_read_but_never_forwarded(base, tmp_path):
    tree = copy_tree(base["single-stage-ar"], tmp_path / "t")
    edit(tree, ADAPTER, lambda t: t.replace('info["language"] = [request.language]',
                                            'lang = [request.language]\n            info["lang_unused"] = lang'))
    f = the_one(consistency(tree), "consistency.field_dropped", field="language")
    names_both(f, ADAPTER, MODEL)


def test_stage_names_an_undefined_connector(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    edit(tree, DEPLOY, lambda t: t.replace("to_stage_1: connector_of_shared_memory", "to_stage_1: shm_connector"))
    f = the_one(consistency(tree), "consistency.key_mismatch", key="shm_connector")
    assert f"{DEPLOY}:" in f.message and "connectors defines only" in f.message
    # both ends of the edge now disagree too
    the_one(consistency(tree), "consistency.key_mismatch", key="shm_connector")


def test_connector_edge_to_a_missing_stage(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    edit(tree, DEPLOY, lambda t: t.replace("to_stage_1:", "to_stage_2:"))
    f = the_one(consistency(tree), "consistency.key_mismatch", key="to_stage_2")
    assert "no stage 2" in f.message


def test_chunk_key_written_under_another_name(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    edit(tree, DEPLOY, lambda t: t.replace("codec_chunk_frames:", "codec_chunk_size:"))
    f = the_one(consistency(tree), "consistency.key_mismatch", written="codec_chunk_size",
                read="codec_chunk_frames")
    names_both(f, DEPLOY, PROC)


def test_producer_width_vs_processor(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    edit(tree, MODEL, lambda t: t + "\nCODES_PER_FRAME = 3\n")
    f = the_one(consistency(tree), "consistency.handoff_shape", emitted=3)
    names_both(f, MODEL, PROC)


def test_processor_width_vs_consumer(base, tmp_path):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    edit(tree, CODE2WAV, lambda t: t + "\nNUM_CODEBOOKS = 5\n")
    f = the_one(consistency(tree), "consistency.handoff_shape", decoded=5)
    names_both(f, PROC, CODE2WAV)


def test_sglang_merge_fn_names_a_missing_function(base, tmp_path):
    tree = copy_tree(base["sglang"], tmp_path / "t")
    edit(tree, "sglang_omni/models/my_tts/config.py", lambda t: t.replace(".stages.merge_for_engine",
                                                                         ".stages.merge_for_tts"))
    f = the_one(consistency(tree), "consistency.key_mismatch", key="merge_for_tts")
    names_both(f, "sglang_omni/models/my_tts/config.py", "sglang_omni/models/my_tts/stages.py")


# -- the contradictions measured on main's two-stage templates -----------------------------------
TALKER = '''
NUM_CODEBOOKS = 8


class Talker:
    def forward(self, infos):
        frames = [self.predict(i) for i in infos]
        audio = stack(frames) if frames else torch.zeros((0, {width}), dtype=torch.long)
        return OmniOutput(text_hidden_states=None, multimodal_outputs={{"codes": {{"audio": audio}}}})
'''
PROCESSOR = '''
NUM_CODEBOOKS = 8


def _frames(multimodal_output):
    codes = multimodal_output.get("codes.audio")
    if codes.ndim != 2 or codes.shape[1] != NUM_CODEBOOKS:
        raise ValueError("bad shape")
    return codes


def my_tts2code2wav_async_chunk(transfer_manager, multimodal_output, request, is_finished=False):
    flat = _frames(multimodal_output).T.reshape(-1)
    return OmniPayloadStruct(codes=CodesStruct(audio=flat), meta=MetaStruct(left_context_size=8, finished=True))
'''
CONSUMER = '''
NUM_CODEBOOKS = 8


class Code2Wav:
    def forward(self, input_ids, runtime_additional_information=None):
        infos = runtime_additional_information or []
        context = int((infos[0] if infos else {{}}).get({key!r}, 0) or 0)
        return self.decode(input_ids.reshape(NUM_CODEBOOKS, -1), context)
'''


@pytest.mark.parametrize("fixed", [False, True])
def test_main_two_stage_contradictions_and_their_fix(base, tmp_path, fixed):
    tree = copy_tree(base["two-stage"], tmp_path / "t")
    (tree / MODEL).write_text(textwrap.dedent(TALKER.format(width="NUM_CODEBOOKS" if fixed else
                                                            "max(NUM_CODEBOOKS - 1, 0)")))
    (tree / PROC).write_text(textwrap.dedent(PROCESSOR))
    (tree / CODE2WAV).write_text(textwrap.dedent(CONSUMER.format(key="meta.left_context_size" if fixed
                                                                 else "left_context_size")))
    report = consistency(tree)
    shape = [f for f in report.findings if f.code == "consistency.handoff_shape"]
    keys = [f for f in report.findings if f.code == "consistency.key_mismatch"]
    if fixed:
        assert shape == [] and keys == []
        return
    (s,) = shape
    assert (s.evidence["emitted"], s.evidence["accepted"]) == (7, 8)
    names_both(s, f"{MODEL}:8", f"{PROC}:7")
    (k,) = keys
    assert (k.evidence["written"], k.evidence["read"]) == ("meta.left_context_size", "left_context_size")
    names_both(k, f"{PROC}:14", f"{CODE2WAV}:8")
