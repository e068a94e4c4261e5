"""Safe generation (issue 12, point 6): hostile configs and names never reach generated code as code.

Every config value enters generated Python through the ``py`` filter (a literal)
or a validated identifier; comments and docstrings take one-line escaped text;
YAML takes JSON scalars. Wrong-typed or non-finite values and dunder model types
are exit 2 naming the key; ``--into`` refuses a conflicting registry row.
"""

from __future__ import annotations

import ast
import json
import math

import pytest
import yaml
from scaffold_helpers import CONFIG

from porting_kit.cli import main as cli
from porting_kit.errors import InputError
from porting_kit.scaffold.generate import ScaffoldOptions, one_line, py_literal, scaffold

HOSTILE = {
    "quote": {"_name_or_path": "acme/\"x'"},
    "newline_os_system": {"_name_or_path": "a\nimport os; os.system('echo pwned')\n"},
    "triple_quote": {"_name_or_path": 'x"""; os.system("id"); """'},
    "trailing_backslash": {"_name_or_path": "C:\\models\\tts\\"},
    "hostile_key_in_source": {"codec\nimport os; os.system('x') #": {"sampling_rate": 24000, "num_quantizers": 8,
                                                                    "upsampling_ratios": [8, 5, 4, 3]},
                              "codec_config": None},
    "docstring_breaker_key": {'c"""\\': {"eos_token_id": 7}, "eos_token_id": None},
}
TARGETS = [("vllm-omni", "two-stage"), ("vllm-omni", "single-stage-ar"), ("vllm-omni", "native-ar"),
           ("sglang-omni", "two-stage")]


def _calls(tree: ast.AST) -> set[str]:
    return {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_config_gives_parsable_files_without_injected_calls(tmp_path, case):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**CONFIG, **HOSTILE[case]}), encoding="utf-8")
    for framework, shape in TARGETS:
        out = tmp_path / f"{framework}-{shape}"
        scaffold(ScaffoldOptions(framework, shape, "my_tts", cfg, out=out))
        pys = sorted(out.rglob("*.py"))
        assert len(pys) >= 3
        for py in pys:
            tree = ast.parse(py.read_text(encoding="utf-8"), filename=str(py))  # raises if unparsable
            assert "system" not in _calls(tree), f"{py}: injected call"
        for y in out.rglob("*.yaml"):
            assert isinstance(yaml.safe_load(y.read_text(encoding="utf-8")), dict), y


def test_hostile_hf_id_flag_is_exit_2(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG), encoding="utf-8")
    code = cli(["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my_tts",
                "--config", str(cfg), "--out", str(tmp_path / "o"), "--hf-id", 'a"\nimport os'])
    assert code == 2 and "--hf-id" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_name_or_path_that_is_not_an_id_falls_back_with_a_note(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**CONFIG, "_name_or_path": "C:\\models\\tts\\"}), encoding="utf-8")
    result = scaffold(ScaffoldOptions("vllm-omni", "two-stage", "my_tts", cfg, out=tmp_path / "o"))
    assert any("_name_or_path" in n and "your-org/my_tts" in n for n in result.notes)
    e2e = (tmp_path / "o" / "examples/offline_inference/text_to_speech/my_tts/end2end.py").read_text()
    assert 'default="your-org/my_tts"' in e2e


