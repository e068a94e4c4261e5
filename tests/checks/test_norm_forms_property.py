"""Property test of the norm family on small random models (issue 29, point 1, norms).

The contract of the norm diagnoses over the *constructions* of a port's norms, run end to
end (``run_check(spec, only="parity,norm")``) on a tiny transformers reference against a tiny
hand-written candidate port:

* references: ``LlamaForCausalLM`` (RMSNorm, stored gain applied as ``w``),
  ``Qwen3ForCausalLM`` (adds per-head ``q_norm`` / ``k_norm``), ``GemmaForCausalLM``
  (zero-init stored gain applied as ``1 + w``, embeddings scaled by sqrt(hidden)); hidden 32-64, 1-2 layers, seeded random
  weights (each built once per config: :func:`_reference`);
* the candidate: its norm modules keep eps under ``eps`` / ``variance_epsilon`` /
  ``epsilon``, or call ``F.rms_norm`` with a literal eps; storage names HF's or Meta-like
  (``attn_norm`` / ``ffn_norm``, renamed by ``convert_weights``); fused or split q/k/v;
* faults, placed at one position (``input_layernorm``, ``post_attention_layernorm``, the
  final norm, or q/k norm): ``eps`` (another eps), ``kind`` (LayerNorm with or without bias
  where the reference has RMSNorm), ``offset`` ((1 + w) on a plain-gain reference, w on a
  Gemma reference), ``placement`` (post-norm blocks), ``qk`` (Qwen3 reference, port without
  q/k norms), ``upcast`` (the variance computed in the input's dtype; the spec runs in
  float32 and the norm probe measures each module's bfloat16 copy against float64, so no
  bfloat16 forward of the model is needed); and the clean twin of each construction.

A fault must get its exact norm code; a clean twin no fail/warn finding at all.
:func:`tally` counts named right / vague / missed / false alarm per class.
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
F = torch.nn.functional
VOCAB, SEQ, MAX_POS, THETA = 64, 12, 32, 1e4

FAULTS = ("clean", "eps", "kind", "offset", "placement", "qk", "upcast")
EXPECTED = {"eps": "norm.eps_mismatch", "kind": "norm.kind_mismatch", "offset": "norm.weight_offset",
            "placement": "norm.placement", "qk": "norm.missing_qk_norm", "upcast": "norm.no_fp32_upcast"}


# ------------------------------------------------------------------ reference

@dataclass(frozen=True)
class RefConfig:
    arch: str  # "llama", "qwen3" (q/k norm), "gemma" ((1 + w) gain)
    hidden: int
    heads: int
    layers: int
    eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@functools.cache
def _reference(cfg: RefConfig):
    from transformers import (GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)

    common = dict(vocab_size=VOCAB, hidden_size=cfg.hidden, intermediate_size=2 * cfg.hidden,
                  num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                  num_key_value_heads=cfg.heads, max_position_embeddings=MAX_POS,
                  tie_word_embeddings=False, rms_norm_eps=cfg.eps, head_dim=cfg.head_dim,
                  rope_parameters={"rope_type": "default", "rope_theta": THETA})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(hash(cfg) % 2**31)
        if cfg.arch == "llama":
            model = LlamaForCausalLM(LlamaConfig(**common))
        elif cfg.arch == "qwen3":
            model = Qwen3ForCausalLM(Qwen3Config(**common))
        else:
            model = GemmaForCausalLM(GemmaConfig(**common, hidden_act="gelu_pytorch_tanh"))
        with torch.no_grad():  # gains away from their init, so a wrong norm would show
            centre = 0.0 if cfg.arch == "gemma" else 1.0
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(centre + 0.1 * torch.randn_like(p))
    return model.eval()


# ------------------------------------------------------------------ candidate port

@dataclass(frozen=True)
class Port:
    kind: str  # "rms", "layer", "layer_nobias"
    eps: float
    eps_attr: str  # "eps", "variance_epsilon", "epsilon", "functional" (F.rms_norm, literal eps)
    plus_one: bool  # the gain applied as (1 + w)
    fault_at: str  # "input", "post", "final", "qk": where the faulty norm sits
    fault: str
    post_norm: bool
    qk_norm: bool
    fused: bool
    meta_names: bool  # attn_norm / ffn_norm instead of HF's names
    gemma: bool  # embeddings scaled by sqrt(hidden), gelu-tanh MLP


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, eps_attr, plus_one, upcast=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.attr, self.plus_one, self.dim, self.upcast = eps_attr, plus_one, dim, upcast
        setattr(self, "eps" if eps_attr == "functional" else eps_attr, eps)

    def forward(self, x):
        w = (1.0 + self.weight) if self.plus_one else self.weight
        if self.attr == "functional":
            return self._functional(x, w)
        eps = getattr(self, self.attr)
        if not self.upcast:  # variance in the input's dtype
            return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
        h = x.float()
        return (w.float() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)

    def _functional(self, x, w):
        e = self.eps  # the literal the generated port hard-codes
        if e == 1e-5:
            return F.rms_norm(x, (self.dim,), w, eps=1e-5)
        if e == 1e-6:
            return F.rms_norm(x, (self.dim,), w, eps=1e-6)
        return F.rms_norm(x, (self.dim,), w, eps=1e-8)


class LayerNorm(nn.LayerNorm):
    pass


def _make_norm(dim: int, cfg: RefConfig, port: Port, here: str):
    faulty = port.fault_at == here
    eps = port.eps if faulty and port.fault == "eps" else cfg.eps
    plus_one = cfg.arch == "gemma"
    if faulty and port.fault == "offset":
        plus_one = not plus_one
    if faulty and port.fault == "kind":
        return LayerNorm(dim, eps=eps, bias=port.kind == "layer")
    return RMSNorm(dim, eps, port.eps_attr, plus_one, upcast=not (faulty and port.fault == "upcast"))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class Attention(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.cfg, self.port, d = cfg, port, cfg.head_dim
        if port.fused:
            self.qkv_proj = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=False)
        else:
            self.q_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
            self.k_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
            self.v_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.o_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        if port.qk_norm:
            self.q_norm, self.k_norm = _make_norm(d, cfg, port, "qk"), _make_norm(d, cfg, port, "qk_k")
        inv = 1.0 / (THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        c, d = self.cfg, self.cfg.head_dim
        if self.port.fused:
            q, k, v = self.qkv_proj(x).chunk(3, -1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = (z.view(b, t, c.heads, d) for z in (q, k, v))
        if self.port.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos(), emb.sin()
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: RefConfig, gemma: bool):
        super().__init__()
        self.gemma = gemma
        self.gate_proj = nn.Linear(cfg.hidden, 2 * cfg.hidden, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, 2 * cfg.hidden, bias=False)
        self.down_proj = nn.Linear(2 * cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        act = F.gelu(g, approximate="tanh") if self.gemma else F.silu(g)
        return self.down_proj(act * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.port = port
        n1, n2 = ("attn_norm", "ffn_norm") if port.meta_names else ("input_layernorm", "post_attention_layernorm")
        self.names = (n1, n2)
        setattr(self, n1, _make_norm(cfg.hidden, cfg, port, "input"))
        setattr(self, n2, _make_norm(cfg.hidden, cfg, port, "post"))
        self.self_attn, self.mlp = Attention(cfg, port), MLP(cfg, port.gemma)

    def forward(self, x):
        n1, n2 = (getattr(self, n) for n in self.names)
        if self.port.post_norm:
            x = n1(x + self.self_attn(x))
            return n2(x + self.mlp(x))
        x = x + self.self_attn(n1(x))
        return x + self.mlp(n2(x))


class ScaledEmbedding(nn.Embedding):
    """Gemma's embeddings: scaled by sqrt(hidden) inside the module (as the reference)."""

    def forward(self, input_ids):
        return super().forward(input_ids) * torch.tensor(self.embedding_dim ** 0.5, dtype=self.weight.dtype)


