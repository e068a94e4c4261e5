"""Unit tests of porting_kit.probes.tolerance: defaults per dtype, overrides, bounds, bad input."""

import math

import pytest
import torch

from porting_kit.errors import InputError
from porting_kit.probes.tolerance import DEFAULTS, Tolerance, dtype_name, tolerance_for


@pytest.mark.parametrize("dtype, rtol, atol, rel", [
    (torch.float32, 1.3e-6, 1e-5, None),
    (torch.float64, 1e-7, 1e-7, None),
    (torch.bfloat16, 1.6e-2, 1e-5, 2e-2),
    (torch.float16, 1e-3, 1e-5, 5e-3),
])
def test_defaults_per_dtype(dtype, rtol, atol, rel):
    tol = tolerance_for(dtype)
    assert (tol.dtype, tol.rtol, tol.atol, tol.rel) == (dtype_name(dtype), rtol, atol, rel)
    assert tol.elementwise is (rel is None)


def test_dtype_given_by_name_equals_dtype_given_as_torch_dtype():
    assert tolerance_for("bfloat16") == tolerance_for(torch.bfloat16) == DEFAULTS["bfloat16"]
    assert dtype_name(torch.float16) == "float16"
    assert dtype_name("float16") == "float16"


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, "uint8"])
def test_dtype_without_default_gets_float32(dtype):
    assert tolerance_for(dtype) is DEFAULTS["float32"]


def test_override_replaces_only_the_given_fields():
    tol = tolerance_for(torch.float32, {"float32": {"rtol": 1e-5, "atol": 1e-4}})
    assert (tol.dtype, tol.rtol, tol.atol, tol.rel) == ("float32", 1e-5, 1e-4, None)
    # another dtype's override leaves this one at its default
    assert tolerance_for(torch.float32, {"bfloat16": {"rel": 0.05}}) == DEFAULTS["float32"]
    assert tolerance_for(torch.bfloat16, {"bfloat16": {"rel": 0.05}}).rel == 0.05


def test_override_with_rel_makes_an_elementwise_dtype_tensor_level():
    tol = tolerance_for("float32", {"float32": {"rel": 1e-3}})
    assert not tol.elementwise
    assert tol.tensor_bound(100, 2.0) == pytest.approx(2e-3)


def test_integer_override_values_become_floats():
    tol = tolerance_for("float32", {"float32": {"atol": 1}})
    assert tol.atol == 1.0 and isinstance(tol.atol, float)


@pytest.mark.parametrize("overrides, words", [
    ({"float8": {"rel": 0.1}}, "unknown dtype 'float8'"),
    ({"float32": {"rtl": 1e-5}}, "unknown field(s) rtl"),
    # a misspelt field under a dtype other than the compared one is still an error
    ({"bfloat16": {"rell": 0.1}}, "unknown field(s) rell"),
    ({"float32": {"rtol": "tight"}}, "rtol"),
    ({"float32": {"atol": -1e-5}}, "atol"),
    ({"float32": {"rtol": float("nan")}}, "rtol"),
    ({"float32": {"rtol": True}}, "rtol"),
    ({"float32": 1e-5}, "float32"),
    ([("float32", {"rtol": 1e-5})], "tolerances"),
])
def test_bad_overrides_raise_input_error(overrides, words):
    with pytest.raises(InputError) as err:
        tolerance_for(torch.float32, overrides)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_tensor_bound_elementwise_and_tensor_level():
    fp32 = DEFAULTS["float32"]
    # atol * sqrt(n) + rtol * ||b|| = 1e-5 * 10 + 1.3e-6 * 2
    assert fp32.tensor_bound(100, 2.0) == pytest.approx(1e-4 + 2.6e-6, rel=1e-12)
    assert fp32.tensor_bound(0, 0.0) == pytest.approx(1e-5)  # numel below 1 counts as 1
    assert DEFAULTS["bfloat16"].tensor_bound(100, 2.0) == pytest.approx(0.04)


def test_tensor_bound_is_implied_by_the_elementwise_bound():
    """Every element at its elementwise limit gives a difference norm at most tensor_bound."""
    b = torch.linspace(-3, 3, 1000, dtype=torch.float64)
    tol = DEFAULTS["float32"]
    d = tol.atol + tol.rtol * b.abs()
    assert float(d.norm()) <= tol.tensor_bound(b.numel(), float(b.norm()))
    assert float(d.norm()) > 0.5 * tol.tensor_bound(b.numel(), float(b.norm()))


def test_describe():
    assert DEFAULTS["float32"].describe() == "float32: |a-b| <= 1e-05 + 1.3e-06*|b|"
    assert DEFAULTS["bfloat16"].describe() == "bfloat16: ||a-b||/||b|| <= 0.02"
    assert Tolerance("float64", rtol=0.0, atol=0.5).describe() == "float64: |a-b| <= 0.5 + 0*|b|"


def test_defaults_are_finite_and_positive():
    for tol in DEFAULTS.values():
        assert all(math.isfinite(v) and v > 0 for v in (tol.rtol, tol.atol, tol.rel or 1.0))
