"""Deploy-YAML rules (PKY) and test-marker rules (PKT)."""

from __future__ import annotations

import contextlib
import io
import textwrap

from porting_kit.adapters.vllm_omni.schema import load_schema
from porting_kit.cli import lint_main as main


def _run(*args: str) -> tuple[int, list[str]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(args))
    return rc, buf.getvalue().splitlines()


def _write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


GOOD_DEPLOY = """
    # Single-stage AR TTS.
    async_chunk: false
    stages:
      - stage_id: 0
        # the upstream model keeps process-wide RNG state: generation must stay serial
        max_num_seqs: 1
        gpu_memory_utilization: 0.3
        enforce_eager: true
        devices: "0"
        default_sampling_params:
          temperature: 1.0
      - stage_id: 1
        max_num_seqs: 8
        engine_args:
          max_model_len: 4096
        runtime:
          devices: "1"
    """


def test_schema_is_the_real_vllm_omni_one():
    s = load_schema()
    assert s.version == "0.30.0"
    assert {"execution_type", "model_stage", "input_sources", "final_output", "owns_tokenizer",
            "engine_output_type"} <= s.topology
    assert {"max_num_seqs", "gpu_memory_utilization", "devices", "engine_args", "runtime"} <= s.stage
    assert "stages" in s.top_level and "base_config" in s.top_level
    assert not (s.topology & s.stage)


def test_clean_deploy_passes(tmp_path):
    path = _write(tmp_path / "deploy" / "model.yaml", GOOD_DEPLOY)
    assert _run(str(path)) == (0, [])


def test_topology_unknown_and_serial_without_reason(tmp_path):
    path = _write(tmp_path / "deploy" / "model.yaml", """
        async_chunk: false
        stages:
          - stage_id: 0
            execution_type: llm_ar
            final_output: true
            max_num_seqs: 1
            gpu_memory_utilisation: 0.3
        """)
    rc, lines = _run(str(path))
    assert rc == 1
    got = [(ln.split(":")[1], ln.split()[1]) for ln in lines]
    # final_output in a stage is legacy stage metadata vLLM-Omni ignores (its own files carry it): a warn
    assert got == [("4", "PKY101"), ("5", "PKY104"), ("6", "PKY103"), ("7", "PKY102")]
    assert "`execution_type`" in lines[0] and "gpu_memory_utilisation" in lines[3]
    assert [" [warn] " in ln for ln in lines] == [False, True, True, False]


def test_reason_on_the_line_or_in_a_header(tmp_path):
    on_line = _write(tmp_path / "deploy" / "a.yaml", """
        stages:
          - stage_id: 0
            max_num_seqs: 2  # codec keeps one streaming state per process
        """)
    header = _write(tmp_path / "deploy" / "b.yaml", """
        # Notable choices:
        #   * max_num_seqs=1 - the tokenizer keeps process-wide state
        stages:
          - stage_id: 0
            devices: "0"
            max_num_seqs: 1
        """)
    unrelated = _write(tmp_path / "deploy" / "c.yaml", """
        # GPU placement
        stages:
          - stage_id: 0
            devices: "0"
            max_num_seqs: 1
        """)
    assert _run(str(on_line)) == (0, [])
    assert _run(str(header)) == (0, [])
    rc, lines = _run(str(unrelated))
    # PKY103 is advice: printed, marked [warn], exit 0
    assert rc == 0 and [ln.split()[1:3] for ln in lines] == [["PKY103", "[warn]"]]


def test_stages_list_makes_a_deploy_file_anywhere(tmp_path):
    deploy = _write(tmp_path / "conf" / "x.yaml", "stages:\n  - stage_id: 0\n    model_stage: talker\n")
    other = _write(tmp_path / "conf" / "y.yaml", "model_stage: talker\nfoo: 1\n")
    rc, lines = _run(str(deploy), str(other))
    assert rc == 1 and len(lines) == 1 and lines[0].startswith(str(deploy) + ":3:5: PKY101")


def test_removed_stage_args_and_platform_override(tmp_path):
    path = _write(tmp_path / "deploy" / "m.yaml", """
        stage_args:
          - stage_id: 0
        platforms:
          npu:
            stages:
              - stage_id: 0
                owns_tokenizer: true
                max_num_seqs: 1  # NPU graph capture supports one sequence
        """)
    rc, lines = _run(str(path))
    assert rc == 1 and [ln.split()[1] for ln in lines] == ["PKY102", "PKY101"]


def test_bad_yaml_is_a_finding_not_a_crash(tmp_path):
    path = _write(tmp_path / "deploy" / "bad.yaml", "stages:\n  - stage_id: 0\n   max_num_seqs: [1\n")
    rc, lines = _run(str(path))
    assert rc == 1 and len(lines) == 1 and " PKY000 " in lines[0]
    scalar = _write(tmp_path / "deploy" / "scalar.yaml", "- 1\n- 2\n")
    rc, lines = _run(str(scalar))
    assert rc == 1 and " PKY000 " in lines[0]


def test_side_config_in_deploy_dir_is_skipped(tmp_path):
    side = _write(tmp_path / "deploy" / "forced_aligner.yaml", "forced_aligner:\n  model: x\n  runner: pooling\n")
    typo = _write(tmp_path / "deploy" / "typo.yaml", "async_chunk: false\nstage:\n  - stage_id: 0\n")
    assert _run(str(side)) == (0, [])
    rc, lines = _run(str(typo))
    assert rc == 1 and [ln.split()[1] for ln in lines] == ["PKY102"]


def test_yaml_noqa(tmp_path):
    path = _write(tmp_path / "deploy" / "m.yaml", "stages:\n  - stage_id: 0\n    max_num_seqs: 1  # noqa: PKY103\n")
    assert _run(str(path)) == (0, [])


def test_real_moss_tts_nano_deploy_passes():
    """vLLM-Omni's own deploy file explains max_num_seqs=1 in its header."""
    import pathlib

    real = pathlib.Path("/work/src/vllm_omni/vllm_omni/deploy/moss_tts_nano.yaml")
    if not real.exists():
        import pytest
        pytest.skip("vllm-omni source not unpacked here")
    assert _run(str(real)) == (0, [])


# ---- PKT test markers ------------------------------------------------------------------------

def test_test_file_without_markers(tmp_path):
    path = _write(tmp_path / "tests" / "model_executor" / "test_x.py", """
        import pytest

        def test_one():
            assert 1
        """)
    rc, lines = _run(str(path))
    assert rc == 1
    assert [ln.split()[1] for ln in lines] == ["PKT101", "PKT102"]
    assert lines[0].startswith(f"{path}:1:1: PKT101")


def test_test_file_with_tier_but_no_hardware(tmp_path):
    path = _write(tmp_path / "tests" / "test_y.py", """
        import pytest

        @pytest.mark.core_model
        def test_one():
            assert 1
        """)
    rc, lines = _run(str(path))
    assert rc == 1 and [ln.split()[1] for ln in lines] == ["PKT102"]


def test_test_file_with_markers_passes(tmp_path):
    a = _write(tmp_path / "tests" / "test_a.py", """
        import pytest

        pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

        def test_one():
            assert 1
        """)
    b = _write(tmp_path / "tests" / "e2e" / "test_b.py", """
        import pytest
        from tests.helpers.mark import hardware_test

        @pytest.mark.advanced_model
        @hardware_test(res={"cuda": "L4"})
        def test_two():
            assert 1
        """)
    helper = _write(tmp_path / "tests" / "helpers.py", "def f():\n    return 1\n")
    assert _run(str(a), str(b), str(helper)) == (0, [])