class CandidateLM(nn.Module):
    def __init__(self, cfg: RefConfig, port: Port):
        super().__init__()
        self.port, self.hidden = port, cfg.hidden
        self.embed_tokens = (ScaledEmbedding if port.gemma else nn.Embedding)(VOCAB, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg, port) for _ in range(cfg.layers))
        self.norm = _make_norm(cfg.hidden, cfg, port, "final")
        self.lm_head = nn.Linear(cfg.hidden, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def _convert(cfg: RefConfig, port: Port, cand_keys: dict, sd: dict) -> dict:
    """HF state dict -> the candidate's: ``model.`` prefix dropped, Meta-like norm names,
    q/k/v fused, q/k norms dropped when the port has none, LayerNorm biases zero."""
    out = {}
    for name, w in sd.items():
        name = name.removeprefix("model.")
        if port.meta_names:
            name = name.replace("input_layernorm", "attn_norm").replace("post_attention_layernorm", "ffn_norm")
        if name in cand_keys or "_proj." in name:
            out[name] = w
    if port.fused:
        for i in range(cfg.layers):
            p = f"layers.{i}.self_attn."
            out[p + "qkv_proj.weight"] = torch.cat([out.pop(p + f"{n}_proj.weight") for n in "qkv"])
    for k in cand_keys.keys() - out.keys():  # a LayerNorm's bias: zero
        if k.endswith(".bias"):
            out[k] = torch.zeros(cand_keys[k])
    return out


def _spec(cfg: RefConfig, port: Port) -> Spec:
    mod = types.ModuleType("norm_forms_spec")
    mod.reference = lambda: _reference(cfg)
    mod.candidate = lambda: CandidateLM(cfg, port).eval()
    keys = {k: v.shape for k, v in CandidateLM(cfg, port).state_dict().items()}
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=gen)
    mod.inputs = lambda: {"input_ids": ids}
    mod.run_reference = lambda m, x: m(input_ids=x["input_ids"], use_cache=False).logits
    mod.run_candidate = lambda m, x: m(x["input_ids"])
    mod.convert_weights = lambda sd: _convert(cfg, port, keys, sd)
    return Spec(module=mod, name="test:norm_forms")


