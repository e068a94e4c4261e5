"""One deploy-YAML schema: ``porting-kit lint`` and ``porting-kit validate`` give one verdict (issue 11, point 3).

Run over every deploy YAML vLLM-Omni 0.30.0 ships (unpacked from its wheel) and
over planted files. The verdict of a tool on one YAML is the worst status of
its findings: lint's by the rules' severity (PKY101/PKY102 fail, PKY103/PKY104
warn), validate's by the ``scaffold.*`` findings of ``check_deploy_yaml``
(without the pipeline-dependent checks, which a lone YAML cannot have).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from porting_kit.adapters.vllm_omni import schema as vo
from porting_kit.adapters.vllm_omni.deploy_keys import deploy_key_problems, is_deploy_doc
from porting_kit.cli import lint_main
from porting_kit.lint.deploy_yaml import lint_yaml
from porting_kit.lint.rules import RULES
from porting_kit.scaffold.validate import check_deploy_yaml

ALL_CODES = frozenset(RULES)
ORDER = {"pass": 0, "warn": 1, "fail": 2}
WHEEL_GLOB = "vllm_omni-0.30.0-*.whl"


def lint_verdict(path: Path) -> tuple[str, list[str]]:
    findings = lint_yaml(str(path), path.read_text(encoding="utf-8"), ALL_CODES)
    worst = max((f.severity for f in findings), key=ORDER.__getitem__, default="pass")
    return worst, [f.code for f in findings]


def validate_verdict(root: Path, rel: str) -> tuple[str, list[str]]:
    findings = check_deploy_yaml(root, rel, vo.load_schema(), None, single_stage=False)
    worst = max((f.status for f in findings), key=ORDER.__getitem__, default="pass")
    return worst, [f.code for f in findings]


def _find_wheel(tmp: Path) -> Path | None:
    candidates = [os.environ.get("PORTING_KIT_VLLM_OMNI_WHEEL", ""),
                  *glob.glob(str(Path.home() / ".cache" / "porting-kit" / "wheels" / WHEEL_GLOB))]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "vllm-omni==0.30.0", "-d", str(tmp), "-q"], capture_output=True, text=True, timeout=300)
    found = sorted(tmp.glob(WHEEL_GLOB))
    return found[0] if r.returncode == 0 and found else None


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """The folder holding ``vllm_omni/deploy/*.yaml`` from the vllm-omni 0.30.0 wheel."""
    tmp = tmp_path_factory.mktemp("vllm_omni_wheel")
    wheel = _find_wheel(tmp)
    if wheel is None:
        pytest.skip("vllm-omni 0.30.0 wheel not in the pip cache and no package index reachable "
                    "(set PORTING_KIT_VLLM_OMNI_WHEEL=path/to/vllm_omni-0.30.0-py3-none-any.whl)")
    out = tmp / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.endswith((".yaml", ".yml"))]
        zf.extractall(out, members)
    return out


@pytest.mark.slow
def test_lint_and_validate_agree_on_every_shipped_deploy_yaml(shipped):
    files = sorted(p for p in shipped.rglob("*") if p.suffix in (".yaml", ".yml"))
    assert len(files) == 110
    from ruamel.yaml import YAML

    verdicts: dict[str, Counter] = {"lint": Counter(), "validate": Counter()}
    codes: Counter = Counter()
    side_configs = []
    disagree = []
    for path in files:
        rel = path.relative_to(shipped).as_posix()
        doc = YAML(typ="rt").load(path.read_text(encoding="utf-8"))
        if not is_deploy_doc(doc, vo.load_schema().top_level):
            side_configs.append(path.name)
            assert lint_verdict(path) == ("pass", [])
            continue
        (lv, lcodes), (vv, vcodes) = lint_verdict(path), validate_verdict(shipped, rel)
        verdicts["lint"][lv] += 1
        verdicts["validate"][vv] += 1
        codes.update(lcodes + vcodes)
        if lv != vv:
            disagree.append((rel, lv, lcodes, vv, vcodes))
    assert not disagree, disagree
    # vLLM-Omni loads every one of its own files: no fail from either tool
    assert side_configs == ["qwen3_tts_forced_aligner.yaml"]
    assert verdicts["lint"] == verdicts["validate"] == Counter({"pass": 63, "warn": 46})
    assert codes == Counter({"PKY103": 72, "scaffold.max_num_seqs_unexplained": 72,
                             "PKY104": 7, "scaffold.pipeline_key_in_deploy": 7})


PLANTED = {
    # name -> (deploy YAML, verdict, lint codes, validate codes)
    "clean": ("""
        async_chunk: false
        stages:
          - stage_id: 0
            max_num_seqs: 8
            engine_args:
              hf_overrides: {}
        """, "pass", [], []),
    "unknown_key": ("""
        stages:
          - stage_id: 0
            max_num_seq: 8
        """, "fail", ["PKY102"], ["scaffold.unknown_deploy_key"]),
    "topology_key": ("""
        stages:
          - stage_id: 0
            execution_type: llm_ar
        """, "fail", ["PKY101"], ["scaffold.topology_key_in_deploy"]),
    "top_level_pipeline_field": ("""
        model_arch: Foo
        stages:
          - stage_id: 0
        """, "fail", ["PKY101"], ["scaffold.topology_key_in_deploy"]),
    "serial_without_comment": ("""
        stages:
          - stage_id: 0
            max_num_seqs: 1
        """, "warn", ["PKY103"], ["scaffold.max_num_seqs_unexplained"]),
    "serial_with_comment": ("""
        stages:
          - stage_id: 0
            # the upstream tokenizer keeps process-wide state: generation must stay serial
            max_num_seqs: 1
        """, "pass", [], []),
    "serial_in_engine_args": ("""
        stages:
          - stage_id: 0
            engine_args:
              max_num_seqs: 2
        """, "warn", ["PKY103"], ["scaffold.max_num_seqs_unexplained"]),
    "legacy_metadata": ("""
        stages:
          - stage_id: 0
            final_output: true
        """, "warn", ["PKY104"], ["scaffold.pipeline_key_in_deploy"]),
    "stage_without_id": ("""
        stages:
          - devices: "0"
        """, "fail", ["PKY102"], ["scaffold.unparsable"]),
    "unknown_runtime_key": ("""
        stages:
          - stage_id: 0
            runtime:
              device: "0"
        """, "fail", ["PKY102"], ["scaffold.unknown_deploy_key"]),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_yaml_gets_one_verdict(tmp_path, name):
    text, verdict, lint_codes, validate_codes = PLANTED[name]
    path = tmp_path / "deploy" / "m.yaml"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    assert lint_verdict(path) == (verdict, lint_codes)
    assert validate_verdict(tmp_path, "deploy/m.yaml") == (verdict, validate_codes)
    # the command line agrees: exit 1 only on a fail finding
    assert lint_main([str(path)]) == (1 if verdict == "fail" else 0)


def test_one_fact_list_feeds_both(tmp_path):
    from ruamel.yaml import YAML

    text = "stages:\n  - stage_id: 3\n    model_stage: talker\n    max_num_seqs: 1\n    foo: 2\n"
    problems = deploy_key_problems(YAML(typ="rt").load(text), vo.load_schema(), text.splitlines())
    assert [(p.kind, p.key, p.stage_id, p.line) for p in problems] == [
        ("topology", "model_stage", 3, 3), ("unknown", "foo", 3, 5), ("serial_without_reason", "max_num_seqs", 3, 4)]
    assert problems[2].value == 1


def test_stored_schema_is_stamped_and_derived():
    data = vo.stored_data()
    assert list(data) == list(vo.FIELDS)
    assert (data["schema"], data["package"], data["version"]) == (vo.SCHEMA_ID, "vllm-omni", "0.30.0")
    assert "dataclasses.fields()" in data["generated_from"]
    s = vo.load_schema()
    assert vo.CORE_TOPOLOGY - {"final_output"} <= s.topology and "final_output" in s.legacy_metadata
    assert {"hf_overrides", "max_num_seqs", "engine_args", "runtime", "omni_kv_config"} <= s.stage
    assert {"stages", "base_config", "platforms", "duplex_session"} <= s.top_level
    assert not (s.topology & s.stage) and "model_type" in s.top_topology


@pytest.mark.vllm_omni
def test_stored_schema_equals_the_installed_package():
    ok, why = vo.real_available()
    if not ok:
        pytest.skip(why)
    assert vo.data_from_package() == vo.stored_data()
