"""Unit tests of porting_kit.load.load_weights on small hand-built modules."""

import types

import pytest
import torch

from porting_kit.errors import InputError
from porting_kit.load import load_weights, row_permutation
from porting_kit.spec import Spec


def _spec(**names) -> Spec:
    mod = types.ModuleType("load_spec")
    for k, v in names.items():
        setattr(mod, k, v)
    return Spec(module=mod, name="test:load")


class Net(torch.nn.Module):
    def __init__(self, seed: int, extra: bool = False):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = torch.nn.Linear(4, 6)
        self.fc2 = torch.nn.Linear(6, 3)
        self.register_buffer("steps", torch.tensor([3, 1, 2]))  # integer: not traced
        if extra:
            self.extra = torch.nn.Parameter(torch.randn(5))


class Fused(torch.nn.Module):
    """A vLLM-style port: one ``qkv`` holding the reference's q, k, v, loaded by ``load_weights``."""

    def __init__(self, fail_on: str | None = None):
        super().__init__()
        self.qkv = torch.nn.Linear(4, 12, bias=False)
        self.fail_on = fail_on

    def load_weights(self, weights):
        parts = {}
        for name, t in weights:
            if name == self.fail_on:
                raise KeyError(name)
            parts[name] = t
        with torch.no_grad():
            self.qkv.weight.copy_(torch.cat([parts["q.weight"], parts["k.weight"], parts["v.weight"]]))


class QKV(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.q = torch.nn.Linear(4, 4, bias=False)
        self.k = torch.nn.Linear(4, 4, bias=False)
        self.v = torch.nn.Linear(4, 4, bias=False)


def test_names_load_every_tensor_and_map_it_to_itself():
    ref, cand = Net(0), Net(1)
    wl = load_weights(_spec(), ref, cand)
    assert wl.method == "names"
    for name, t in ref.state_dict().items():
        assert torch.equal(cand.state_dict()[name], t)
    assert wl.weight_map == {n: [n] for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}
    assert (wl.unmapped_reference, wl.unset_candidate, wl.untraceable) == ([], [], [])
    assert wl.output_permutation == {}


def test_candidate_parameter_never_set_is_reported_and_keeps_its_init():
    ref, cand = Net(0), Net(1, extra=True)
    init = cand.extra.detach().clone()
    wl = load_weights(_spec(), ref, cand)
    assert wl.unset_candidate == ["extra"]
    assert torch.equal(cand.extra, init)  # given back its initial values, not NaN


def test_reference_tensor_the_candidate_lacks_is_unmapped():
    ref, cand = Net(0, extra=True), Net(1)
    wl = load_weights(_spec(), ref, cand)
    assert wl.unmapped_reference == ["extra"] and wl.unset_candidate == []


def test_unused_reference_weights_are_not_reported():
    ref, cand = Net(0, extra=True), Net(1)
    wl = load_weights(_spec(unused_reference_weights=["ext*"]), ref, cand)
    assert wl.unmapped_reference == []


def test_convert_weights_renames_and_the_map_follows_values():
    ref = QKV()
    cand = torch.nn.ModuleDict({"query": torch.nn.Linear(4, 4, bias=False),
                                "key": torch.nn.Linear(4, 4, bias=False),
                                "value": torch.nn.Linear(4, 4, bias=False)})
    ren = {"q": "query", "k": "key", "v": "value"}
    spec = _spec(convert_weights=lambda sd: {ren[k.split(".")[0]] + ".weight": v for k, v in sd.items()})
    wl = load_weights(spec, ref, cand)
    assert wl.method == "convert_weights"
    assert wl.weight_map == {"query.weight": ["q.weight"], "key.weight": ["k.weight"],
                             "value.weight": ["v.weight"]}
    assert torch.equal(cand["key"].weight, ref.k.weight)


def test_convert_weights_that_changes_values_needs_transformed_weights():
    ref, cand = Net(0), Net(1)

    def doubled(sd):
        return {k: (2 * v if k == "fc2.weight" else v) for k, v in sd.items()}

    assert load_weights(_spec(convert_weights=doubled), ref, Net(1)).unmapped_reference == ["fc2.weight"]
    wl = load_weights(_spec(convert_weights=doubled, transformed_weights=["fc2.*"]), ref, cand)
    assert wl.unmapped_reference == [] and "fc2.weight" not in wl.weight_map


def test_convert_weights_must_return_a_dict():
    with pytest.raises(InputError, match="convert_weights\\(\\) must return a dict of tensors, got list"):
        load_weights(_spec(convert_weights=lambda sd: list(sd.items())), Net(0), Net(1))


def test_convert_weights_with_a_non_tensor_value_is_input_error():
    def with_meta(sd):
        return dict(sd, **{"fc1.bias": [0.0] * 6})

    with pytest.raises(InputError, match="fc1.bias is a list, not a tensor"):
        load_weights(_spec(convert_weights=with_meta), Net(0), Net(1))


def test_shape_mismatch_names_the_tensor_and_both_shapes():
    ref = Net(0)
    cand = Net(1)
    cand.fc2 = torch.nn.Linear(6, 5)
    with pytest.raises(InputError, match=r"fc2.weight has shape \(3, 6\) in the reference state dict "
                                         r"but \(5, 6\) in the candidate"):
        load_weights(_spec(), ref, cand)


def test_vllm_style_load_weights_fuses_and_maps_all_three():
    ref, cand = QKV(), Fused()
    wl = load_weights(_spec(), ref, cand)
    assert wl.method == "load_weights"
    assert wl.weight_map == {"qkv.weight": ["q.weight", "k.weight", "v.weight"]}
    assert torch.equal(cand.qkv.weight[4:8], ref.k.weight)
    assert (wl.unmapped_reference, wl.unset_candidate) == ([], [])


def test_load_weights_raising_names_the_tensor_it_was_loading():
    with pytest.raises(InputError, match=r"while loading k.weight \(shape \(4, 4\)\): KeyError: 'k.weight'"):
        load_weights(_spec(), QKV(), Fused(fail_on="k.weight"))


def test_convert_weights_wins_over_the_candidates_load_weights():
    ref, cand = QKV(), Fused()
    spec = _spec(convert_weights=lambda sd: {"qkv.weight": torch.cat([sd["q.weight"], sd["k.weight"],
                                                                      sd["v.weight"]])})
    assert load_weights(spec, ref, cand).method == "convert_weights"


def test_constant_tensors_are_untraceable_not_unmapped():
    ref, cand = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)  # ones / zeros: no values to trace
    wl = load_weights(_spec(), ref, cand)
    assert wl.untraceable == ["weight", "bias"] and wl.unmapped_reference == []
    assert wl.weight_map == {} and wl.unset_candidate == []


