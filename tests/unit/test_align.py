"""Unit tests of porting_kit.probes.align on hand-built module-call records."""

import pytest
import torch

from porting_kit.errors import InputError
from porting_kit.probes.align import align, kind
from porting_kit.probes.capture import Record, Summary


def calls(*spec) -> list[Record]:
    """Records in completion order from ``(key, class name[, shape])`` tuples; every output
    sketch is the same 64 ones, so any two of one shape compare as equal."""
    out = []
    for end, item in enumerate(spec):
        key, type_name = item[0], item[1]
        shape = item[2] if len(item) > 2 else (2, 4)
        name = key.split("#")[0]
        numel = 1
        for n in shape:
            numel *= n
        out.append(Record(key=key, name=name, type=type_name, end=end,
                          depth=name.count(".") + 1 if name else 0,
                          out=Summary(shape=shape, dtype="float32", numel=numel, proj=torch.ones(64))))
    return out


def pairs(al) -> list[tuple[str, str, str]]:
    return [(p.reference.key, p.candidate.key, p.source) for p in al.pairs]


def keys(records) -> list[str]:
    return [r.key for r in records]


# --- 1. module_map --------------------------------------------------------------------------

def test_module_map_binds_named_components_on_both_sides():
    ref = calls(("lm.layers.0.self_attn", "A"), ("lm.layers.1.self_attn", "A"))
    cand = calls(("blocks.1.attn", "B"), ("blocks.0.attn", "B"))  # other order: names decide
    al = align(ref, cand, module_map=[("lm.layers.{i}.self_attn", "blocks.{i}.attn")])
    assert pairs(al) == [("lm.layers.0.self_attn", "blocks.0.attn", "module_map"),
                         ("lm.layers.1.self_attn", "blocks.1.attn", "module_map")]
    assert al.unaligned_reference == [] and al.unaligned_candidate == []


def test_module_map_as_a_dict_and_with_a_star():
    ref = calls(("head", "H"))
    cand = calls(("model.lm_head", "L"))
    assert pairs(align(ref, cand, module_map={"head": "*lm_head"})) == [("head", "model.lm_head", "module_map")]


def test_module_map_component_does_not_match_across_dots():
    ref = calls(("layers.0", "A"))
    cand = calls(("blocks.0.sub", "B", (3, 3)))
    al = align(ref, cand, module_map=[("layers.{i}", "blocks.{i}")])
    assert al.pairs == []


def test_module_map_pattern_matching_two_candidates_pairs_nothing():
    ref = calls(("x", "X", (2, 4)))
    cand = calls(("a.proj", "P", (3, 3)), ("b.proj", "P", (3, 3)))
    al = align(ref, cand, module_map=[("x", "*.proj")])
    assert al.pairs == []
    assert keys(al.unaligned_reference) == ["x"]
    assert keys(al.unaligned_candidate) == ["a.proj", "b.proj"]


@pytest.mark.parametrize("bad", [[("a",)], [("a", 1)], ["ab"], [("a", "b", "c")]])
def test_malformed_module_map_raises(bad):
    with pytest.raises(InputError, match="module_map: each entry must be a"):
        align(calls(("a", "A")), calls(("b", "B")), module_map=bad)


# --- 2. weights -----------------------------------------------------------------------------

def test_weight_map_pairs_modules_and_their_parents():
    ref = calls(("layer.dense", "Linear"), ("layer", "Block"), ("", "Ref"))
    cand = calls(("blk.fc", "Linear"), ("blk", "Block"), ("", "Cand"))
    wm = {"blk.fc.weight": ["layer.dense.weight"], "blk.fc.bias": ["layer.dense.bias"]}
    al = align(ref, cand, weight_map=wm)
    assert pairs(al) == [("layer.dense", "blk.fc", "weights"), ("layer", "blk", "parent"),
                         ("", "", "parent")]


def test_weights_of_an_uncaptured_module_count_for_its_captured_ancestor():
    ref = calls(("enc.conv", "Conv1d"))
    cand = calls(("encoder.block", "SConv1d"))  # its inner conv was not hooked (coarse pass)
    wm = {"encoder.block.conv.conv.parametrizations.weight.original0": ["enc.conv.weight_g"]}
    assert pairs(align(ref, cand, weight_map=wm)) == [("enc.conv", "encoder.block", "weights")]


def test_one_reference_module_feeding_two_candidate_modules_is_not_paired_by_weights():
    ref = calls(("emb", "X", (2, 4)))
    cand = calls(("a", "Y", (3, 3)), ("b", "Y", (3, 3)))
    wm = {"a.weight": ["emb.weight"], "b.weight": ["emb.weight"]}
    al = align(ref, cand, weight_map=wm)
    assert al.pairs == [] and keys(al.unaligned_candidate) == ["a", "b"]


def test_tied_weights_prefer_the_tensor_with_the_same_leaf_name():
    ref = calls(("embed", "Embedding"), ("lm_head", "Linear"))
    cand = calls(("tok", "Embedding"), ("lm_head", "Linear"))
    wm = {"tok.weight": ["embed.weight"], "lm_head.weight": ["embed.weight", "lm_head.weight"]}
    al = align(ref, cand, weight_map=wm)
    assert pairs(al) == [("embed", "tok", "weights"), ("lm_head", "lm_head", "weights")]


