"""Property test of the rope family on small random models (issue 29, point 1, RoPE).

The contract of the rope diagnoses over the *storage forms and constructions* of a port's
rotary embedding, run end to end (``run_check(spec, only="parity,rope")``) on a tiny
transformers reference against a tiny hand-written candidate port:

* references: ``LlamaForCausalLM`` (full rotary, rotate-half) and ``StableLmForCausalLM``
  (partial rotary, ``partial_rotary_factor``), hidden 32-64, 1-2 layers, head_dim 8-16,
  seeded random weights (each built once per config: :func:`_reference`);
* the candidate's rotary storage: an ``inv_freq`` buffer (persistent or not), full-width
  cos/sin tables (``cos_cached`` / ``sin_cached``) in the half-split HF layout
  (``cat(f, f)``) or the interleaved one (``repeat_interleave(f, 2)``), a vLLM
  ``cos_sin_cache`` (``[cos | sin]``), Meta's complex ``freqs_cis`` (``torch.polar``);
  rotation rotate-half on HF-ordered q/k rows, or interleaved on rows permuted by the
  conversion (``convert_weights``, as Meta's Llama); fused or split q/k/v; partial rotary by
  slicing the head or by zero-padding inv_freq / the tables to ``head_dim / 2`` pairs;
* faults: ``theta`` (another rope_theta), ``layout`` (an interleaved kernel on unpermuted
  rows, or a table built in one layout and applied with the other rotation), ``partial``
  (another rotated width, sliced or padded; a padded table applied rotate-half across the
  full head where the reference pairs across its rotary dims), ``offset`` (positions
  shifted), ``uninit`` (the table left uninitialised: zeros, NaN or arbitrary values), and
  the clean twin of each construction.

A fault must get its exact rope code; a clean twin no fail/warn finding at all.
:func:`tally` runs the generator wider and counts named right / vague / missed / false alarm
per class (the issue's closing figures).
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from porting_kit.runner import run_check  # noqa: E402
from porting_kit.spec import Spec  # noqa: E402

nn = torch.nn
VOCAB, SEQ, MAX_POS = 64, 12, 32

STORAGE = ("inv_freq", "inv_freq_persistent", "tables", "cos_sin_cache", "freqs_cis")
FAULTS = ("clean", "theta", "layout", "partial", "offset", "uninit")
EXPECTED = {"theta": "rope.theta_mismatch", "layout": "rope.layout_mismatch",
            "partial": "rope.partial_rotary_mismatch", "offset": "rope.position_offset",
            "uninit": "rope.inv_freq_uninitialized"}


# ------------------------------------------------------------------ reference

@dataclass(frozen=True)
class RefConfig:
    arch: str  # "llama" (full rotary) or "stablelm" (partial rotary)
    hidden: int
    heads: int
    kv_heads: int
    layers: int
    theta: float
    rotary_dim: int  # == head_dim for llama

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@functools.cache
def _reference(cfg: RefConfig):
    from transformers import LlamaConfig, LlamaForCausalLM, StableLmConfig, StableLmForCausalLM

    common = dict(vocab_size=VOCAB, hidden_size=cfg.hidden, intermediate_size=2 * cfg.hidden,
                  num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                  num_key_value_heads=cfg.kv_heads, max_position_embeddings=MAX_POS,
                  tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(hash(cfg) % 2**31)
        if cfg.arch == "llama":
            model = LlamaForCausalLM(LlamaConfig(
                **common, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": cfg.theta}))
        else:
            model = StableLmForCausalLM(StableLmConfig(
                **common, layer_norm_eps=1e-5, rope_parameters={
                    "rope_type": "default", "rope_theta": cfg.theta,
                    "partial_rotary_factor": cfg.rotary_dim / cfg.head_dim}))
        with torch.no_grad():  # norms away from 1 / 0, so a wrong norm would show
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
    return model.eval()


# ------------------------------------------------------------------ candidate port

@dataclass(frozen=True)
class Port:
    """How the hand-written candidate builds and applies its rotary embedding."""

    storage: str  # one of STORAGE
    rotation: str  # "half" or "interleaved" (interleaved: q/k rows permuted by the conversion)
    table_layout: str  # for "tables": "half" or "interleaved"
    fused: bool
    rotary_dim: int  # dims the candidate rotates
    padded: bool  # partial rotary by zero-padding to head_dim / 2 pairs (else slicing)
    theta: float
    offset: int  # added to the query positions
    offset_k: int  # added to the key positions
    permute: bool  # the conversion permutes q/k rows (needed by an interleaved kernel)
    garbage: str | None  # uninitialised table: "zeros", "nan", "random"


def _half_perm(r: int, head_dim: int):
    """Row order of an interleaved kernel over the first ``r`` dims (HF's conversion
    permutation on the rotary part; the pass-through dims unchanged)."""
    h = r // 2
    inter = torch.stack([torch.arange(h), torch.arange(h) + h], dim=1).reshape(-1)
    return torch.cat([inter, torch.arange(r, head_dim)])


class Rotary(nn.Module):
    def __init__(self, port: Port, head_dim: int):
        super().__init__()
        self.port, self.head_dim = port, head_dim
        r = port.rotary_dim
        inv = 1.0 / (port.theta ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
        self.span = r
        if port.padded:  # partial rotary by zero padding: identity pairs up to head_dim / 2
            inv = torch.cat([inv, torch.zeros(head_dim // 2 - r // 2)])
            self.span = head_dim
        pos = torch.arange(MAX_POS, dtype=torch.float32)
        freqs = pos[:, None] * inv[None]
        g = port.garbage
        if port.storage.startswith("inv_freq"):
            self.register_buffer("inv_freq", _garbage(inv, g), persistent=port.storage.endswith("persistent"))
        elif port.storage == "tables":
            emb = (torch.cat((freqs, freqs), -1) if port.table_layout == "half"
                   else freqs.repeat_interleave(2, -1))
            self.register_buffer("cos_cached", _garbage(emb.cos(), g), persistent=False)
            self.register_buffer("sin_cached", _garbage(emb.sin(), g), persistent=False)
        elif port.storage == "cos_sin_cache":
            cache = torch.cat((freqs.cos(), freqs.sin()), -1)
            if g:
                cache = _garbage(cache, g)
            self.register_buffer("cos_sin_cache", cache, persistent=False)
        else:
            fc = torch.polar(torch.ones_like(freqs), freqs)
            if g:
                fc = torch.complex(_garbage(fc.real, g), _garbage(fc.imag, g))
            self.register_buffer("freqs_cis", fc, persistent=False)

    def forward(self, q, k, positions):
        p = self.port
        return self.apply(q, positions + p.offset), self.apply(k, positions + p.offset_k)

    def apply(self, x, positions):
        s, st = self.span, self.port.storage
        xr, xp = x[..., :s], x[..., s:]
        if st == "freqs_cis":
            xc = torch.view_as_complex(xr.float().reshape(*xr.shape[:-1], -1, 2))
            xr = torch.view_as_real(xc * self.freqs_cis[positions]).flatten(-2).to(x.dtype)
        else:
            if st.startswith("inv_freq"):
                freqs = positions[:, None].float() * self.inv_freq[None]
                cos, sin = _expand(freqs.cos(), self.port.rotation), _expand(freqs.sin(), self.port.rotation)
            elif st == "tables":
                cos, sin = self.cos_cached[positions], self.sin_cached[positions]
            else:
                c, sn = self.cos_sin_cache[positions].chunk(2, -1)
                cos, sin = _expand(c, self.port.rotation), _expand(sn, self.port.rotation)
            turn = _rotate_half if self.port.rotation == "half" else _rotate_pairs
            xr = xr * cos + turn(xr) * sin
        return torch.cat((xr, xp), -1)


def _garbage(t, kind):
    if kind is None:
        return t
    if kind == "zeros":
        return torch.zeros_like(t)
    if kind == "nan":
        return torch.full_like(t, float("nan"))
    g = torch.Generator().manual_seed(t.numel() + int(t.sum().nan_to_num().abs() * 1e3) % 9973)
    return torch.rand(t.shape, generator=g) * 5.0  # arbitrary memory: positive, unordered, > 1


def _expand(c, rotation):
    return torch.cat((c, c), -1) if rotation == "half" else c.repeat_interleave(2, -1)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def _rotate_pairs(x):
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _norm(cfg: RefConfig):
    return RMSNorm(cfg.hidden) if cfg.arch == "llama" else nn.LayerNorm(cfg.hidden, eps=1e-5)


class Attention(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.cfg, self.port, d = cfg, port, cfg.head_dim
        q, kv = cfg.heads * d, cfg.kv_heads * d
        if port.fused:
            self.qkv_proj = nn.Linear(cfg.hidden, q + 2 * kv, bias=False)
        else:
            self.q_proj = nn.Linear(cfg.hidden, q, bias=False)
            self.k_proj = nn.Linear(cfg.hidden, kv, bias=False)
            self.v_proj = nn.Linear(cfg.hidden, kv, bias=False)
        self.o_proj = nn.Linear(q, cfg.hidden, bias=False)
        self.rotary_emb = Rotary(port, d)

    def forward(self, x, positions):
        b, t, _ = x.shape
        c, d = self.cfg, self.cfg.head_dim
        if self.port.fused:
            q, k, v = self.qkv_proj(x).split([c.heads * d, c.kv_heads * d, c.kv_heads * d], -1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, c.heads, d).transpose(1, 2)
        k = k.view(b, t, c.kv_heads, d).transpose(1, 2)
        v = v.view(b, t, c.kv_heads, d).transpose(1, 2)
        q, k = self.rotary_emb(q, k, positions)
        rep = c.heads // c.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, 2 * cfg.hidden, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, 2 * cfg.hidden, bias=False)
        self.down_proj = nn.Linear(2 * cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = _norm(cfg), _norm(cfg)
        self.self_attn, self.mlp = Attention(cfg, port), MLP(cfg)

    def forward(self, x, positions):
        x = x + self.self_attn(self.input_layernorm(x), positions)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg, port) for _ in range(cfg.layers))
        self.norm = _norm(cfg)


class CandidateLM(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.port = port
        self.model = Body(cfg, port)
        self.lm_head = nn.Linear(cfg.hidden, VOCAB, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1])
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, positions)
        return self.lm_head(self.model.norm(x))


def _convert(cfg: RefConfig, port: Port, sd: dict) -> dict:
    """HF state dict -> the candidate's: q/k rows permuted for an interleaved kernel (over the
    rotary dims, per head), q/k/v fused when the port fuses them."""
    d = cfg.head_dim
    out = {}
    for name, w in sd.items():
        if port.permute and (name.endswith("q_proj.weight") or name.endswith("k_proj.weight")):
            heads = w.shape[0] // d
            perm = _half_perm(port.rotary_dim, d)
            w = w.view(heads, d, -1)[:, perm].reshape(heads * d, -1)
        out[name] = w
    if port.fused:
        for i in range(cfg.layers):
            p = f"model.layers.{i}.self_attn."
            out[p + "qkv_proj.weight"] = torch.cat([out.pop(p + f"{n}_proj.weight") for n in "qkv"])
    return out


def _spec(cfg: RefConfig, port: Port) -> Spec:
    mod = types.ModuleType("rope_forms_spec")
    mod.reference = lambda: _reference(cfg)
    mod.candidate = lambda: CandidateLM(cfg, port).eval()
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=gen)
    mod.inputs = lambda: {"input_ids": ids}
    mod.run_reference = lambda m, x: m(input_ids=x["input_ids"], use_cache=False).logits
    mod.run_candidate = lambda m, x: m(x["input_ids"])
    if port.permute or port.fused:  # else loaded by name
        mod.convert_weights = lambda sd: _convert(cfg, port, sd)
    return Spec(module=mod, name="test:rope_forms")


# ------------------------------------------------------------------ the pieces (fast)

def _tables_module(layout: str, rotary_dim: int = 8, base: float = 1e4, garbage=None):
    port = Port("tables", "half", layout, False, rotary_dim, False, base, 0, 0, False, garbage)
    return Rotary(port, rotary_dim)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cos_sin_tables_are_located_in_either_layout(layout):
    from porting_kit.locate import find_rotary
    from porting_kit.probes.rotary import default_inv_freq, garbage_reason, table_rows_reason

    (site,) = find_rotary(_tables_module(layout))
    assert (site.name, site.kind) == ("cos_cached", "cos_sin_tables")
    torch.testing.assert_close(site.inv_freq, default_inv_freq(1e4, 8), rtol=1e-6, atol=1e-6)
    assert garbage_reason(site.inv_freq) is None and table_rows_reason(site.rows) is None


@pytest.mark.parametrize("garbage", ["zeros", "nan", "random"])
def test_uninitialised_tables_are_not_rope_rows(garbage):
    from porting_kit.locate import find_rotary
    from porting_kit.probes.rotary import table_rows_reason

    (site,) = find_rotary(_tables_module("half", garbage=garbage))
    assert table_rows_reason(site.rows) is not None


def test_one_pair_garbage_cache_is_caught_by_its_rows():
    """One rotating pair: position 1's angle alone can pass as a table; the rows cannot."""
    from porting_kit.probes.rotary import garbage_reason, table_rows_reason

    rows = torch.polar(torch.rand(4, 1, dtype=torch.float64) * 5, torch.tensor([[0.0], [0.7], [0.2], [2.5]],
                                                                             dtype=torch.float64))
    assert garbage_reason(torch.angle(rows[1])) is None
    assert "magnitudes vary" in table_rows_reason(rows)
    clean = torch.polar(torch.full((4, 3), 0.8, dtype=torch.float64),
                        torch.arange(4.0, dtype=torch.float64)[:, None] * torch.tensor([1.0, 0.1, 0.01],
                                                                                    dtype=torch.float64))
    assert table_rows_reason(clean) is None  # a scaled (YaRN-like) table is one magnitude too


