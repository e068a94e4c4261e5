"""The parity noise model (:mod:`porting_kit.probes.noise`): the reference's own rounding floor."""

import math

import pytest

torch = pytest.importorskip("torch")

from porting_kit.probes.noise import (  # noqa: E402
    NOISE_FACTOR,
    UNIT_ROUNDOFF,
    NoiseFloor,
    measure_floor,
    op_floor,
    within_noise,
)


def test_op_floor_grows_with_the_reduction_length():
    u = UNIT_ROUNDOFF["float32"]
    conv = torch.nn.Conv1d(16, 4, kernel_size=7)
    assert op_floor(conv, "float32") == pytest.approx(u * math.sqrt(16 * 7))
    tconv = torch.nn.ConvTranspose1d(32, 8, kernel_size=4, stride=2)  # weight (in, out, taps)
    assert op_floor(tconv, "float32") == pytest.approx(u * math.sqrt(32 * 4))
    lin = torch.nn.Linear(64, 3)
    assert op_floor(lin, "bfloat16") == pytest.approx(UNIT_ROUNDOFF["bfloat16"] * 8)
    assert op_floor(torch.nn.ELU(), "float32") == u  # no weight: one rounding


def _stack():
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Conv1d(8, 8, 5, padding=2), torch.nn.ELU()]
    return torch.nn.Sequential(*layers).eval()


def test_measure_floor_is_the_references_own_float32_error():
    model = _stack()
    x = torch.randn(1, 8, 256)
    keys = {"0", "10"}
    from porting_kit.probes.capture import capture_full

    with capture_full(model, keys) as native, torch.no_grad():
        out = model(x)
    floor = measure_floor(model, {"x": x}, lambda m, i: m(i["x"]), keys, native, out)
    assert floor is not None and floor.dtype == "float32"
    # float32 rounding against float64: nonzero, a few unit roundoffs, growing with depth
    assert 0 < floor.rel["0"] < 1e-6 and 0 < floor.rel["10"] < 1e-5
    assert floor.output_rel == pytest.approx(floor.rel["10"], rel=1.0)
    assert next(model.parameters()).dtype == torch.float32  # the model is not touched
    assert torch.get_default_dtype() == torch.float32


def test_a_float64_reference_or_one_that_cannot_run_in_float64_has_no_floor():
    model = _stack().double()
    x = torch.randn(1, 8, 64, dtype=torch.float64)
    assert measure_floor(model, {"x": x}, lambda m, i: m(i["x"]), set(), {}) is None

    def mixes_float32(m, i):  # a forward that casts to float32 itself (its conv then sees mixed dtypes)
        return m(i["x"].float())

    assert measure_floor(_stack(), {"x": torch.randn(1, 8, 64)}, mixes_float32, set(), {}) is None
    assert torch.get_default_dtype() == torch.float32


def test_bound_and_within_noise():
    conv = torch.nn.Conv1d(8, 8, 5)
    floor = NoiseFloor("float32", rel={"a": 1e-6}, output_rel=2e-6)
    assert floor.bound("a", conv) == pytest.approx(NOISE_FACTOR * 1e-6)
    assert floor.bound(None) == pytest.approx(NOISE_FACTOR * 2e-6)
    # a floor the float64 run saw exact falls back to the op's own rounding
    assert floor.bound("missing", conv) == pytest.approx(NOISE_FACTOR * op_floor(conv, "float32"))
    assert within_noise(7e-6, floor.bound("a", conv)) and not within_noise(9e-6, floor.bound("a", conv))
    assert not within_noise(float("nan"), 1.0)


def test_op_order_noise_is_within_and_a_small_fault_beyond_the_bound():
    """A candidate computing the same convs as unfold + matmul differs by noise; one conv's
    weight scaled by 1 + 1e-4 does not."""
    model = _stack()
    x = torch.randn(1, 8, 512)

    def as_matmul(m, inp):
        h = inp
        for layer in m:
            if isinstance(layer, torch.nn.Conv1d):
                cols = torch.nn.functional.pad(h, (2, 2)).unfold(-1, 5, 1)
                h = torch.einsum("bctk,ock->bot", cols, layer.weight) + layer.bias[:, None]
            else:
                h = layer(h)
        return h

    with torch.no_grad():
        ref = model(x)
        cand = as_matmul(model, x)
        faulty = _stack()
        faulty[4].weight.mul_(1 + 1e-4)
        bad = as_matmul(faulty, x)
    floor = measure_floor(model, {"x": x}, lambda m, i: m(i["x"]), set(), {}, ref)
    rel = float((cand - ref).norm() / ref.norm())
    rel_bad = float((bad - ref).norm() / ref.norm())
    assert within_noise(rel, floor.bound(None))
    assert not within_noise(rel_bad, floor.bound(None))