# ------------------------------------------------------------------ generator

@st.composite
def case(draw):
    arch = draw(st.sampled_from(["llama", "qwen3", "gemma"]))
    head_dim = draw(st.sampled_from([8, 16]))
    heads = draw(st.sampled_from([h for h in (2, 4) if 32 <= h * head_dim <= 64]))
    layers = draw(st.sampled_from([1, 2]))
    eps = draw(st.sampled_from([1e-5, 1e-6]))
    cfg = RefConfig(arch, heads * head_dim, heads, layers, eps)

    faults = [f for f in FAULTS if f != "qk" or arch == "qwen3"]
    fault = draw(st.sampled_from(faults))
    eps_attr = draw(st.sampled_from(["eps", "variance_epsilon", "epsilon", "functional"]))
    positions = ["input", "post", "final"] + (["qk"] if arch == "qwen3" else [])
    if fault == "upcast":
        # NOT ASSERTED (issue 29, left out): a q/k norm (over head_dim 8 or 16) without the float32
        # upcast is missed (norm.ok): its bfloat16 error stays under UPCAST_RATIO x the reference's
        positions = ["input", "post", "final"]
    fault_at = draw(st.sampled_from(positions)) if fault in ("eps", "kind", "offset", "upcast") else "none"
    if fault == "upcast" and eps_attr == "functional":  # F.rms_norm computes in float32 itself
        eps_attr = "eps"
    cand_eps, kind = eps, "rms"
    if fault == "eps":
        cand_eps = draw(st.sampled_from([e for e in (1e-5, 1e-6, 1e-8) if e != eps]))
    elif fault == "kind":
        kind = draw(st.sampled_from(["layer", "layer_nobias"]))
    port = Port(kind=kind, eps=cand_eps, eps_attr=eps_attr, plus_one=arch == "gemma", fault_at=fault_at,
                fault=fault, post_norm=fault == "placement", qk_norm=arch == "qwen3" and fault != "qk",
                fused=draw(st.booleans()), meta_names=draw(st.booleans()), gemma=arch == "gemma")
    return cfg, port, fault


def _norm_and_bad(cfg, port):
    rep = run_check(_spec(cfg, port), only="parity,norm")
    norms = [f for f in rep.findings if f.check == "norm"]
    bad = [f.code for f in rep.findings if f.status in ("fail", "warn")]
    return norms, bad


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case())
@pytest.mark.slow
def test_norm_faults_over_constructions_are_named_and_clean_twins_pass(c):
    cfg, port, fault = c
    norms, bad = _norm_and_bad(cfg, port)
    if fault == "clean":
        assert bad == [], (cfg, port, [(f.code, f.message) for f in norms])
    else:
        codes = [f.code for f in norms if f.status == "fail"]
        assert EXPECTED[fault] in codes, (cfg, port, [(f.code, f.message) for f in norms])
        assert "norm.unexplained" not in codes, (cfg, port, codes)


def tally(n: int = 200) -> dict:
    """Named right / vague / missed / false alarm per class over ``n`` generated cases."""
    from collections import Counter

    counts: dict[str, Counter] = {}
    seen: list = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(case())
    def run(c):
        cfg, port, fault = c
        norms, bad = _norm_and_bad(cfg, port)
        codes = [f.code for f in norms if f.status == "fail"]
        if fault == "clean":
            verdict = "false_alarm" if bad else "right"
        elif EXPECTED[fault] in codes and "norm.unexplained" not in codes:
            verdict = "right"
        elif bad:
            verdict = "vague"
        else:
            verdict = "missed"
        counts.setdefault(fault, Counter())[verdict] += 1
        if verdict != "right":
            seen.append((fault, verdict, cfg, port, bad))

    run()
    return {"counts": counts, "wrong": seen}
