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
}
VARIANT: str | None = None

SEED = 0
SEQ_LEN = 64
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
        max_batch_size=2, max_seq_len=SEQ_LEN,
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

    return Transformer(model_args()).eval()


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
        if permute and part == "self_attn.q_proj":
            tensor = unpermute_rotary(tensor, N_HEADS)
        elif permute and part == "self_attn.k_proj":
            tensor = unpermute_rotary(tensor, N_KV_HEADS)
        out[f"layers.{layer}.{_LAYER_RENAMES[part]}.weight"] = tensor
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


def reference_config() -> dict[str, Any]:
    """The reference's transformers config as a dict (``rope_parameters`` nested, as in 5.x)."""
    return reference_hf_config().to_dict()


def candidate_config() -> dict[str, Any]:
    """The candidate's Meta ``ModelArgs`` as a dict (``rope_theta``, ``use_scaled_rope``,
    ``norm_eps``, ``dim``, ``n_heads``...)."""
    return dataclasses.asdict(model_args())
