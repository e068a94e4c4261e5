"""The tiny TTS port's sampler: logits of every codebook -> next codec tokens, vLLM-style.

Written as a port's sampling code is (plain torch, per-codebook parameters,
a per-request ``torch.Generator``), not with transformers' processors, so the
``sampling`` family compares two implementations. Order per codebook:
repetition penalty, temperature, top-k, top-p, min-p, then a draw.

Planted faults (``porting-kit check --example tts:NAME --only sampling``):

* ``sampling_penalty_sign``: the repetition penalty divides every seen token's logit, so a
  negative logit moves *up* (transformers multiplies negative ones).
* ``sampling_order``: top-p and min-p applied before temperature.
* ``sampling_codebook_routing``: codebook ``k`` reads the parameters of codebook ``k + 1``.
* ``sampling_seed_ignored``: the draw uses the global RNG, not the request's generator.

Sampler-only faults (``sampling_draw_*``): :func:`process` stays clean and :func:`sample`, which
processes the logits itself before its draw, carries the fault, so only the draws show it
(the ``sampling`` family compares them as a distribution):

* ``sampling_draw_penalty_sign``, ``sampling_draw_order``, ``sampling_draw_codebook_routing``: as above.
* ``sampling_draw_no_min_p``: the draw ignores ``min_p`` (no known fault: ``sampling.unexplained``).
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLING_VARIANTS = {
    "sampling_penalty_sign": "port's repetition penalty divides negative logits too (they move up)",
    "sampling_order": "port applies top-p / min-p before temperature",
    "sampling_codebook_routing": "port applies codebook k+1's sampling parameters to codebook k",
    "sampling_seed_ignored": "port's sampler draws from the global RNG, not the request generator",
}

SAMPLER_VARIANTS = {
    "sampling_draw_penalty_sign": "port's sampler (not its logits processor) divides negative logits by the "
                            "repetition penalty -> sampling.repetition_penalty from the draws",
    "sampling_draw_order": "port's sampler applies top-p / min-p before temperature -> sampling.order "
                     "from the draws",
    "sampling_draw_codebook_routing": "port's sampler applies codebook k+1's parameters to codebook k "
                                "-> sampling.codebook_routing from the draws",
    "sampling_draw_no_min_p": "port's sampler ignores min_p -> sampling.unexplained from the draws",
}

#: Codebooks of the tiny TTS (EnCodec 3 kbps) and a reduced vocabulary for the sampling check.
N_CODEBOOKS = 4
VOCAB = 256


@dataclass
class SamplerFaults:
    """Fault knobs of :func:`process` / :func:`sample` (all off: the clean port)."""

    penalty_sign: bool = False
    filters_before_temperature: bool = False
    codebook_shift: int = 0
    global_rng: bool = False
    ignore_min_p: bool = False


def faults_for(variant: str | None) -> SamplerFaults:
    """The :class:`SamplerFaults` of a tts variant (clean for every non-sampling variant)."""
    return SamplerFaults(penalty_sign=variant == "sampling_penalty_sign",
                         filters_before_temperature=variant == "sampling_order",
                         codebook_shift=1 if variant == "sampling_codebook_routing" else 0,
                         global_rng=variant == "sampling_seed_ignored")


def sampler_faults_for(variant: str | None) -> SamplerFaults:
    """The :class:`SamplerFaults` of :func:`sample` for a tts variant: a ``sampling_draw_*`` variant's
    fault, else :func:`faults_for`'s (the processor's faults show in the draws too)."""
    if variant not in SAMPLER_VARIANTS:
        return faults_for(variant)
    return SamplerFaults(penalty_sign=variant == "sampling_draw_penalty_sign",
                         filters_before_temperature=variant == "sampling_draw_order",
                         codebook_shift=1 if variant == "sampling_draw_codebook_routing" else 0,
                         ignore_min_p=variant == "sampling_draw_no_min_p")


def sampling_params() -> list[dict]:
    """Parameter sets the check runs (``GenerationConfig`` keys; lists are per codebook)."""
    return [
        {"temperature": 0.7, "top_k": 50, "top_p": 0.8, "repetition_penalty": 1.3},
        {"temperature": [0.6, 0.9, 1.2, 1.5], "top_p": [0.9, 0.7, 0.95, 0.6],
         "repetition_penalty": [1.1, 1.5, 1.0, 1.2]},
        {"temperature": 1.4, "min_p": 0.05},
    ]


def _value(params: dict, key: str, k: int):
    v = params.get(key)
    return v[k] if isinstance(v, (list, tuple)) else v


def _penalize(row, hist, penalty: float, sign_fault: bool):
    """Repetition penalty on ``row`` (batch, vocab) for the tokens in ``hist`` (batch, T)."""
    import torch

    seen = row.gather(1, hist)
    if sign_fault:
        seen = seen / penalty
    else:
        seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return row.scatter(1, hist, seen)


def _filters(row, top_k, top_p, min_p):
    """Top-k, top-p (smallest set with probability >= top_p, at least one token), min-p."""
    import torch

    if top_k:
        kth = torch.topk(row, min(int(top_k), row.shape[-1])).values[..., -1:]
        row = row.masked_fill(row < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        srt, idx = torch.sort(row, descending=False)
        cum = srt.softmax(-1).cumsum(-1)
        drop = cum <= 1 - top_p
        drop[..., -1:] = False
        row = row.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))
    if min_p:
        probs = row.softmax(-1)
        drop = probs < min_p * probs.max(-1, keepdim=True).values
        row = row.masked_fill(drop, float("-inf"))
    return row


def process(logits, input_ids, params: dict, faults: SamplerFaults):
    """Processed logits of every codebook.

    Parameters
    ----------
    logits : torch.Tensor [shape=(batch, n_codebooks, vocab)]
    input_ids : torch.LongTensor [shape=(batch, n_codebooks, T)]
        Each codebook's history.
    params : dict
        ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``: a scalar or
        one value per codebook.
    faults : SamplerFaults

    Returns
    -------
    torch.Tensor [shape=(batch, n_codebooks, vocab)]
        Removed tokens hold ``-inf``.
    """
    out = logits.clone()
    n = logits.shape[1]
    for k in range(n):
        src = (k + faults.codebook_shift) % n
        row = out[:, k]
        rp = _value(params, "repetition_penalty", src)
        if rp is not None and rp != 1.0:
            row = _penalize(row, input_ids[:, k], float(rp), faults.penalty_sign)
        t = _value(params, "temperature", src) or 1.0
        min_p = None if faults.ignore_min_p else _value(params, "min_p", src)
        filt = (_value(params, "top_k", src), _value(params, "top_p", src), min_p)
        if faults.filters_before_temperature:
            row = _filters(row, *filt) / t
        else:
            row = _filters(row / t, *filt)
        out[:, k] = row
    return out


def sample(logits, input_ids, params: dict, generator, faults: SamplerFaults):
    """One token per (batch, codebook), drawn from :func:`process`'s distribution.

    Returns
    -------
    torch.LongTensor [shape=(batch, n_codebooks)]
    """
    import torch

    probs = process(logits, input_ids, params, faults).softmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    draw = torch.multinomial(flat, 1, generator=None if faults.global_rng else generator)
    return draw.reshape(probs.shape[:-1])