def test_constant_table_is_garbage():
    from porting_kit.probes.rotary import garbage_reason

    assert "equal" in garbage_reason(torch.full((4,), 0.7))
    assert garbage_reason(torch.tensor([0.7])) is None  # one pair: base ** 0, nothing to decay


@pytest.mark.parametrize("head_dim, r", [(16, 6), (16, 10), (12, 4), (12, 10)])
def test_slicing_at_any_even_width_is_measured(head_dim, r):
    """Widths that are not a quarter fraction of the head (used to be rope.unexplained)."""
    from porting_kit.probes.rotary import (HALF, Structure, default_inv_freq, measure_rotation, rotate,
                                           sliced_width, structures)

    g = torch.Generator().manual_seed(r)
    pre = torch.randn(1, 2, 6, head_dim, generator=g, dtype=torch.float64)
    theta = torch.arange(6, dtype=torch.float64)[:, None] * default_inv_freq(1e6, r)[None]
    post = rotate(pre, theta)
    tried = {s.rotary_dim for s in structures(head_dim, head_dim)}
    assert r not in tried
    assert sliced_width(pre, post, tried) == r
    assert Structure(HALF, False, r) in structures(head_dim, head_dim, extra=(r,))
    assert measure_rotation(pre, post, Structure(HALF, False, r)).residual < 1e-9


