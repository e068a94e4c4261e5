"""Sampling parity measurements: the candidate's logits-to-token code vs transformers' logits processors.

The facts behind the ``sampling`` family (:mod:`porting_kit.checks.sampling` judges them).

The reference is transformers' processors in ``GenerationConfig`` order
(``GenerationMixin._get_logits_processor``): ``RepetitionPenaltyLogitsProcessor``,
then the warpers ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``, ``MinPLogitsWarper``. Both sides process the same seeded
logits and token histories under each parameter set of the spec's
``sampling_params()``; the processed logits are compared as distributions
(``softmax``, total variation distance ``0.5 * sum |p - q|`` per row), not as
single draws. With codebooks, logits are ``(batch, n_codebooks, vocab)``, histories
``(batch, n_codebooks, T)``, and a parameter given as a list holds one value per
codebook.

Hypotheses (:func:`hypotheses`) rerun the reference with one known fault each:
top-p / min-p before temperature (``order``), the repetition penalty applied
twice, dividing negative logits (``sign``) or not at all, and per-codebook
parameters rolled by one or reversed (``routing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Default test tensors: batch rows, history length, vocabulary, logit scale (logits ~ N(0, 3^2)).
BATCH, HISTORY, VOCAB, LOGIT_SCALE = 2, 24, 256, 3.0
SEED = 20261203
KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")


@dataclass
class ParamResult:
    """One parameter set compared.

    Attributes
    ----------
    index : int
        Position in ``sampling_params()``.
    params : dict
        The parameter set.
    tv : float
        Greatest total variation distance between the two sides' distributions over
        every (batch, codebook) row (0: identical, 1: disjoint).
    worst_row : tuple of int
        ``(batch, codebook)`` of that row (codebook 0 without codebooks).
    """

    index: int
    params: dict
    tv: float
    worst_row: tuple[int, int]


def n_codebooks(params_list: list[dict]) -> int:
    """Codebooks implied by the parameter sets: the length of any list value (0: none).

    Raises
    ------
    ValueError
        Lists of different lengths.
    """
    lengths = {len(v) for p in params_list for v in p.values() if isinstance(v, (list, tuple))}
    if len(lengths) > 1:
        raise ValueError(f"per-codebook parameter lists of different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def test_inputs(n_cb: int, vocab: int = VOCAB, device: str = "cpu"):
    """Seeded logits and histories.

    Returns
    -------
    logits : torch.Tensor [shape=(BATCH, vocab) or (BATCH, n_cb, vocab), float32]
        ``N(0, LOGIT_SCALE^2)``: positive and negative logits (the repetition penalty's sign
        rule shows on both).
    input_ids : torch.LongTensor [shape=(BATCH, HISTORY) or (BATCH, n_cb, HISTORY)]
        Token histories drawn from the first quarter of the vocabulary with repeats.
    """
    import torch

    g = torch.Generator().manual_seed(SEED)
    shape = (BATCH, n_cb) if n_cb else (BATCH,)
    logits = torch.randn(*shape, vocab, generator=g) * LOGIT_SCALE
    ids = torch.randint(0, max(vocab // 4, 1), (*shape, HISTORY), generator=g)
    return logits.to(device), ids.to(device)


def _for_codebook(params: dict, k: int) -> dict:
    return {key: (v[k] if isinstance(v, (list, tuple)) else v) for key, v in params.items()}


def _processors(p: dict, order: str, penalty: str):
    from transformers import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    rp = p.get("repetition_penalty")
    head = []
    if rp is not None and rp != 1.0 and penalty != "none":
        head.append(RepetitionPenaltyLogitsProcessor(float(rp)))
        if penalty == "twice":
            head.append(RepetitionPenaltyLogitsProcessor(float(rp)))
    t = p.get("temperature")
    temp = [TemperatureLogitsWarper(float(t))] if t is not None and t != 1.0 else []
    rest = []
    if p.get("top_k"):
        rest.append(TopKLogitsWarper(int(p["top_k"])))
    if p.get("top_p") is not None and p["top_p"] < 1.0:
        rest.append(TopPLogitsWarper(float(p["top_p"])))
    if p.get("min_p"):
        rest.append(MinPLogitsWarper(float(p["min_p"])))
    return head + (rest + temp if order == "filters_first" else temp + rest)


def _penalty_sign_fault(ids, scores, penalty: float):
    """Every seen token's logit divided by the penalty (negative logits move up: wrong sign)."""
    score = scores.gather(1, ids) / penalty
    return scores.scatter(1, ids, score)


