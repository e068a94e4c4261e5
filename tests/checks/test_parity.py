"""Layer parity on a small transformers pair: clean pass and each planted parity fault."""

import json
from pathlib import Path

import pytest

from porting_kit.cli import main
from porting_kit.errors import InputError
from porting_kit.runner import run_check
from porting_kit.spec import load_spec

SPEC = str(Path(__file__).resolve().parents[1] / "specs" / "hf_llama_pair.py")


def test_clean_pair_passes_and_writes_schema(tmp_path):
    out = tmp_path / "r.json"
    assert main(["check", SPEC, "--only", "parity", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "porting-kit/report/1"
    assert report["command"] == "check" and report["status"] == "pass"
    assert report["first_divergence"] is None
    (f,) = report["findings"]
    assert f["code"] == "parity.ok" and f["status"] == "pass"
    # clean: one coarse pass (one hook per decoder layer plus the modules around the stack)
    assert f["evidence"]["compared_modules"] == 8
    assert f["evidence"]["unaligned_reference"] == 0
    assert set(f["where"]) == {"reference", "candidate", "samples"}


def test_nan_origin_names_the_module():
    r = run_check(SPEC, variant="nan", only="parity")
    (nan,) = r.by_code("parity.nan_origin")
    assert nan.where.candidate == "model.layers.1.mlp"
    assert nan.evidence["side"] == "candidate" and nan.evidence["numel"] == 32 * 64
    assert r.exit_code == 1


def test_unmapped_weight_is_named_on_both_sides():
    r = run_check(SPEC, variant="unset", only="parity")
    (f,) = r.by_code("parity.unmapped_weights")
    assert f.evidence["unmapped_reference_names"] == "model.layers.1.mlp.down_proj.weight"
    assert f.evidence["unset_candidate_names"] == "model.layers.1.mlp.down_proj.weight"
    fd = r.by_code("parity.first_divergence")[0]
    assert fd.where.candidate == "model.layers.1.mlp.down_proj"


def test_wrong_theta_is_located_at_the_rotary_module():
    # Both sides are transformers Llama: the rotary module is aligned and its cos/sin differ
    # while its input matched, so it is the first divergence itself.
    r = run_check(SPEC, variant="theta", only="parity")
    (fd,) = r.by_code("parity.first_divergence")
    assert fd.where.reference == "model.rotary_emb" and fd.where.candidate == "model.rotary_emb"
    assert fd.evidence["input_already_differs"] is False
    assert fd.evidence["mismatched"] > 0
    assert r.first_divergence["reference_module"] == "model.rotary_emb"


def test_shape_mismatch_is_exit_2_naming_tensor_and_shapes(capsys):
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.gate_proj\.weight has shape \(128, 64\).*\(192, 64\)"):
        run_check(SPEC, variant="shape", only="parity")
    assert main(["check", SPEC, "--variant", "shape"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gate_proj.weight" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("body, needle", [
    ("def candidate():\n    pass\ndef inputs():\n    return {}\n", "lacks required reference()"),
    ("raise RuntimeError('boom')\n", "spec failed to import: RuntimeError: boom"),
    ("x = 1\n", "nothing to check"),
])
def test_bad_specs_exit_2_with_one_line(tmp_path, capsys, body, needle):
    p = tmp_path / "bad_spec.py"
    p.write_text(body)
    assert main(["check", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and str(p) in err[0]


def test_missing_spec_file_and_unknown_variant(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.py")]) == 2
    assert "spec file not found" in capsys.readouterr().err
    with pytest.raises(InputError, match="unknown variant 'bogus'"):
        load_spec(SPEC, variant="bogus")


def test_spec_function_raising_is_exit_2(tmp_path, capsys):
    p = tmp_path / "raising.py"
    p.write_text("def reference():\n    raise ValueError('no weights here')\n"
                 "def candidate():\n    return None\ndef inputs():\n    return {}\n")
    assert main(["check", str(p), "--only", "parity"]) == 2
    assert "reference() raised ValueError: no weights here" in capsys.readouterr().err


def test_a_projection_shared_with_a_block_does_not_take_the_blocks_divergence():
    spec = str(Path(__file__).resolve().parents[1] / "specs" / "shared_projection.py")
    assert run_check(spec, only="parity").status == "pass"
    r = run_check(spec, variant="eps0", only="parity")
    (f,) = [f for f in r.findings if f.code == "parity.first_divergence"]
    assert (f.where.reference, f.where.candidate) == ("layers.0.ln", "layers.0.ln")