# ------------------------------------------------------------------ generator

@st.composite
def case(draw):
    arch = draw(st.sampled_from(["llama", "stablelm"]))
    head_dim = draw(st.sampled_from([8, 16] if arch == "stablelm" else [8, 12, 16]))
    heads = draw(st.sampled_from([h for h in (2, 4) if 32 <= h * head_dim <= 64]))
    hidden = heads * head_dim
    kv = draw(st.sampled_from([h for h in (1, 2, heads) if heads % h == 0]))
    layers = draw(st.sampled_from([1, 2]))
    theta = draw(st.sampled_from([1e4, 5e5, 1e6]))
    r_ref = head_dim if arch == "llama" else draw(st.sampled_from(list(range(2, head_dim, 2))))
    cfg = RefConfig(arch, hidden, heads, kv, layers, theta, r_ref)

    fault = draw(st.sampled_from(FAULTS))
    if r_ref == 2 and fault in ("theta", "layout"):
        fault = "clean"  # one pair: inv_freq is base ** 0 = 1 and both layouts pair (0, 1)
    storage = draw(st.sampled_from(STORAGE))
    rotation = "interleaved" if storage == "freqs_cis" else draw(st.sampled_from(["half", "interleaved"]))
    table_layout = rotation
    fused = draw(st.booleans())
    r_c, padded = r_ref, False
    # partial rotary construction of a clean port: slicing, or (interleaved kernel) zero padding,
    # which keeps the pairs (2i, 2i + 1): the same rotation
    if r_ref < head_dim and rotation == "interleaved":
        padded = draw(st.booleans())
    permute = rotation == "interleaved"
    cand_theta, offset, offset_k, garbage = theta, 0, 0, None
    if fault == "theta":
        cand_theta = draw(st.sampled_from([t for t in (1e4, 5e5, 1e6, 1e5) if t != theta]))
    elif fault == "offset":
        offset = draw(st.integers(1, 5))
        offset_k = draw(st.sampled_from([0, offset]))  # the query positions only, or both
    elif fault == "uninit":
        garbage = draw(st.sampled_from(["zeros", "nan", "random"]))
    elif fault == "layout":
        how = draw(st.sampled_from(["no_permutation", "table"] if storage == "tables" else ["no_permutation"]))
        if how == "no_permutation":
            if rotation == "half":  # an interleaved kernel on HF-ordered rows
                rotation = table_layout = "interleaved"
            permute = False
        else:
            table_layout = "interleaved" if rotation == "half" else "half"
    elif fault == "partial":
        how = draw(st.sampled_from(["slice", "pad"] + (["pad_span"] if r_ref < head_dim else [])))
        if how == "pad_span":  # the reference's rotating pairs, rotate-half across the full head
            rotation, table_layout, permute, padded = "half", "half", False, True
            if storage == "freqs_cis":
                storage = "inv_freq"
        else:
            r_c = draw(st.sampled_from([r for r in range(2, head_dim + 1, 2) if r != r_ref]))
            padded = how == "pad"
            if padded and r_c == head_dim:
                padded = False
            if padded and rotation == "half":  # padding the same-width pairs: pairs span the head
                pass
    port = Port(storage, rotation, table_layout, fused, r_c, padded, cand_theta, offset, offset_k,
                permute, garbage)
    return cfg, port, fault