def reference_process(logits, input_ids, params: dict, *, order: str = "generation_config",
                      penalty: str = "once", route: list[int] | None = None):
    """Transformers' processors applied to ``logits`` (per codebook when it has codebooks).

    Parameters
    ----------
    logits : torch.Tensor [shape=(batch, vocab) or (batch, n_codebooks, vocab)]
    input_ids : torch.LongTensor [shape=(batch, T) or (batch, n_codebooks, T)]
    params : dict
        ``GenerationConfig`` keys; a list value holds one value per codebook.
    order : {"generation_config", "filters_first"}
        ``filters_first`` applies top-k / top-p / min-p before temperature (a hypothesis).
    penalty : {"once", "twice", "sign", "none"}
        How the repetition penalty is applied (``once`` is right; the others are hypotheses).
    route : list of int, optional
        Codebook ``k`` uses the parameters of codebook ``route[k]`` (a hypothesis).

    Returns
    -------
    torch.Tensor
        Processed logits, shape of ``logits`` (removed tokens are ``-inf``).
    """
    import torch

    unknown = set(params) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown sampling parameter(s) {sorted(unknown)}; known: {', '.join(KEYS)}")
    squeeze = logits.dim() == 2
    x = logits.unsqueeze(1) if squeeze else logits
    ids = input_ids.unsqueeze(1) if squeeze else input_ids
    out = torch.empty_like(x)
    for k in range(x.shape[1]):
        p = _for_codebook(params, route[k] if route is not None else k)
        row, hist = x[:, k].clone(), ids[:, k]
        if penalty == "sign" and p.get("repetition_penalty") not in (None, 1.0):
            row = _penalty_sign_fault(hist, row, float(p["repetition_penalty"]))
            procs = _processors(p, order, "none")
        else:
            procs = _processors(p, order, penalty)
        for proc in procs:
            row = proc(hist, row)
        out[:, k] = row
    return out[:, 0] if squeeze else out


def distribution_gap(ref_logits, cand_logits) -> tuple[float, tuple[int, int]]:
    """Greatest total variation distance between ``softmax`` rows of two logit tensors.

    Parameters
    ----------
    ref_logits, cand_logits : torch.Tensor [shape=(batch, vocab) or (batch, n_codebooks, vocab)]

    Returns
    -------
    tv : float
        ``max over rows of 0.5 * sum |p - q|`` (a row with NaN counts as 1).
    row : (int, int)
        ``(batch, codebook)`` of that row.
    """
    import torch

    r = ref_logits.float().unsqueeze(1) if ref_logits.dim() == 2 else ref_logits.float()
    c = cand_logits.float().unsqueeze(1) if cand_logits.dim() == 2 else cand_logits.float()
    tv = 0.5 * (torch.softmax(r, -1) - torch.softmax(c, -1)).abs().sum(-1)
    tv = torch.nan_to_num(tv, nan=1.0)
    flat = int(tv.argmax())
    return float(tv.max()), (flat // tv.shape[1], flat % tv.shape[1])


def compare_processor(processor, params_list: list[dict], logits, input_ids) -> list[ParamResult]:
    """The candidate's ``processor(logits, input_ids, params) -> logits`` against the reference.

    Returns
    -------
    list of ParamResult
        One per parameter set.
    """
    out = []
    for i, params in enumerate(params_list):
        cand = processor(logits.clone(), input_ids.clone(), dict(params))
        ref = reference_process(logits, input_ids, params)
        tv, row = distribution_gap(ref, cand)
        out.append(ParamResult(i, params, tv, row))
    return out


def hypotheses(processor, params: dict, logits, input_ids) -> list[tuple[str, str, float]]:
    """The candidate's processed logits against the reference rerun with each known fault.

    Returns
    -------
    list of (str, str, float)
        ``(family, name, tv)``: ``("order", "filters_first", tv)``,
        ``("repetition_penalty", "twice" | "sign" | "none", tv)``,
        ``("codebook_routing", "roll+1" | "roll-1" | "reversed", tv)`` (with codebooks and at
        least one per-codebook list).
    """
    cand = processor(logits.clone(), input_ids.clone(), dict(params))
    tried = [("order", "filters_first", dict(order="filters_first"))]
    if params.get("repetition_penalty") is not None:
        tried += [("repetition_penalty", kind, dict(penalty=kind)) for kind in ("twice", "sign", "none")]
    n = logits.shape[1] if logits.dim() == 3 else 0
    if n > 1 and any(isinstance(v, (list, tuple)) for v in params.values()):
        tried += [("codebook_routing", "roll+1", dict(route=[(k + 1) % n for k in range(n)])),
                  ("codebook_routing", "roll-1", dict(route=[(k - 1) % n for k in range(n)])),
                  ("codebook_routing", "reversed", dict(route=list(range(n))[::-1]))]
    out = []
    for fam, name, kw in tried:
        ref = reference_process(logits, input_ids, params, **kw)
        out.append((fam, name, distribution_gap(ref, cand)[0]))
    return out


def seed_use(sampler, params: dict, logits, input_ids, seed: int = 1234) -> dict[str, Any]:
    """Whether ``sampler(logits, input_ids, params, generator) -> token ids`` draws from ``generator``.

    Two calls with generators seeded alike, the global RNG moved between them, and one call
    with another seed. The global RNG state is restored afterwards.

    Returns
    -------
    dict
        ``same_seed_equal`` (bool: the two same-seed draws agree), ``other_seed_differs``
        (bool), ``draws`` (int: tokens per call).
    """
    import torch

    def draw(s: int):
        g = torch.Generator(device=logits.device).manual_seed(s)
        torch.rand(17)  # move the global RNG: a sampler drawing from it gives other tokens
        return torch.as_tensor(sampler(logits.clone(), input_ids.clone(), dict(params), g))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(99)
        reps = [torch.cat([draw(seed).reshape(-1) for _ in range(8)]) for _ in range(2)]
        other = torch.cat([draw(seed + 1).reshape(-1) for _ in range(8)])
    return {"same_seed_equal": bool(torch.equal(reps[0], reps[1])),
            "other_seed_differs": not bool(torch.equal(reps[0], other)), "draws": int(reps[0].numel())}