def test_row_permuted_weight_gives_an_output_permutation():
    ref = QKV()
    perm = torch.tensor([1, 0, 3, 2])

    def permuted(sd):
        return {k: (v[perm] if k == "q.weight" else v) for k, v in sd.items()}

    cand = QKV()
    wl = load_weights(_spec(convert_weights=permuted), ref, cand)
    assert wl.weight_map["q.weight"] == ["q.weight"]
    assert set(wl.output_permutation) == {"q"}
    assert torch.equal(wl.output_permutation["q"], perm)


def test_row_permutation():
    w = torch.arange(12.0).reshape(4, 3)
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.equal(row_permutation(w, w[perm]), perm)
    assert row_permutation(w, w.clone()) is None             # identity: nothing to map
    assert row_permutation(w, w.flip(1)) is None             # not a row reordering
    assert row_permutation(w, w[:3]) is None                 # shapes differ
    assert row_permutation(w.reshape(-1), w.reshape(-1)[[1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]) is None


def test_meta_device_candidate_is_materialized():
    ref = Net(0)
    with torch.device("meta"):
        cand = Net(1)
    wl = load_weights(_spec(), ref, cand)
    assert not any(p.is_meta for p in cand.parameters())
    assert torch.equal(cand.fc1.weight, ref.fc1.weight) and wl.unset_candidate == []


class WithExtraState(Net):
    """A module whose state dict carries a non-tensor (``get_extra_state``), as quantized or
    TransformerEngine layers do."""

    def get_extra_state(self):
        return {"format": "fp8", "scale": 1.0}

    def set_extra_state(self, state):
        self.loaded_state = state


def test_non_tensor_extra_state_is_loaded_and_not_traced():
    ref, cand = WithExtraState(0), WithExtraState(1)
    assert "_extra_state" in ref.state_dict()
    wl = load_weights(_spec(), ref, cand)
    assert cand.loaded_state == {"format": "fp8", "scale": 1.0}
    assert torch.equal(cand.fc2.weight, ref.fc2.weight)
    assert (wl.unmapped_reference, wl.unset_candidate, wl.untraceable) == ([], [], [])
    assert "_extra_state" not in wl.weight_map


def test_non_tensor_extra_state_is_not_handed_to_load_weights():
    class FusedExtra(Fused):
        def get_extra_state(self):
            return "v1"

        def set_extra_state(self, state):
            pass

    class QKVExtra(QKV):
        def get_extra_state(self):
            return "v1"

        def set_extra_state(self, state):
            pass

    wl = load_weights(_spec(), QKVExtra(), FusedExtra())
    assert wl.method == "load_weights" and wl.weight_map == {"qkv.weight": ["q.weight", "k.weight", "v.weight"]}


def test_cuda_device_index_past_the_count_is_one_line_before_any_model(monkeypatch):
    """``--device cuda:7`` on a one-GPU machine: torch's own error is several lines and poisons
    the CUDA context; the check refuses it up front (faked CUDA here, real on the GPU machine)."""
    import torch

    from porting_kit.context import CheckContext
    from porting_kit.errors import InputError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ctx = CheckContext(spec=None, device="cuda:7")
    with pytest.raises(InputError, match=r"^--device cuda:7: this machine has 1 CUDA device\(s\) \(cuda:0 to cuda:0\)$"):
        ctx.check_device()
    CheckContext(spec=None, device="cuda:0").check_device()  # in range: no error
    CheckContext(spec=None, device="cpu").check_device()
