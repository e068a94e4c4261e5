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

A ``candidate_sampler`` is compared through its draws (:func:`compare_sampler`): many
seeded draws per (batch, codebook) row, their empirical distribution against the
reference's, total variation distance against a bound (:func:`tv_bound`) that a sampler
drawing exactly the reference distribution exceeds with probability below
:data:`FALSE_ALARM` over the whole comparison.

Hypotheses (:func:`hypotheses`, :func:`draw_hypotheses`) rerun the reference with one known fault each:
top-p / min-p before temperature (``order``), the repetition penalty applied
twice, dividing negative logits (``sign``) or not at all, and per-codebook
parameters rolled by one or reversed (``routing``); the routing is also identified from
the data, row by row (the codebook whose parameters reproduce each (batch, codebook) row:
any permutation, or ``repeat_interleave`` over the flattened rows).
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
    input_ids : torch.LongTensor [shape=(BATCH, SEEN_TOP + HISTORY) or (BATCH, n_cb, SEEN_TOP + HISTORY)]
        Token histories: ``HISTORY`` tokens drawn from the first quarter of the vocabulary
        with repeats, after ``SEEN_TOP`` more: batch row 0's likeliest tokens (what top-k /
        top-p / min-p keep, so a penalty applied twice or not at all shows after them), row
        1's first random tokens again.
    """
    import torch

    g = torch.Generator().manual_seed(SEED)
    shape = (BATCH, n_cb) if n_cb else (BATCH,)
    logits = torch.randn(*shape, vocab, generator=g) * LOGIT_SCALE
    ids = torch.randint(0, max(vocab // 4, 1), (*shape, HISTORY), generator=g)
    # batch row 0 has seen its likeliest tokens: a penalty on them survives top-k / top-p /
    # min-p (applied twice or not at all, it shows); row 1 keeps random tokens only (repeated)
    seen = min(SEEN_TOP, vocab, HISTORY)
    prefix = torch.topk(logits, seen, dim=-1).indices
    prefix[1:] = ids[1:, ..., :seen]
    ids = torch.cat([prefix, ids], dim=-1)
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
    route : list of int, or list of list of int, optional
        Codebook ``k`` uses the parameters of codebook ``route[k]``, or (per row) row
        ``(b, k)`` those of codebook ``route[b][k]`` (a hypothesis).

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
    per_row = route is not None and isinstance(route[0], (list, tuple))
    for k in range(x.shape[1]):
        for rows in ([slice(b, b + 1) for b in range(x.shape[0])] if per_row else [slice(None)]):
            src = route[rows.start][k] if per_row else route[k] if route is not None else k
            out[rows, k] = _process_row(x[rows, k].clone(), ids[rows, k], _for_codebook(params, src),
                                        order, penalty)
    return out[:, 0] if squeeze else out


def _process_row(row, hist, p: dict, order: str, penalty: str):
    """One codebook's logits ``(batch, vocab)`` through the processors for its parameters ``p``."""
    if penalty == "sign" and p.get("repetition_penalty") not in (None, 1.0):
        row = _penalty_sign_fault(hist, row, float(p["repetition_penalty"]))
        procs = _processors(p, order, "none")
    else:
        procs = _processors(p, order, penalty)
    for proc in procs:
        row = proc(hist, row)
    return row


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


def hypothesis_faults(params: dict, logits) -> list[tuple[str, str, dict]]:
    """The known faults worth trying for ``params``: ``(family, name, reference_process kwargs)``.

    Parameters
    ----------
    params : dict
        One parameter set.
    logits : torch.Tensor [shape=(batch, vocab) or (batch, n_codebooks, vocab)]

    Returns
    -------
    list of (str, str, dict)
        ``order`` always; ``repetition_penalty`` (``twice``, ``sign``, ``none``) when the set has a
        penalty; ``codebook_routing`` (``roll+1``, ``roll-1``, ``reversed``) with codebooks and a
        per-codebook list.
    """
    tried = [("order", "filters_first", dict(order="filters_first"))]
    if params.get("repetition_penalty") is not None:
        tried += [("repetition_penalty", kind, dict(penalty=kind)) for kind in ("twice", "sign", "none")]
    n = logits.shape[1] if logits.dim() == 3 else 0
    if n > 1 and any(isinstance(v, (list, tuple)) for v in params.values()):
        tried += [("codebook_routing", "roll+1", dict(route=[(k + 1) % n for k in range(n)])),
                  ("codebook_routing", "roll-1", dict(route=[(k - 1) % n for k in range(n)])),
                  ("codebook_routing", "reversed", dict(route=list(range(n))[::-1]))]
    return tried