def test_fused_projection_votes_for_its_parent():
    ref = calls(("attn.q", "Linear"), ("attn.k", "Linear"), ("attn.v", "Linear"), ("attn", "Attention"))
    cand = calls(("sa.qkv", "Linear", (2, 12)), ("sa", "Attention"))
    wm = {"sa.qkv.weight": ["attn.q.weight", "attn.k.weight", "attn.v.weight"]}
    al = align(ref, cand, weight_map=wm)
    assert pairs(al) == [("attn", "sa", "parent")]
    assert keys(al.unaligned_reference) == ["attn.q", "attn.k", "attn.v"]
    assert keys(al.unaligned_candidate) == ["sa.qkv"]


# --- 3. parents -----------------------------------------------------------------------------

def test_parents_need_equal_output_shapes():
    ref = calls(("m.fc", "Linear"), ("m", "Model", (2, 10)))
    cand = calls(("n.fc", "Linear"), ("n", "Model", (2, 4)))
    al = align(ref, cand, weight_map={"n.fc.weight": ["m.fc.weight"]})
    assert pairs(al) == [("m.fc", "n.fc", "weights")]
    assert keys(al.unaligned_reference) == ["m"] and keys(al.unaligned_candidate) == ["n"]


def test_parent_is_the_closest_wrapper_by_sketch():
    """The candidate's ``blk`` wraps ``blk.body``; the reference has only ``res``. The sketch
    of ``blk.body`` equals the reference's, so ``res`` pairs with the body, not the wrapper."""
    ref = calls(("res.conv", "Conv1d"), ("res", "Residual"))
    cand = calls(("blk.body.conv", "Conv1d"), ("blk.body", "Sequential"), ("blk", "Wrapper"))
    cand[2].out.proj = torch.full((64,), 2.0)  # the wrapper adds a residual: a different output
    al = align(ref, cand, weight_map={"blk.body.conv.weight": ["res.conv.weight"]})
    assert pairs(al) == [("res.conv", "blk.body.conv", "weights"), ("res", "blk.body", "parent")]
    assert keys(al.unaligned_candidate) == ["blk"]


# --- 4. order -------------------------------------------------------------------------------

def test_order_matches_kind_and_shape_between_anchors():
    ref = calls(("embed_tokens", "Embedding"), ("norm", "RMSNorm"), ("mlp", "LlamaMLP"),
                ("drop", "Dropout"), ("lm_head", "Linear", (2, 10)))
    cand = calls(("tok", "Embedding"), ("ln", "LayerNorm"), ("ff", "FeedForward"),
                 ("out", "Linear", (2, 10)))
    al = align(ref, cand, module_map=[("embed_tokens", "tok"), ("lm_head", "out")])
    assert pairs(al) == [("embed_tokens", "tok", "module_map"), ("norm", "ln", "order"),
                         ("mlp", "ff", "order"), ("lm_head", "out", "module_map")]
    assert keys(al.unaligned_reference) == ["drop"] and al.unaligned_candidate == []


def test_order_does_not_cross_anchors():
    ref = calls(("a", "A"), ("n1", "RMSNorm"), ("b", "B"))
    cand = calls(("n2", "RMSNorm"), ("a", "A"), ("b", "B"))  # the norm sits before the anchor
    al = align(ref, cand, module_map=[("a", "a"), ("b", "b")])
    assert ("n1", "n2", "order") not in pairs(al)
    assert keys(al.unaligned_reference) == ["n1"] and keys(al.unaligned_candidate) == ["n2"]


def test_unmatched_names_are_listed_in_capture_order():
    ref = calls(("x", "Conv1d", (1, 7)), ("y", "GRU", (1, 5)))
    cand = calls(("p", "LSTM", (1, 6)))
    al = align(ref, cand)
    assert al.pairs == []
    assert keys(al.unaligned_reference) == ["x", "y"] and keys(al.unaligned_candidate) == ["p"]


def test_comparable_needs_both_sketches_of_one_shape():
    ref = calls(("", "M", (2, 10)), )
    cand = calls(("", "M", (2, 4)))
    al = align(ref, cand, module_map=[("", "")])
    assert pairs(al) == [("", "", "module_map")] and not al.pairs[0].comparable
    cand[0].out = None
    assert not align(ref, cand, module_map=[("", "")]).pairs[0].comparable


@pytest.mark.parametrize("type_name, name, expect", [
    ("LlamaRotaryEmbedding", "rotary_emb", "rotary"),
    ("LlamaRMSNorm", "input_layernorm", "norm"),
    ("LlamaAttention", "self_attn", "attention"),
    ("LlamaMLP", "mlp", "mlp"),
    ("Embedding", "embed_tokens", "embedding"),
    ("Linear", "q_proj", "linear"),
    ("SiLU", "act_fn", "activation"),
    ("LlamaDecoderLayer", "layers.0", "layer"),
    ("Module", "layers.0.ffn", "mlp"),            # the class says nothing: the name does
    ("Conv1d", "conv", "Conv1d"),                  # neither: the class name itself
])
def test_kind(type_name, name, expect):
    (rec,) = calls((name, type_name))
    assert kind(rec) == expect
