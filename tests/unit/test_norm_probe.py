"""Unit tests of the norm probe functions (porting_kit.probes.norms)."""

import pytest
import torch

from porting_kit.locate import find_norms
from porting_kit.probes.norms import bf16_error, fingerprint, layer_norm, rms_norm


class RMS(torch.nn.Module):
    def __init__(self, d, eps=1e-6, offset=False, upcast=True):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d, generator=torch.Generator().manual_seed(3)))
        self.variance_epsilon, self.offset, self.upcast = eps, offset, upcast

    def forward(self, x):
        dt = x.dtype
        if self.upcast:
            x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        w = 1 + self.weight if self.offset else self.weight
        return w * x.to(dt)


def test_issue_eps_numbers():
    x = torch.full((4,), 1e-3)
    assert rms_norm(x, eps=1e-6)[0].item() == pytest.approx(0.7071, abs=1e-4)
    assert rms_norm(x, eps=1e-5)[0].item() == pytest.approx(0.3015, abs=1e-4)


def test_issue_kind_numbers():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert layer_norm(x, eps=0.0).tolist() == pytest.approx([-1.342, -0.447, 0.447, 1.342], abs=1e-3)
    assert rms_norm(x, eps=0.0).tolist() == pytest.approx([0.365, 0.730, 1.095, 1.461], abs=1e-3)


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-8])
def test_fingerprint_rms_eps_and_weight(eps):
    m = RMS(32, eps)
    f = fingerprint(m, 32)
    assert f.kind == "rms"
    assert f.eps == pytest.approx(eps, rel=1e-3)
    torch.testing.assert_close(f.weight, m.weight.detach().double(), rtol=1e-5, atol=1e-6)


def test_fingerprint_layernorm_and_offset():
    ln = torch.nn.LayerNorm(32, eps=1e-5)
    f = fingerprint(ln, 32)
    assert f.kind == "layer"
    assert f.eps == pytest.approx(1e-5, rel=1e-3)
    off = RMS(32, offset=True)
    f2 = fingerprint(off, 32)
    torch.testing.assert_close(f2.weight, 1 + off.weight.detach().double(), rtol=1e-5, atol=1e-6)


def test_fingerprint_unknown_kind():
    class L1(torch.nn.Module):
        weight = None

        def forward(self, x):
            return x / (x.abs().mean(-1, keepdim=True) + 1e-6)

    f = fingerprint(L1(), 32)
    assert f.kind == "unknown"
    assert min(f.rel_diff_kinds.values()) > 1e-3


def test_bf16_error_separates_upcast():
    up, down = bf16_error(RMS(64), 64), bf16_error(RMS(64, upcast=False), 64)
    assert down > 2.5 * up


def test_find_norms_skips_groupnorm():
    m = torch.nn.Sequential(RMS(8), torch.nn.LayerNorm(8), torch.nn.GroupNorm(2, 8))
    names = [(s.name, s.dim, s.type) for s in find_norms(m)]
    assert names == [("0", 8, "RMS"), ("1", 8, "LayerNorm")]


def test_same_function_key_and_state_share_only_equal_norms():
    import torch

    from porting_kit.probes.norms import same_function_key, same_state

    a, b, c = torch.nn.RMSNorm(8, eps=1e-6), torch.nn.RMSNorm(8, eps=1e-6), torch.nn.RMSNorm(8, eps=1e-5)
    assert same_function_key(a, 8) == same_function_key(b, 8) != same_function_key(c, 8)
    assert same_state(a, b)
    with torch.no_grad():
        b.weight[3] = 2.0
    assert not same_state(a, b)  # same key, other weights: fingerprinted apart
    a.config = object()  # behaviour could hang on a non-scalar attribute: never shared
    assert same_function_key(a, 8) is None
    assert same_function_key(torch.nn.Sequential(torch.nn.RMSNorm(8)), 8) is None


def test_cast_copy_is_deepcopy_then_to_and_leaves_the_module_alone():
    import copy

    from porting_kit.probes.norms import cast_copy

    for mod in (RMS(8), torch.nn.LayerNorm(8), torch.nn.RMSNorm(8, eps=1e-6)):
        before = {k: v.clone() for k, v in mod.state_dict().items()}
        got = cast_copy(mod, torch.bfloat16)
        want = copy.deepcopy(mod).to(dtype=torch.bfloat16)
        x = torch.randn(5, 8, dtype=torch.bfloat16)
        torch.testing.assert_close(got(x), want(x), atol=0, rtol=0)
        assert all(t.dtype == torch.bfloat16 for t in got.state_dict().values())
        assert all(torch.equal(before[k], v) and v.dtype == torch.float32 for k, v in mod.state_dict().items())
        assert got.state_dict().keys() == mod.state_dict().keys()
    nested = torch.nn.Sequential(torch.nn.LayerNorm(8))  # with children: the deep copy
    assert cast_copy(nested, torch.bfloat16)[0].weight.dtype == torch.bfloat16
    assert nested[0].weight.dtype == torch.float32


def test_states_equal_takes_0_dim_parameters_and_cast_copy_keeps_containers_apart():
    from porting_kit.probes.norms import cast_copy, states_equal

    class ScalarGain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))
            self.gain = torch.nn.Parameter(torch.tensor(1.0))  # 0-dim
            self.register_buffer("step", torch.tensor(3))  # 0-dim int buffer
            self.cache = {}

    a, b = ScalarGain(), ScalarGain()
    assert states_equal([(a, b), (b, a)]) == [True, True]
    with torch.no_grad():
        b.gain.fill_(2.0)
    assert states_equal([(a, b)]) == [False]
    c = cast_copy(a, torch.bfloat16)
    c.cache["bf16"] = 1
    assert a.cache == {} and c.gain.dtype == torch.bfloat16 and c.step.dtype == torch.int64
