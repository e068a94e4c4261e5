"""Spec names module_tolerances / allow_divergence and the JSON report's "alignment" table."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.errors import InputError  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

TINY = Path(__file__).resolve().parents[2] / "tests" / "specs" / "decode_tiny.py"


def _parity(**names):
    spec = load_spec(TINY, variant="mlp_scale")
    for k, v in names.items():
        setattr(spec.module, k, v)
    return run_check(spec, only="parity")


def test_planted_mlp_fault_without_overrides_is_located():
    report = _parity()
    (f,) = report.by_code("parity.first_divergence")
    assert f.where.reference == "model.layers.1.mlp"
    rows = report.to_dict()["alignment"]
    assert {"pairs", "unaligned_reference", "unaligned_candidate"} == set(rows)
    pair = next(r for r in rows["pairs"] if r["reference"] == "model.layers.1")
    assert pair["candidate"] == "model.layers.1" and pair["source"] in {"weights", "parent", "module_map", "order"}


def test_loose_module_tolerances_pass():
    report = _parity(module_tolerances={"*": {"atol": 1e-2, "rtol": 5e-2}})
    assert report.codes() == ["parity.ok"]


def test_tolerance_on_other_modules_changes_nothing():
    report = _parity(module_tolerances={"model.layers.0*": {"atol": 1e-2, "rtol": 5e-2}})
    assert report.by_code("parity.first_divergence")[0].where.reference == "model.layers.1.mlp"


def test_allow_divergence_everywhere_passes():
    assert _parity(allow_divergence=["*"]).codes() == ["parity.ok"]


@pytest.mark.parametrize("names", [{"module_tolerances": {"*": {"atl": 1e-3}}},
                                   {"module_tolerances": {"*": {"atol": -1}}},
                                   {"allow_divergence": "model.*"}])
def test_malformed_overrides_are_input_errors(names):
    with pytest.raises(InputError, match="module_tolerances|allow_divergence"):
        _parity(**names)