def route_name(route: list[list[int]]) -> str:
    """How a per-row routing ``route[b][k]`` (the codebook whose parameters row ``(b, k)``
    got) reads: ``roll+1`` / ``roll-1`` / ``reversed`` / ``permutation [..]`` when every batch
    row is routed alike, ``repeat_interleave`` when the parameters were expanded over the
    flattened ``(batch x codebook)`` rows with ``repeat_interleave(batch)`` where
    ``repeat(batch)`` is meant, else ``rows [[..], ..]``."""
    B, n = len(route), len(route[0])
    if all(r == route[0] for r in route):
        r = route[0]
        named = {"roll+1": [(k + 1) % n for k in range(n)], "roll-1": [(k - 1) % n for k in range(n)],
                 "reversed": list(range(n))[::-1]}
        return next((name for name, v in named.items() if v == r), f"permutation {r}")
    if all(route[b][k] == (b * n + k) // B for b in range(B) for k in range(n)):
        return "repeat_interleave"
    return f"rows {route}"


def identify_route(params: dict, logits, input_ids, row_gap) -> list[list[int]] | None:
    """The codebook whose parameters reproduce each (batch, codebook) row best.

    Parameters
    ----------
    params : dict
        A parameter set with per-codebook lists.
    logits, input_ids : torch.Tensor
        With codebooks (``(batch, n_codebooks, ...)``).
    row_gap : callable
        ``row_gap(reference_logits) -> torch.Tensor [shape=(batch, n_codebooks)]``: each row's
        distance from the candidate under that reference.

    Returns
    -------
    list of list of int, or None
        ``route[b][k]``; ``None`` without codebooks or per-codebook lists, or when the best
        source of every row is its own codebook (no routing to name).
    """
    import torch

    n = logits.shape[1] if logits.dim() == 3 else 0
    if n < 2 or not any(isinstance(v, (list, tuple)) for v in params.values()):
        return None
    gaps = torch.stack([row_gap(reference_process(logits, input_ids, params, route=[j] * n))
                        for j in range(n)])  # (source, batch, codebook)
    own = gaps.gather(0, torch.arange(n).expand(1, gaps.shape[1], n)).squeeze(0)
    best = gaps.min(0)
    src = torch.where(best.values < own, best.indices, torch.arange(n).expand_as(own))
    route = src.tolist()
    if all(r == list(range(n)) for r in route):
        return None
    return route


def row_tv(ref_logits, cand_logits):
    """Total variation distance of each ``softmax`` row, ``[shape=(batch, n_codebooks)]``."""
    import torch

    return 0.5 * (torch.softmax(ref_logits.double(), -1) - torch.softmax(cand_logits.double(), -1)).abs().sum(-1)


def hypotheses(processor, params: dict, logits, input_ids) -> list[tuple[str, str, float]]:
    """The candidate's processed logits against the reference rerun with each known fault.

    Returns
    -------
    list of (str, str, float)
        ``(family, name, tv)``: ``("order", "filters_first", tv)``,
        ``("repetition_penalty", "twice" | "sign" | "none", tv)``,
        ``("codebook_routing", "roll+1" | "roll-1" | "reversed", tv)`` (with codebooks and at
        least one per-codebook list), and the routing identified row by row from the
        candidate's output (:func:`identify_route`: any permutation, ``repeat_interleave`` over
        the (batch x codebook) rows; :func:`route_name`).
    """
    cand = processor(logits.clone(), input_ids.clone(), dict(params))
    out = []
    for fam, name, kw in hypothesis_faults(params, logits):
        ref = reference_process(logits, input_ids, params, **kw)
        out.append((fam, name, distribution_gap(ref, cand)[0]))
    if logits.dim() == 3:
        route = identify_route(params, logits, input_ids, lambda ref: row_tv(ref, cand))
        if route is not None:
            ref = reference_process(logits, input_ids, params, route=route)
            out.append(("codebook_routing", route_name(route), distribution_gap(ref, cand)[0]))
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


# ----------------------------------------------------------------------------
# The sampler's draws as a distribution
# ----------------------------------------------------------------------------

#: Draws per (batch, codebook) row when the sampler takes a batch; per row when it must be
#: called once per draw (it rejects a repeated batch).
DRAWS, LOOP_DRAWS = 3000, 1000
#: Repeats of the test batch per sampler call (bounds the memory of one call).
CHUNK = 3000
#: Likeliest tokens of :func:`sampler_inputs`' row 1 put in its history.
SEEN_TOP = 8
#: Probability that a sampler drawing exactly the reference distribution is reported as a
#: mismatch, over every row of every parameter set (union bound).
FALSE_ALARM = 1e-6


@dataclass
class DrawResult:
    """One parameter set's draws against the reference distribution.

    Attributes
    ----------
    index : int
        Position in ``sampling_params()``.
    params : dict
        The parameter set.
    freq : torch.Tensor [shape=(batch, n_codebooks or 1, vocab), float64]
        Empirical token frequencies per row (each row sums to 1).
    draws : int
        Tokens drawn per row.
    batched : bool
        True when the sampler took the repeated batch; False when it was called once per draw.
    excess : float
        Greatest ``tv - bound`` over the rows (> 0: the draws do not come from the reference).
    tv, bound : float
        Total variation distance and its bound at that row.
    worst_row : tuple of int
        ``(batch, codebook)`` of that row.
    """

    index: int
    params: dict
    freq: Any
    draws: int
    batched: bool
    excess: float
    tv: float
    bound: float
    worst_row: tuple[int, int]


def sampler_inputs(n_cb: int, vocab: int = VOCAB):
    """The logits and histories the sampler draws from: :func:`test_inputs` with batch row 1
    shifted so every logit is negative, its history starting with its 8 most likely tokens.

    ``softmax`` does not see the shift; the repetition penalty does (a negative logit is
    multiplied by it, a positive one divided), so row 1 shows a penalty applied with the wrong
    sign (or twice, or not at all) in the draws: its likeliest tokens are all seen, and move
    down, or up with the wrong sign. Row 0's seen tokens with negative logits hold too little
    probability to show it.

    Returns
    -------
    logits : torch.Tensor [shape=(BATCH, vocab) or (BATCH, n_cb, vocab), float32]
    input_ids : torch.LongTensor [shape=(BATCH, HISTORY) or (BATCH, n_cb, HISTORY)]
    """
    import torch

    logits, ids = test_inputs(n_cb, vocab)
    logits[1] = logits[1] - logits[1].amax(-1, keepdim=True) - 1.0
    top = torch.topk(logits[1], min(SEEN_TOP, vocab, HISTORY), dim=-1).indices
    ids[1, ..., :top.shape[-1]] = top
    return logits, ids


def tv_bound(probs, draws: int, delta: float):
    """Bound on the total variation distance of ``draws`` samples from ``probs``, exceeded with
    probability at most ``delta``.

    ``E[TV] <= 0.5 * sum_i sqrt(p_i (1 - p_i) / n)`` (Jensen on each ``|p_hat_i - p_i|``); one draw
    moves the empirical TV by at most ``1 / n``, so McDiarmid's inequality gives
    ``P(TV >= E[TV] + t) <= exp(-2 n t^2)``: ``t = sqrt(ln(1 / delta) / (2 n))``.

    Parameters
    ----------
    probs : torch.Tensor [shape=(..., vocab), float64]
        Reference distributions (rows sum to 1).
    draws : int
        Samples per row, ``n``.
    delta : float
        Probability allowed per row.

    Returns
    -------
    torch.Tensor [shape=(...), float64]
    """
    import math

    import torch

    mean = 0.5 * torch.sqrt(probs * (1 - probs) / draws).sum(-1)
    return mean + math.sqrt(math.log(1.0 / delta) / (2 * draws))


def reference_probs(logits, input_ids, params: dict, **fault):
    """``softmax`` of :func:`reference_process` in float64, shape ``(batch, n_codebooks or 1, vocab)``."""
    import torch

    out = reference_process(logits, input_ids, params, **fault).double()
    out = out.unsqueeze(1) if out.dim() == 2 else out
    return torch.softmax(out, -1)


def _tokens(out, rows: int, vocab: int):
    """The sampler's output as ``(rows, n_codebooks or 1)`` ids, or None when it holds another
    number of ids.

    Raises
    ------
    ValueError
        Ids that are not integers, or outside ``[0, vocab)``.
    """
    import torch

    ids = torch.as_tensor(out)
    if ids.dtype.is_floating_point or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"the sampler returned {ids.dtype} values; token ids are integers")
    if ids.numel() == 0 or ids.numel() % rows:
        return None
    ids = ids.reshape(rows, -1).long().cpu()
    bad = ids[(ids < 0) | (ids >= vocab)]
    if bad.numel():
        raise ValueError(f"the sampler returned token id {int(bad[0])} outside the vocabulary [0, {vocab})")
    return ids


