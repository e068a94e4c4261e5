"""The cheap instruments of the parity pass's forward (issue 13, point 5: overhead at scale).

porting_kit/probes/intercept.py names the running module from the call stack and taps chosen
torch calls through one TorchFunctionMode that leaves once its recorders are done;
porting_kit/probes/norms.py records functional norm calls through wrappers and compares the
parameters of many norm pairs at once; checks/norm.py screens one pair per group of
identical (class, attributes, equal weights) pairs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from porting_kit.locate import find_norms, find_rotary
from porting_kit.probes.intercept import ModuleNamer, module_names, tap_ops
from porting_kit.probes.norms import FunctionalNormRecorder, capture_functional_norms, states_equal
from porting_kit.probes.rotary import QKRecorder, capture_qk


class _Attn(nn.Module):
    def __init__(self, eager: bool = False):
        super().__init__()
        self.eager = eager

    def forward(self, x):  # x: (B, H, T, D)
        q, k = x * 2.0, x * 3.0
        if self.eager:
            w = (q @ k.transpose(-1, -2)).softmax(-1)
            return w @ x
        return F.scaled_dot_product_attention(q, k, x)


class _Net(nn.Module):
    def __init__(self, eager: bool = False):
        super().__init__()
        self.layers = nn.ModuleList([_Attn(eager), _Attn(eager)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) + torch.tanh(x)
        return x


def _stack_depth() -> int:
    return torch._C._len_torch_function_stack()


def test_module_namer_names_the_innermost_running_module_and_defaults_outside():
    net = _Net()
    namer = ModuleNamer(module_names(net, root=""), default="<none>")
    seen = []
    orig = _Attn.forward

    def spy(self, x):
        seen.append(namer.innermost())
        return orig(self, x)

    _Attn.forward = spy
    try:
        net(torch.randn(1, 2, 3, 4))
    finally:
        _Attn.forward = orig
    assert seen == ["layers.0", "layers.1"]
    assert namer.innermost() == "<none>"  # no module of the model is running


def test_qk_capture_sdpa_and_eager_first_call_with_site():
    x = torch.randn(1, 2, 5, 4)
    for eager, op in ((False, "sdpa"), (True, "matmul")):
        net = _Net(eager)
        with capture_qk(net) as got:
            net(x)
        assert [(g.site, g.op) for g in got] == [("layers.0", op)]
        torch.testing.assert_close(got[0].q, x * 2.0)
        torch.testing.assert_close(got[0].k, x * 3.0)  # k^T transposed back for matmul


def test_tap_leaves_the_mode_stack_once_the_recorder_is_done_and_restores_it():
    net = _Net()
    depth = []
    orig = _Attn.forward

    def spy(self, x):
        depth.append(_stack_depth())
        return orig(self, x)

    rec = QKRecorder(ModuleNamer(module_names(net)), 1)
    table: dict = {}
    rec.register(table)
    before = _stack_depth()
    _Attn.forward = spy
    try:
        with tap_ops(table):
            net(torch.randn(1, 2, 3, 4))
    finally:
        _Attn.forward = orig
    # layer 0 runs under the mode; after its q/k are recorded the table is empty and the
    # mode leaves at the next module call: layer 1 runs without it
    assert depth == [before + 1, before]
    assert table == {} and len(rec.got) == 1
    assert _stack_depth() == before


def test_tap_exits_cleanly_when_the_forward_raises():
    before = _stack_depth()
    table = {F.scaled_dot_product_attention: [lambda *a: None]}
    try:
        with tap_ops(table):
            raise ValueError("boom")
    except ValueError:
        pass
    assert _stack_depth() == before


def test_functional_norm_wrappers_are_put_back_even_on_error():
    originals = (F.rms_norm, F.layer_norm, torch.layer_norm, torch.rms_norm)
    rec = FunctionalNormRecorder(ModuleNamer({}, "<root>"))
    try:
        with rec.patched():
            assert F.layer_norm is not originals[1]
            F.layer_norm(torch.randn(2, 8), (8,), eps=1e-3)  # nested torch.layer_norm: once
            raise RuntimeError("forward failed")
    except RuntimeError:
        pass
    assert (F.rms_norm, F.layer_norm, torch.layer_norm, torch.rms_norm) == originals
    assert [(c.function, c.eps) for c in rec.calls] == [("layer_norm", 1e-3)]


def test_module_level_rms_norm_is_traced_with_its_module_name():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(8, eps=1e-4)

        def forward(self, x):
            return self.norm(x)

    root = nn.Sequential(Block())
    with capture_functional_norms(root) as calls:
        root(torch.randn(2, 8))
    assert [(c.function, c.eps, c.module) for c in calls] == [("rms_norm", 1e-4, "0.norm")]


def test_states_equal_many_pairs_one_verdict_each():
    a = [nn.LayerNorm(6) for _ in range(4)]
    b = [nn.LayerNorm(6) for _ in range(4)]
    for m, n in zip(a, b):
        n.load_state_dict(m.state_dict())
    with torch.no_grad():
        b[2].bias[3] += 1e-3  # one element of one pair
    odd = nn.LayerNorm(5)
    pairs = [*zip(a, b), (a[0], odd), (nn.Identity(), nn.Identity())]
    assert states_equal(pairs) == [True, True, False, True, False, True]


def test_find_sites_with_a_shared_walk_equal_a_fresh_walk():
    from porting_kit.embedded import tts_reference

    model = tts_reference.build_reference(tts_reference.lm_config(num_hidden_layers=2),
                                          tts_reference.codec_config())
    walk = list(model.named_modules())
    assert [s.name for s in find_norms(model, walk)] == [s.name for s in find_norms(model)]
    assert [s.name for s in find_rotary(model, walk)] == [s.name for s in find_rotary(model)]
    assert find_rotary(model) and find_norms(model)


def _norm_findings_with(mutate):
    """The norm family on the clean embedded pair after ``mutate(candidate)`` (one layer)."""
    from porting_kit.checks import norm
    from porting_kit.context import CheckContext
    from porting_kit.load import load_pair
    from porting_kit.spec import load_spec

    ctx = CheckContext(spec=load_spec(example="tts"))
    pair = load_pair(ctx)
    mutate(pair.candidate)
    return [f for f in norm.run(ctx) if f.status in ("fail", "warn")]


def test_a_fault_in_one_layer_only_is_not_hidden_by_the_grouped_screen():
    """Pairs are screened once per group of identical (class, attributes, weights) pairs; a
    norm that differs in one layer only is outside the group and screened on its own."""
    def eps_layer1(model):
        model.talker.layers[1].attn.q_norm.variance_epsilon = 1e-2

    (f,) = _norm_findings_with(eps_layer1)
    assert f.code == "norm.eps_mismatch" and f.evidence["pairs_affected"] == 1

    def offset_layer0(model):
        model.talker.layers[0].input_layernorm.weight_offset = True

    (f,) = _norm_findings_with(offset_layer0)
    assert f.code == "norm.weight_offset" and f.evidence["pairs_affected"] == 1

    def weight_layer1(model):
        with torch.no_grad():
            model.talker.layers[1].post_attention_layernorm.weight.mul_(1.5)

    (f,) = _norm_findings_with(weight_layer1)  # the weight itself differs: screened on its own
    assert f.code == "norm.unexplained" and "layers.1.post_attention_layernorm" in f.message
    assert _norm_findings_with(lambda m: None) == []


@pytest.mark.slow
def test_rope_screen_pass_keeps_the_error_vs_position_series():
    """The notebooks plot the clean pair's RoPE error by position; the screen (q/k equal, no
    angle fit) still provides it: one residual per position, at most the screen bound."""
    from porting_kit.runner import run_check

    rep = run_check(example="tts", only="parity,rope")
    (ok,) = [f for f in rep.findings if f.check == "rope"]
    series = rep.extras["rope_error_vs_position"]
    assert ok.code == "rope.ok" and "qk_relative_residual" in ok.evidence
    assert [p for p, _ in series] == list(range(ok.evidence["positions"]))
    assert max(e for _, e in series) <= ok.evidence["screen_bound"]