def _rope_and_parity(cfg, port):
    rep = run_check(_spec(cfg, port), only="parity,rope")
    (rope,) = [f for f in rep.findings if f.check == "rope"]
    bad = [f.code for f in rep.findings if f.status in ("fail", "warn")]
    return rope, bad


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case())
@pytest.mark.slow
def test_rope_faults_over_storage_forms_are_named_and_clean_twins_pass(c):
    cfg, port, fault = c
    rope, bad = _rope_and_parity(cfg, port)
    if fault == "clean":
        assert bad == [], (cfg, port, rope.message)
    else:
        assert rope.code == EXPECTED[fault], (cfg, port, rope.code, rope.message)
        # q and k shifted alike leave the attention scores as they are: a warning, not a fail
        uniform_shift = fault == "offset" and port.offset_k == port.offset
        assert rope.status == ("warn" if uniform_shift else "fail"), (cfg, port, rope.message)


def tally(n: int = 300) -> dict:
    """Named right / vague / missed / false alarm per class over ``n`` generated cases."""
    from collections import Counter

    counts: dict[str, Counter] = {}
    seen: list = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(case())
    def run(c):
        cfg, port, fault = c
        rope, bad = _rope_and_parity(cfg, port)
        if fault == "clean":
            verdict = "false_alarm" if bad else "right"
        elif rope.code == EXPECTED[fault]:
            verdict = "right"
        elif rope.status == "fail" or any(b.startswith("parity.") for b in bad):
            verdict = "vague"
        else:
            verdict = "missed"
        counts.setdefault(fault, Counter())[verdict] += 1
        if verdict != "right":
            seen.append((fault, verdict, cfg, port, rope.code, bad))

    run()
    return {"counts": counts, "wrong": seen}