def _count(counts, ids, batch: int) -> None:
    """Add ``ids`` (reps * batch, n_cb) to ``counts`` (batch, n_cb, vocab)."""
    import torch

    per = ids.reshape(-1, batch, ids.shape[-1]).permute(1, 2, 0)  # (batch, n_cb, reps)
    counts.scatter_add_(-1, per, torch.ones_like(per, dtype=counts.dtype))


def draw_counts(sampler, params: dict, logits, input_ids, draws: int = DRAWS, seed: int = SEED):
    """Token counts of ``sampler(logits, input_ids, params, generator)`` over many draws.

    The batch is repeated (``CHUNK`` copies per call, one ``torch.Generator`` seeded with ``seed``
    for every call), so one call draws many tokens per row. A sampler that raises on the
    repeated batch or returns another number of ids is called once per draw instead
    (:data:`LOOP_DRAWS` draws, same generator). The global RNG is restored afterwards.

    Parameters
    ----------
    sampler : callable
        ``(logits, input_ids, params, generator) -> token ids`` of shape ``(batch,)`` or
        ``(batch, n_codebooks)``.
    logits : torch.Tensor [shape=(batch, vocab) or (batch, n_codebooks, vocab)]
    input_ids : torch.LongTensor [shape=(batch, T) or (batch, n_codebooks, T)]

    Returns
    -------
    counts : torch.Tensor [shape=(batch, n_codebooks or 1, vocab), float64]
    batched : bool

    Raises
    ------
    ValueError
        The sampler returns ids outside the vocabulary, or a number of ids that is not one per
        (batch, codebook) row.
    """
    import torch

    from porting_kit.errors import InputError

    batch, vocab = logits.shape[0], logits.shape[-1]
    n_rows = logits.shape[1] if logits.dim() == 3 else 1
    counts = torch.zeros(batch, n_rows, vocab, dtype=torch.float64)
    g = torch.Generator(device=logits.device).manual_seed(seed)
    reps = min(CHUNK, draws)
    rep_shape = (reps,) + (1,) * (logits.dim() - 1)
    with torch.random.fork_rng(devices=[]):
        try:
            first = sampler(logits.repeat(*rep_shape), input_ids.repeat(*rep_shape), dict(params), g)
            ids = _tokens(first, reps * batch, vocab)
        except InputError:
            ids = None
        if ids is not None and ids.shape[-1] == n_rows:
            _count(counts, ids, batch)
            done = reps
            while done < draws:
                n = min(reps, draws - done)
                shape = (n,) + (1,) * (logits.dim() - 1)
                out = sampler(logits.repeat(*shape), input_ids.repeat(*shape), dict(params), g)
                ids = _tokens(out, n * batch, vocab)
                if ids is None or ids.shape[-1] != n_rows:
                    raise ValueError(f"the sampler returned {torch.as_tensor(out).numel()} ids for a batch "
                                     f"of {n * batch} rows; expected {n * batch * n_rows}")
                _count(counts, ids, batch)
                done += n
            return counts, True
        g.manual_seed(seed)
        for _ in range(LOOP_DRAWS):
            out = sampler(logits.clone(), input_ids.clone(), dict(params), g)
            ids = _tokens(out, batch, vocab)
            if ids is None or ids.shape[-1] != n_rows:
                raise ValueError(f"the sampler returned {torch.as_tensor(out).numel()} ids; expected one "
                                 f"per (batch, codebook) row: {batch * n_rows}")
            _count(counts, ids, batch)
    return counts, False