@pytest.mark.parametrize("name", ["__init__", "__main__", "class", "my-tts", "1tts", "import os"])
def test_bad_model_type_is_exit_2(tmp_path, capsys, name):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG), encoding="utf-8")
    code = cli(["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", name,
                "--config", str(cfg), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "model type" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("change", "key"), [
    ({"hidden_size": "big"}, "hidden_size"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"vocab_size": -3}, "vocab_size"),
    ({"max_position_embeddings": float("nan")}, "max_position_embeddings"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": float("inf")}}, "rope_parameters.rope_theta"),
    ({"codec_config": {"sampling_rate": "24k"}}, "codec_config.sampling_rate"),
    ({"eos_token_id": "</s>"}, "eos_token_id"),
    ({"layer_norm_eps": float("nan")}, "layer_norm_eps"),
])
def test_wrong_typed_or_non_finite_value_is_exit_2_naming_the_key(tmp_path, capsys, change, key):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**CONFIG, **change}), encoding="utf-8")  # json writes NaN / Infinity
    code = cli(["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my_tts",
                "--config", str(cfg), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and f"{key} = " in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_py_filter_round_trips_and_refuses_what_it_cannot_write():
    for value in ['a"b\\\n\x00é\u2028', "C:\\x\\", [1, 2.5, "x"], (1,), (), {"a": [None, True]}, 1e300]:
        assert ast.literal_eval(py_literal(value)) == value
    assert py_literal("my_tts") == '"my_tts"'
    with pytest.raises(InputError):
        py_literal(math.nan)
    with pytest.raises(InputError):
        py_literal(object())
    text = one_line('a\n"""b\\')
    assert "\n" not in text and ast.literal_eval(f'"""{text}"""') == 'a """b\\'


# -- --into: a conflicting registry row is refused -------------------------------------------
FAKE_TREE = {
    "vllm_omni/config/stage_config.py": "",
    "vllm_omni/config/pipeline_registry.py": (
        "from vllm_omni.model_executor.models.other.pipeline import OTHER_PIPELINE\n\n"
        "OMNI_PIPELINES = {\n    \"other\": OTHER_PIPELINE,\n}\n"),
    "vllm_omni/model_executor/models/registry.py": (
        "_OMNI_MODELS = {\n    \"OtherForConditionalGeneration\": (\n        \"other\",\n        \"modeling_other\",\n"
        "        \"OtherModel\",\n    ),\n}\n"),
    "vllm_omni/entrypoints/openai/tts_adapters/__init__.py": (
        "from vllm_omni.entrypoints.openai.tts_adapters.base import register_tts_adapter\n\n"
        "from vllm_omni.entrypoints.openai.tts_adapters import (  # noqa: E402\n    other,\n)\n"),
}


def _fake_tree(root, **replace):
    for rel, text in {**FAKE_TREE, **replace}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _into(tmp_path, tree, capsys, arch=None):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG), encoding="utf-8")
    argv = ["scaffold", "--framework", "vllm-omni", "--shape", "single-stage-ar", "--model-type", "my_tts",
            "--config", str(cfg), "--into", str(tree)] + (["--arch", arch] if arch else [])
    return cli(argv), capsys.readouterr().err


def test_into_refuses_a_conflicting_model_row_and_writes_nothing(tmp_path, capsys):
    tree = _fake_tree(tmp_path / "tree")
    before = {p: p.read_text() for p in tree.rglob("*") if p.is_file()}
    code, err = _into(tmp_path, tree, capsys, arch="OtherForConditionalGeneration")
    assert code == 2 and "vllm_omni/model_executor/models/registry.py:2:" in err and "nothing written" in err
    assert {p: p.read_text() for p in tree.rglob("*") if p.is_file()} == before


def test_into_refuses_a_conflicting_pipeline_row(tmp_path, capsys):
    reg = FAKE_TREE["vllm_omni/config/pipeline_registry.py"].replace(
        '"other": OTHER_PIPELINE,', '"other": OTHER_PIPELINE,\n    "my_tts": SOMETHING_ELSE,')
    tree = _fake_tree(tmp_path / "tree", **{"vllm_omni/config/pipeline_registry.py": reg})
    code, err = _into(tmp_path, tree, capsys)
    assert code == 2 and "vllm_omni/config/pipeline_registry.py:5:" in err and "SOMETHING_ELSE" in err
    assert not (tree / "vllm_omni/model_executor/models/my_tts").exists()


def test_into_twice_changes_nothing(tmp_path, capsys):
    tree = _fake_tree(tmp_path / "tree")
    assert _into(tmp_path, tree, capsys)[0] == 0
    snapshot = {p: p.read_text() for p in tree.rglob("*") if p.is_file()}
    assert _into(tmp_path, tree, capsys)[0] == 0
    assert {p: p.read_text() for p in tree.rglob("*") if p.is_file()} == snapshot
