"""Real pair: transformers LlamaForCausalLM (reference) vs Meta's llama-models Transformer (candidate).

Two independent implementations of Llama 3: transformers rotates halves
(NeoX / rotate-half RoPE), Meta's reference code rotates interleaved pairs as
complex numbers. Weights flow HF -> Meta through :func:`convert_weights`, the
inverse of transformers' ``convert_llama_weights_to_hf.py`` mapping: rename, and
undo the q/k row permutation (rotate-half -> interleaved order; k uses
``n_kv_heads``). With that permutation the two agree to fp32 noise (logits max
|diff| ~5e-7); without it (variant ``no_permutation``) they part in layer 0's
attention.

Usage: ``porting-kit check examples/llama_meta.py [--variant NAME]``. Needs the
``examples`` extra (``llama-models``, ``fairscale``). Facts: shared/REAL_PAIRS.md.

Variants (faults planted on the candidate side or in its conversion):

* ``no_permutation``: the conversion skips the q/k permutation.
* ``theta``: candidate ``ModelArgs.rope_theta=10000``; reference 500000.
* ``eps``: candidate ``norm_eps=1e-6``; reference ``rms_norm_eps=1e-5``. Visible
  because the embeddings are normal(0, 0.02) (mean square 4e-4): the first
  norm's output moves by ~1 %.
* ``scaling``: candidate ``use_scaled_rope=False``; the reference uses llama3
  rope scaling (factor 8, low/high freq factor 1/4, original context 8192).
  Below 64 positions the low frequencies move little: every sketch stays under
  the screening bound, and only full tensors per block place it in layer 0's attention.
* ``attn_scale``: layer 1's attention scales its scores by ``1/head_dim`` instead of
  ``1/sqrt(head_dim)``.
* ``attn_scale_small``: layer 1's softmax scale is off by 0.03 % (``1.0003/sqrt(head_dim)``):
  under the sketch screen, caught by ``assert_close`` on that layer's output in float32.
* ``decode_position``: a one-token decode step gets RoPE position 0 (the prefill is
  right; the cache slot is right), as reported against mlx-vlm.
* ``decode_kv_stale``: a one-token decode step writes its K/V one slot early
  (``start_pos - 1``, over the previous token's) and reads the cache up to there: the
  step attends to a cache one token short.
* ``kv_swap_layer1``: the conversion maps layer 1's ``k_proj`` to ``wv`` and ``v_proj``
  to ``wk`` (every other layer right).

Decode: the reference is driven through ``past_key_values``; the candidate keeps its
own cache (``cache_k``/``cache_v``) and is stepped through :func:`candidate_step`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import tempfile
from typing import Any

VARIANTS = {
    "no_permutation": "conversion skips the q/k permutation (interleaved vs rotate-half rows)",
    "theta": "candidate ModelArgs.rope_theta=10000 (reference 500000)",
    "eps": "candidate norm_eps=1e-6 (reference rms_norm_eps=1e-5)",
    "scaling": "candidate use_scaled_rope=False (reference uses llama3 rope scaling)",
    "attn_scale": "layer 1's attention scales scores by 1/head_dim instead of 1/sqrt(head_dim)",
    "attn_scale_small": "layer 1's softmax scale off by 0.03% (1.0003/sqrt(head_dim))",
    "decode_position": "one-token decode steps get RoPE position 0 (prefill right)",
    "decode_kv_stale": "one-token decode steps write K/V one slot early and read a cache one token short",
    "kv_swap_layer1": "conversion maps layer 1's k_proj to wv and v_proj to wk (other layers right)",
    "rope_half_table": "candidate precomputes real cos/sin tables in the half-split layout "
                       "(cat(freqs, freqs)) and applies them with its interleaved rotation",
}
VARIANT: str | None = None

SEED = 0
SEQ_LEN = 64
#: One-token decode steps after the prompt (decode family); the candidate's cache holds
#: ``SEQ_LEN + MAX_DECODE`` positions.
DECODE_STEPS = 16
MAX_DECODE = 32
#: Layer whose attention carries the attn_scale / attn_scale_small fault.
SCALE_LAYER = 1
VOCAB_SIZE = 512
#: Shape shared by both sides (REAL_PAIRS.md): dim 128, 2 layers, 8 heads, 2 kv heads, head_dim 16.
DIM, N_LAYERS, N_HEADS, N_KV_HEADS = 128, 2, 8, 2
ROPE_THETA = 5e5
NORM_EPS = 1e-5


def _guard_torchaudio() -> None:
    # A CUDA-only torchaudio wheel (pulled in by encodec) must not break `import transformers`.
    try:
        from porting_kit.adapters.torchaudio_guard import ensure_importable
    except ImportError:  # pragma: no cover - spec used without porting-kit's guard
        return
    ensure_importable()


def reference_hf_config():
    """The transformers ``LlamaConfig`` of the reference (rope_theta inside ``rope_parameters``)."""
    _guard_torchaudio()
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=DIM, intermediate_size=448, num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS, num_key_value_heads=N_KV_HEADS, rms_norm_eps=NORM_EPS,
        rope_parameters={"rope_type": "llama3", "rope_theta": ROPE_THETA, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        max_position_embeddings=131072, tie_word_embeddings=False,
    )


def model_args():
    """Meta ``ModelArgs`` of the candidate for the current ``VARIANT``.

    ``ffn_dim_multiplier`` 1.3 with ``multiple_of`` 32 gives the reference's
    intermediate size 448 (``32 * ceil(int(1.3 * int(2 * 4 * 128 / 3)) / 32)``).
    """
    from llama_models.llama3.args import ModelArgs

    return ModelArgs(
        dim=DIM, n_layers=N_LAYERS, n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, vocab_size=VOCAB_SIZE,
        multiple_of=32, ffn_dim_multiplier=1.3,
        norm_eps=1e-6 if VARIANT == "eps" else NORM_EPS,
        rope_theta=10000.0 if VARIANT == "theta" else ROPE_THETA,
        use_scaled_rope=VARIANT != "scaling",
        max_batch_size=2, max_seq_len=SEQ_LEN + MAX_DECODE,
    )


def init_model_parallel() -> None:
    """Initialise ``torch.distributed`` (one process) and fairscale model parallel size 1.

    Idempotent. Gloo with a ``file://`` rendezvous in a temporary directory; when
    gloo cannot start (no loopback interface), torch's in-process ``fake``
    backend. fairscale's banner lines are swallowed.
    """
    import fairscale.nn.model_parallel.initialize as fs_init
    import torch.distributed as dist

    if not dist.is_initialized():
        rendezvous = tempfile.mkdtemp(prefix="porting-kit-pg-")
        try:
            dist.init_process_group("gloo", init_method=f"file://{rendezvous}/store", rank=0,
                                    world_size=1)
        except (RuntimeError, ValueError):
            from torch.testing._internal.distributed.fake_pg import FakeStore

            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    if not fs_init.model_parallel_is_initialized():
        with contextlib.redirect_stdout(io.StringIO()):
            fs_init.initialize_model_parallel(1)


def reference():
    """HF ``LlamaForCausalLM`` with seeded random weights: transformers' init (normal, std
    0.02) for linears and embeddings, ``1 + 0.1 * randn`` for every RMSNorm weight.
    The global torch RNG is left as it was."""
    import torch

    _guard_torchaudio()
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = LlamaForCausalLM(reference_hf_config())
        with torch.no_grad():
            for name, module in model.named_modules():
                if type(module).__name__.endswith("RMSNorm"):
                    module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
    return model.eval()


def candidate():
    """Meta ``llama_models.llama3.model.Transformer``; fairscale leaves its weights
    uninitialised: :func:`convert_weights` sets every one."""
    init_model_parallel()
    from llama_models.llama3.model import Transformer

    model = Transformer(model_args()).eval()
    _plant(model)
    return model


def _plant(model) -> None:
    """Bind the faulty forwards of the decode / attention-scale variants to ``model``."""
    import math
    import types

    if VARIANT == "decode_position":
        model.forward = types.MethodType(_transformer_forward_decode_at_zero, model)
    for i, layer in enumerate(model.layers):
        att = layer.attention
        att.pk_scale = 1.0 / math.sqrt(att.head_dim)
        att.pk_decode_slot_offset = 0
        att.pk_half_table = VARIANT == "rope_half_table"
        if VARIANT == "rope_half_table":
            pass
        elif VARIANT == "attn_scale" and i == SCALE_LAYER:
            att.pk_scale = 1.0 / att.head_dim
        elif VARIANT == "attn_scale_small" and i == SCALE_LAYER:
            att.pk_scale = 1.0003 / math.sqrt(att.head_dim)
        elif VARIANT == "decode_kv_stale":
            att.pk_decode_slot_offset = -1
        else:
            continue
        att.forward = types.MethodType(_attention_forward, att)


def _attention_forward(self, x, start_pos: int, freqs_cis, mask):
    """Meta's ``Attention.forward`` (llama_models 3) with two planted knobs.

    ``self.pk_scale`` replaces ``1/sqrt(head_dim)``; in a one-token step the K/V are
    written at ``start_pos + self.pk_decode_slot_offset`` and the cache is read up to
    there. Shapes: x (batch, seqlen, dim) -> (batch, seqlen, dim).
    """
    import torch
    import torch.nn.functional as F
    from llama_models.llama3.model import apply_rotary_emb, repeat_kv

    bsz, seqlen, _ = x.shape
    xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
    xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
    xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
    xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
    if getattr(self, "pk_half_table", False):
        xq, xk = _rotate_interleaved_with_half_tables(xq, xk, freqs_cis)
    else:
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
    self.cache_k = self.cache_k.to(xq)
    self.cache_v = self.cache_v.to(xq)
    slot = start_pos + (self.pk_decode_slot_offset if seqlen == 1 else 0)
    self.cache_k[:bsz, slot: slot + seqlen] = xk
    self.cache_v[:bsz, slot: slot + seqlen] = xv
    keys = repeat_kv(self.cache_k[:bsz, : slot + seqlen], self.n_rep).transpose(1, 2)
    values = repeat_kv(self.cache_v[:bsz, : slot + seqlen], self.n_rep).transpose(1, 2)
    xq = xq.transpose(1, 2)
    scores = torch.matmul(xq, keys.transpose(2, 3)) * self.pk_scale
    if mask is not None:
        scores = scores + mask
    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
    output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
    return self.wo(output)


def _rotate_interleaved_with_half_tables(xq, xk, freqs_cis):
    """The ``rope_half_table`` fault: cos/sin tables built in the half-split layout
    (``cat(freqs, freqs)``, HF's cache) applied with the interleaved pair rotation.
    xq/xk (batch, seq, heads, head_dim); freqs_cis (seq, head_dim/2) complex."""
    import torch

    ang = freqs_cis.angle().float()
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]  # (1, seq, 1, head_dim)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]

    def rot(x):
        x = x.float()
        pairs = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)  # interleaved rotate
        return x * cos + pairs * sin

    return rot(xq).type_as(xq), rot(xk).type_as(xk)


def _transformer_forward_decode_at_zero(self, tokens, start_pos: int):
    """Meta's ``Transformer.forward`` (llama_models 3) where a one-token step takes RoPE
    position 0 instead of ``start_pos`` (the cache slot stays ``start_pos``).
    tokens (batch, seqlen) -> logits (batch, seqlen, vocab) float32."""
    import torch

    with torch.inference_mode():
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        self.freqs_cis = self.freqs_cis.to(h.device)
        rope_pos = 0 if seqlen == 1 else start_pos
        freqs_cis = self.freqs_cis[rope_pos: rope_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.triu(torch.full((seqlen, seqlen), float("-inf"), device=tokens.device), diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        return self.output(self.norm(h)).float()


def unpermute_rotary(w, n_heads: int):
    """Rotate-half row order -> interleaved row order for a q or k projection.

    Inverse of transformers' ``permute`` in ``convert_llama_weights_to_hf.py``
    (``w.view(n_heads, head_dim // 2, 2, dim).transpose(1, 2)``): HF rows of a head
    are ``[re_0..re_{d/2-1}, im_0..im_{d/2-1}]``, Meta's ``[re_0, im_0, re_1, im_1, ...]``.

    Parameters
    ----------
    w : torch.Tensor (n_heads * head_dim, dim)
    n_heads : int
        ``n_heads`` for q, ``n_kv_heads`` for k.

    Returns
    -------
    torch.Tensor (n_heads * head_dim, dim)
    """
    rows, dim = w.shape
    head_dim = rows // n_heads
    return w.view(n_heads, 2, head_dim // 2, dim).transpose(1, 2).reshape(rows, dim)


_LAYER_RENAMES = {
    "self_attn.q_proj": "attention.wq",
    "self_attn.k_proj": "attention.wk",
    "self_attn.v_proj": "attention.wv",
    "self_attn.o_proj": "attention.wo",
    "mlp.gate_proj": "feed_forward.w1",
    "mlp.down_proj": "feed_forward.w2",
    "mlp.up_proj": "feed_forward.w3",
    "input_layernorm": "attention_norm",
    "post_attention_layernorm": "ffn_norm",
}
_TOP_RENAMES = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_RE = re.compile(r"model\.layers\.(\d+)\.(.+)\.weight")


def convert_weights(reference_state_dict: dict) -> dict:
    """HF Llama state dict -> Meta ``Transformer`` state dict.

    Renames (``model.layers.N.self_attn.q_proj`` -> ``layers.N.attention.wq``,
    ``mlp.gate/up/down_proj`` -> ``feed_forward.w1/w3/w2``, norms, embeddings,
    ``lm_head`` -> ``output``) and applies :func:`unpermute_rotary` to q (``n_heads``)
    and k (``n_kv_heads``), except in the ``no_permutation`` variant.

    Raises
    ------
    KeyError
        For a reference tensor this mapping does not know (e.g. a bias).
    """
    permute = VARIANT != "no_permutation"
    out: dict[str, Any] = {}
    for name, tensor in reference_state_dict.items():
        if "rotary_emb" in name:
            continue
        if name in _TOP_RENAMES:
            out[_TOP_RENAMES[name]] = tensor
            continue
        m = _LAYER_RE.fullmatch(name)
        if m is None or m.group(2) not in _LAYER_RENAMES:
            raise KeyError(f"no Meta Llama name for reference tensor {name}")
        layer, part = m.group(1), m.group(2)
        dest = _LAYER_RENAMES[part]
        if VARIANT == "kv_swap_layer1" and layer == "1" and part in ("self_attn.k_proj", "self_attn.v_proj"):
            dest = "attention.wv" if part == "self_attn.k_proj" else "attention.wk"
        if permute and part == "self_attn.q_proj":
            tensor = unpermute_rotary(tensor, N_HEADS)
        elif permute and part == "self_attn.k_proj":
            tensor = unpermute_rotary(tensor, N_KV_HEADS)
        out[f"layers.{layer}.{dest}.weight"] = tensor
    return out


def inputs() -> dict:
    """``{"input_ids": LongTensor (1, 64)}``, seeded random token ids < 512."""
    import torch

    gen = torch.Generator().manual_seed(SEED + 7)
    return {"input_ids": torch.randint(0, VOCAB_SIZE, (1, SEQ_LEN), generator=gen)}


def run_reference(model, inputs):
    """Logits (batch, T, vocab) of ``LlamaForCausalLM``."""
    return model(input_ids=inputs["input_ids"], use_cache=False).logits


def run_candidate(model, inputs):
    """Logits (batch, T, vocab) of Meta's ``Transformer(tokens, start_pos=0)`` (float32)."""
    return model(inputs["input_ids"], start_pos=0)


def candidate_step(model, tokens, start_pos: int):
    """One step of Meta's ``Transformer`` with its own KV cache: tokens (batch, n) at
    ``start_pos`` -> logits (batch, n, vocab) float32."""
    return model(tokens, start_pos=start_pos)


def reference_config() -> dict[str, Any]:
    """The reference's transformers config as a dict (``rope_parameters`` nested, as in 5.x)."""
    return reference_hf_config().to_dict()


def candidate_config() -> dict[str, Any]:
    """The candidate's Meta ``ModelArgs`` as a dict (``rope_theta``, ``use_scaled_rope``,
    ``norm_eps``, ``dim``, ``n_heads``...)."""
    return dataclasses.asdict(model_args())