def draw_gap(freq, draws: int, probs, delta: float) -> tuple[float, float, float, tuple[int, int]]:
    """The row where the empirical frequencies exceed their bound the most.

    Parameters
    ----------
    freq, probs : torch.Tensor [shape=(batch, n_codebooks or 1, vocab), float64]
        Empirical frequencies and a reference distribution.
    draws : int
    delta : float
        Per-row false-alarm probability (:func:`tv_bound`).

    Returns
    -------
    excess, tv, bound : float
        ``tv - bound`` at that row (> 0: not drawn from ``probs``), the distance, the bound.
    row : (int, int)
        ``(batch, codebook)``.
    """
    tv = 0.5 * (freq - probs).abs().sum(-1)
    bound = tv_bound(probs, draws, delta)
    excess = tv - bound
    flat = int(excess.argmax())
    b, k = flat // excess.shape[1], flat % excess.shape[1]
    return float(excess[b, k]), float(tv[b, k]), float(bound[b, k]), (b, k)


def compare_sampler(sampler, params_list: list[dict], logits, input_ids, draws: int = DRAWS,
                    seed: int = SEED) -> list[DrawResult]:
    """Each parameter set's draws against ``softmax`` of transformers' processed logits.

    Parameters
    ----------
    sampler : callable
        ``(logits, input_ids, params, generator) -> token ids``.
    params_list : list of dict
    logits, input_ids : torch.Tensor
        From :func:`sampler_inputs`.
    draws : int
        Draws per row when the sampler takes a batch.
    seed : int
        Parameter set ``i`` draws from a generator seeded ``seed + i``.

    Returns
    -------
    list of DrawResult
        One per parameter set; the per-row false-alarm probability is :data:`FALSE_ALARM`
        over every row of every set.
    """
    delta = row_delta(params_list, logits)
    out = []
    for i, params in enumerate(params_list):
        counts, batched = draw_counts(sampler, params, logits, input_ids, draws, seed + i)
        n = int(counts[0, 0].sum())
        freq = counts / n
        excess, tv, bound, row = draw_gap(freq, n, reference_probs(logits, input_ids, params), delta)
        out.append(DrawResult(i, params, freq, n, batched, excess, tv, bound, row))
    return out


def row_delta(params_list: list[dict], logits) -> float:
    """Per-row false-alarm probability: :data:`FALSE_ALARM` over every (set, batch, codebook) row."""
    rows = logits.shape[0] * (logits.shape[1] if logits.dim() == 3 else 1)
    return FALSE_ALARM / (rows * len(params_list))


def draw_hypotheses(res: DrawResult, logits, input_ids, delta: float) -> list[tuple[str, str, float]]:
    """The draws of one parameter set against the reference rerun with each known fault.

    Returns
    -------
    list of (str, str, float)
        ``(family, name, excess)``: greatest ``tv - bound`` over the rows (<= 0: the draws are
        consistent with that fault), for each fault of :func:`hypothesis_faults`, and the
        routing identified row by row (:func:`identify_route`, :func:`route_name`).
    """
    import torch

    out = []
    for fam, name, kw in hypothesis_faults(res.params, logits):
        probs = reference_probs(logits, input_ids, res.params, **kw)
        out.append((fam, name, draw_gap(res.freq, res.draws, probs, delta)[0]))
    named_fits = any(fam == "codebook_routing" and gap <= 0 for fam, _, gap in out)
    if logits.dim() == 3 and not named_fits:  # a named routing the draws are consistent with wins:
        # the row-by-row fit is as good or better on noise alone, and its name would be noise too
        def excess(ref_logits):
            probs = torch.softmax(ref_logits.double(), -1)
            return 0.5 * (res.freq - probs).abs().sum(-1) - tv_bound(probs, res.draws, delta)

        route = identify_route(res.params, logits, input_ids, excess)
        if route is not None:
            probs = reference_probs(logits, input_ids, res.params, route=route)
            out.append(("codebook_routing", route_name(route), draw_gap(res.freq, res.draws, probs, delta)[0]))
    return out
