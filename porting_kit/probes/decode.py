"""Teacher-forced decode parity: prefill, then single-token steps with each side's own KV cache.

The facts behind the ``decode`` family (:mod:`porting_kit.checks.decode` builds its
findings from what this module returns).

How a run goes
--------------
Both sides prefill the prompt (``inputs()["input_ids"]``, shape ``(batch, T)``),
then run ``N`` single-token steps (spec ``decode_steps``, default 16). Every step
feeds both sides the same token: the reference's greedy choice (teacher forcing),
so a candidate fault never changes what the reference sees. Step 0 is the prefill,
step ``s >= 1`` is the ``s``-th one-token step, at position ``start_pos = T + s - 1``.
The last-position logits of each step are compared with the dtype's tolerance
(:mod:`porting_kit.probes.tolerance`).

A side is driven either

* by the tool through ``past_key_values`` (a transformers model whose ``forward``
  takes ``past_key_values``, or ``cache`` as transformers 5.24 names it; a
  ``DynamicCache`` is created at prefill), or
* through the spec's ``candidate_step(model, tokens, start_pos) -> logits`` /
  ``reference_step(model, tokens, start_pos) -> logits`` (the model keeps its own
  cache; ``start_pos`` is the position of ``tokens[:, 0]``).

Localisation (:func:`locate_step`): both sides are replayed to the step before the
first diverging step ``s``; step ``s`` then runs with hooks on every module (one
token per module: full tensors are small) and the aligned pairs are compared in
full. The first differing module whose input still matched is the location; when
its input already differed, the nearest aligned differing ancestor is (the fault
is in that module's own code, as in :mod:`porting_kit.probes.layers`).

Hypotheses (:func:`position_hypotheses`, :func:`cache_hypotheses`), tried on the
reference when the tool drives its cache: step ``s`` rerun with RoPE positions
``q != start_pos`` (``position_ids``; the cache slot is unchanged), with the
cache one token short (``DynamicCache.crop``: the previous token's K/V missing or
overwritten), and with the cache a static cache's wrong write slot leaves
(:data:`WRITE_SCHEMES`: a slot that never advances, or lags the position, each read
with its never-written slots as zeros or skipped; :func:`cache_slots`). Each gives the relative error of the candidate's step-``s`` logits
against that rerun.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any

from porting_kit.errors import InputError
from porting_kit.probes.compare import first_tensor, tensor_metrics
from porting_kit.probes.tolerance import Tolerance

DEFAULT_STEPS = 16


@dataclass
class StepMetric:
    """Logit comparison of one step.

    Attributes
    ----------
    step : int
        0 for the prefill, ``s >= 1`` for the ``s``-th one-token step.
    start_pos : int
        Position of the step's first token (0 for the prefill).
    token : int
        The token fed at this step (batch row 0; ``-1`` for the prefill).
    max_abs : float
        Greatest ``|cand - ref|`` of the last-position logits.
    rel_err : float
        ``||cand - ref|| / ||ref||`` of the last-position logits (unitless).
    within_tolerance : bool
    """

    step: int
    start_pos: int
    token: int
    max_abs: float
    rel_err: float
    within_tolerance: bool


@dataclass
class DecodeTrace:
    """What one teacher-forced decode run measured.

    Attributes
    ----------
    prompt_len : int
        Prompt length ``T`` (tokens).
    tokens : list of list of int
        The greedy tokens fed at steps 1..N, per step ``(batch,)``.
    steps : list of StepMetric
        Step 0 (prefill) then steps 1..N.
    reference_mode, candidate_mode : str
        ``"past_key_values"`` (the tool drives a transformers cache) or ``"spec_step"``.
    tolerance : Tolerance
    layers : list of str
        Reference names of the aligned repeated blocks (decoder layers), in call order.
    layer_rel_err : list of list of float
        ``[step][layer]``: estimated ``||a-b||/||b||`` of each layer's output at each step
        (64-number sketches, :mod:`porting_kit.probes.capture`): the (step x layer) picture.
    """

    prompt_len: int
    tokens: list[list[int]]
    steps: list[StepMetric]
    reference_mode: str
    candidate_mode: str
    tolerance: Tolerance
    layers: list[str] = field(default_factory=list)
    layer_rel_err: list[list[float]] = field(default_factory=list)

    @property
    def first_bad(self) -> StepMetric | None:
        """The first step whose logits differ beyond tolerance, or ``None``."""
        return next((m for m in self.steps if not m.within_tolerance), None)


@dataclass
class StepLocation:
    """Where step ``s`` first differs (:func:`locate_step`).

    Attributes
    ----------
    reference_module, candidate_module : str
        Qualified module names (``"<root>"`` for the model itself).
    reference_type, candidate_type : str
        Class names.
    rel_err : float
        ``||cand - ref|| / ||ref||`` of that pair's outputs at step ``s``.
    max_abs : float
    input_already_differs : bool
        The first differing output's input already differed (then the location is its
        ancestor).
    first_output_reference, first_output_candidate : str
        The first aligned pair whose output differed.
    per_module : list of dict
        ``{"reference", "candidate", "rel_err"}`` for every compared pair, in reference
        completion order (for plots).
    """

    reference_module: str
    candidate_module: str
    reference_type: str
    candidate_type: str
    rel_err: float
    max_abs: float
    input_already_differs: bool
    first_output_reference: str
    first_output_candidate: str
    per_module: list[dict] = field(default_factory=list)


def step_mode(spec, side: str, model) -> str | None:
    """How ``side`` can be stepped: ``"spec_step"``, ``"past_key_values"`` or ``None``.

    Parameters
    ----------
    spec : porting_kit.spec.Spec
    side : {"reference", "candidate"}
    model : torch.nn.Module

    Returns
    -------
    str or None
        ``"spec_step"`` when the spec defines ``<side>_step``; ``"past_key_values"`` when
        ``model.forward`` takes ``past_key_values``; else ``None`` (cannot be stepped).
    """
    if spec.has(f"{side}_step"):
        return "spec_step"
    return "past_key_values" if cache_kwarg(model) is not None else None


def cache_kwarg(model) -> str | None:
    """The keyword ``model.forward`` takes its KV cache by: ``"past_key_values"`` (transformers
    up to 5.2x) or ``"cache"`` (transformers 5.24); ``None`` when it takes neither."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((k for k in ("cache", "past_key_values") if k in params), None)


def _last_logits(out) -> Any:
    """Last-position logits ``(batch, vocab)`` float32 of a step's output."""
    t = first_tensor(out)
    if t is None:
        raise InputError("a decode step returned no tensor")
    if t.dim() == 3:
        t = t[:, -1, :]
    return t.float()


@dataclass
class _Driver:
    """One side during decode: its model, how it is stepped and its cache (past_key_values mode)."""

    spec: Any
    side: str
    model: Any
    mode: str
    cache: Any = None

    def step(self, tokens, start_pos: int, *, position: int | None = None) -> Any:
        """Run ``tokens`` ``(batch, n)`` at ``start_pos``; return last logits ``(batch, vocab)``.

        ``position`` (past_key_values mode only) overrides the RoPE position of
        ``tokens[:, 0]`` while the cache slot stays where the cache puts it.
        """
        import torch

        with torch.no_grad():
            if self.mode == "spec_step":
                return _last_logits(self.spec.call(f"{self.side}_step", self.model, tokens, start_pos))
            from transformers import DynamicCache

            if start_pos == 0:
                self.cache = DynamicCache()
            pos0 = start_pos if position is None else position
            pos_ids = torch.arange(pos0, pos0 + tokens.shape[1], device=tokens.device).unsqueeze(0)
            try:
                out = self.model(input_ids=tokens, use_cache=True,
                                 position_ids=pos_ids.expand(tokens.shape[0], -1),
                                 **{cache_kwarg(self.model): self.cache})
            except Exception as exc:
                raise InputError(f"{self.spec.name}: {self.side} decode step at position {start_pos} "
                                 f"raised {type(exc).__name__}: {exc}") from exc
            self.cache = self.cache  # DynamicCache is updated in place
            return _last_logits(out)


def _drivers(spec, pair) -> tuple[_Driver, _Driver]:
    modes = {side: step_mode(spec, side, getattr(pair, side)) for side in ("reference", "candidate")}
    for side, mode in modes.items():
        if mode is None:
            raise InputError(f"{spec.name}: the {side} cannot be stepped (no {side}_step and its "
                             "forward takes no past_key_values)")
    return (_Driver(spec, "reference", pair.reference, modes["reference"]),
            _Driver(spec, "candidate", pair.candidate, modes["candidate"]))


def prompt_of(pair) -> Any:
    """The prompt ``(batch, T)`` LongTensor: ``inputs()["input_ids"]``, or ``None``."""
    ids = pair.inputs.get("input_ids") if isinstance(pair.inputs, dict) else None
    if ids is None or getattr(ids, "dim", lambda: 0)() != 2:
        return None
    return ids


def run_decode(spec, pair, steps: int, tol: Tolerance, progress=lambda text: None) -> DecodeTrace:
    """Prefill, then ``steps`` teacher-forced single-token steps on both sides.

    Parameters
    ----------
    spec : porting_kit.spec.Spec
    pair : porting_kit.load.LoadedPair
        Weights loaded; ``pair.inputs["input_ids"]`` ``(batch, T)`` is the prompt.
    steps : int
        Number of one-token steps ``N`` after the prefill.
    tol : Tolerance
        Logit tolerance (the dtype's).
    progress : callable
        ``progress(text)`` every few steps.

    Returns
    -------
    DecodeTrace
        ``N + 1`` step metrics (prefill first).

    Raises
    ------
    InputError
        No ``input_ids`` prompt, a side that cannot be stepped, or a step that raises.
    """
    prompt = prompt_of(pair)
    if prompt is None:
        raise InputError(f"{spec.name}: decode parity needs inputs()['input_ids'] of shape (batch, T)")
    ref, cand = _drivers(spec, pair)
    layers = _Layers(pair)
    out = []
    lr, lc = layers.step(ref, cand, prompt, 0)
    out.append(_metric(0, 0, -1, lr, lc, tol))
    toks = []
    pos = prompt.shape[1]
    for s in range(1, steps + 1):
        if s % 4 == 0:
            progress(f"decode: step {s}/{steps}")
        tok = lr.argmax(-1, keepdim=True)  # (batch, 1): the reference's greedy choice, on the device
        toks.append(tok)
        lr, lc = layers.step(ref, cand, tok, pos)
        out.append(_metric(s, pos, -1, lr, lc, tol))
        pos += 1
    import torch

    fed: list[list[int]] = torch.cat(toks, dim=1).T.tolist() if toks else []  # one host copy
    for m, ids in zip(out[1:], fed):
        m.token = ids[0]
    return DecodeTrace(prompt_len=int(prompt.shape[1]), tokens=fed, steps=out,
                       reference_mode=ref.mode, candidate_mode=cand.mode, tolerance=tol,
                       layers=layers.names, layer_rel_err=layers.rel_err)


class _Layers:
    """Sketches of each repeated block's output at every step, for the (step x layer) picture.

    One hook per block (:func:`porting_kit.probes.capture.coarse_names`); the blocks are
    paired through the weight map once, on the prefill's records.
    """

    def __init__(self, pair) -> None:
        from porting_kit.probes.capture import coarse_names

        self.pair = pair
        self.only_r, self.only_c = coarse_names(pair.reference), coarse_names(pair.candidate)
        self.keys: list[tuple[str, str]] | None = None
        self.names: list[str] = []
        self.rel_err: list[list[float]] = []

    def step(self, ref, cand, tokens, start_pos: int):
        """Both sides' step with block sketches; returns both last logits."""
        import re

        from porting_kit.probes.align import align
        from porting_kit.probes.capture import capture_summaries, estimate_rel_err

        if self.only_r is None or self.only_c is None:
            return ref.step(tokens, start_pos), cand.step(tokens, start_pos)
        rrec, crec = [], []
        with capture_summaries(self.pair.reference, rrec, only=self.only_r):
            lr = ref.step(tokens, start_pos)
        with capture_summaries(self.pair.candidate, crec, only=self.only_c,
                               output_permutation=self.pair.weights.output_permutation):
            lc = cand.step(tokens, start_pos)
        if self.keys is None:
            al = align(rrec, crec, weight_map=self.pair.weights.weight_map)
            self.keys = [(p.reference.key, p.candidate.key) for p in al.pairs
                         if p.comparable and re.search(r"\.\d+$", p.reference.key)]
            self.names = [k for k, _ in self.keys]
            # later steps hook the paired blocks only
            self.only_r = {k.split("#")[0] for k, _ in self.keys}
            self.only_c = {k.split("#")[0] for _, k in self.keys}
        rby, cby = {r.key: r for r in rrec}, {c.key: c for c in crec}
        row = []
        for rk, ck in self.keys:
            r, c = rby.get(rk), cby.get(ck)
            ok = r is not None and c is not None and r.out is not None and c.out is not None \
                and r.out.shape == c.out.shape
            row.append(float(estimate_rel_err(r.out, c.out)) if ok else float("nan"))
        self.rel_err.append(row)
        return lr, lc


def _metric(step: int, start_pos: int, token: int, lr, lc, tol: Tolerance) -> StepMetric:
    if tuple(lr.shape) != tuple(lc.shape):
        raise InputError(f"decode step {step}: logits shapes differ: reference {tuple(lr.shape)}, "
                         f"candidate {tuple(lc.shape)}")
    m = tensor_metrics(lr, lc, tol)
    return StepMetric(step, start_pos, token, float(m.max_abs), float(m.rel_err), bool(m.within_tolerance))


def _replay(spec, pair, trace: DecodeTrace, upto: int) -> tuple[_Driver, _Driver]:
    """Fresh prefill and steps ``1..upto`` on both sides (the state before step ``upto + 1``)."""
    import torch

    ref, cand = _drivers(spec, pair)
    prompt = prompt_of(pair)
    ref.step(prompt, 0)
    cand.step(prompt, 0)
    for s in range(1, upto + 1):
        tok = torch.tensor(trace.tokens[s - 1], device=prompt.device).unsqueeze(1)
        pos = trace.prompt_len + s - 1
        ref.step(tok, pos)
        cand.step(tok, pos)
    return ref, cand


def _token(pair, trace: DecodeTrace, step: int):
    import torch

    return torch.tensor(trace.tokens[step - 1], device=prompt_of(pair).device).unsqueeze(1)


def position_hypotheses(spec, pair, trace: DecodeTrace, step: int) -> list[tuple[int, float]]:
    """Rerun the reference's step ``step`` at other RoPE positions; compare with the candidate's.

    Parameters
    ----------
    spec, pair
        As :func:`run_decode`.
    trace : DecodeTrace
    step : int
        A one-token step (``>= 1``).

    Returns
    -------
    list of (int, float)
        ``(position, rel_err)``: the candidate's step logits against the reference's step run
        with RoPE position ``position`` (cache slot unchanged), for positions 0, 1, the step
        index, ``start_pos +- 1``, ``T - 1``; ``[]`` when the reference is not driven through
        ``past_key_values`` (its positions cannot be moved apart from its cache).
    """
    ref, cand = _replay(spec, pair, trace, step - 1)
    if ref.mode != "past_key_values":
        return []
    tok = _token(pair, trace, step)
    start = trace.prompt_len + step - 1
    lc = cand.step(tok, start)
    base = ref.cache
    out = []
    for q in sorted({0, 1, step - 1, step, start - 1, start + 1, trace.prompt_len - 1} - {start}):
        if q < 0:
            continue
        ref.cache = copy.deepcopy(base)
        lr = ref.step(tok, start, position=q)
        out.append((q, float(tensor_metrics(lr, lc, trace.tolerance).rel_err)))
    return out


#: KV write schemes a static cache gets wrong: the slot each one-token step writes its K/V to,
#: from its position ``start`` and the prompt length ``T``.
WRITE_SCHEMES = {
    "slot_fixed_first_decode": lambda start, T: T,  # the write slot never advances
    "slot_fixed_last_prompt": lambda start, T: T - 1,
    "slot_lags_one": lambda start, T: start - 1,  # each step overwrites the previous token
    "slot_lags_two": lambda start, T: start - 2,
}


def cache_slots(scheme: str, step: int, prompt_len: int, zero_filled: bool) -> list[int | None]:
    """The positions whose K/V a static cache under ``scheme`` holds in the slots step ``step``
    reads, less the slot the step itself writes (its token's K/V goes there).

    The prefill writes slots ``0..T-1`` right; step ``j`` (position ``T + j - 1``) writes slot
    ``WRITE_SCHEMES[scheme](position, T)``. Step ``step`` reads slots ``0..start_pos``;
    ``zero_filled``: slots never written are read as zeros (``None`` in the list), else the
    port reads only the slots it wrote.

    Returns
    -------
    list of (int or None)
        For each slot read (but the step's own), the position whose K/V it holds, ``None`` for
        a zero slot.
    """
    where = WRITE_SCHEMES[scheme]
    held: dict[int, int] = {p: p for p in range(prompt_len)}
    for j in range(1, step):
        pos = prompt_len + j - 1
        held[where(pos, prompt_len)] = pos
    start = prompt_len + step - 1
    own = where(start, prompt_len)
    slots = [held.get(i) for i in range(start + 1) if i != own]
    return slots if zero_filled else [p for p in slots if p is not None]


def _set_cache(cache, positions: list[int | None]) -> None:
    """Rebuild each layer of a ``DynamicCache`` holding positions ``0..n-1`` to hold ``positions``
    (``None``: a zero K/V slot), in that order."""
    import torch

    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        z = torch.zeros_like(keys[..., :1, :]), torch.zeros_like(values[..., :1, :])
        layer.keys = torch.cat([keys[..., p:p + 1, :] if p is not None else z[0] for p in positions], dim=-2)
        layer.values = torch.cat([values[..., p:p + 1, :] if p is not None else z[1] for p in positions],
                                 dim=-2)


def cache_hypotheses(spec, pair, trace: DecodeTrace, step: int) -> list[tuple[str, float]]:
    """Rerun the reference's step ``step`` with the cache a wrong KV write would leave; compare
    with the candidate's.

    Parameters
    ----------
    spec, pair, trace, step
        As :func:`position_hypotheses`.

    Returns
    -------
    list of (str, float)
        ``("one_short", rel_err)``: the reference's cache cropped by its last token (the
        previous token's K/V missing, or overwritten by the current one); then, for every
        write scheme of :data:`WRITE_SCHEMES` and both reads (zero-filled slots read, or
        only the written ones), ``("<scheme>[:zero_slots]", rel_err)``: the reference's
        cache rebuilt as :func:`cache_slots` says (attention does not depend on the slots'
        order: each K carries its RoPE position), RoPE position unchanged; a scheme that
        leaves the cache right at this step is skipped. ``[]`` when the reference is not
        driven through ``past_key_values``.
    """
    ref, cand = _replay(spec, pair, trace, step - 1)
    if ref.mode != "past_key_values":
        return []
    tok = _token(pair, trace, step)
    start = trace.prompt_len + step - 1
    lc = cand.step(tok, start)
    base = copy.deepcopy(ref.cache)
    ref.cache.crop(-1)  # drop the last cached token (a negative length removes tokens)
    lr = ref.step(tok, start, position=start)
    out = [("one_short", float(tensor_metrics(lr, lc, trace.tolerance).rel_err))]
    right = list(range(start))
    for scheme in WRITE_SCHEMES:
        for zero_filled in (True, False):
            slots = cache_slots(scheme, step, trace.prompt_len, zero_filled)
            if slots == right or any(p is not None and p >= start for p in slots):
                continue
            ref.cache = copy.deepcopy(base)
            _set_cache(ref.cache, slots)
            lr = ref.step(tok, start, position=start)
            out.append((f"{scheme}{':zero_slots' if zero_filled else ''}",
                        float(tensor_metrics(lr, lc, trace.tolerance).rel_err)))
    return out


def locate_step(spec, pair, trace: DecodeTrace, step: int, module_map=None) -> StepLocation | None:
    """Compare every aligned module at step ``step`` in full; return the location.

    Parameters
    ----------
    spec, pair, trace
        As :func:`run_decode`.
    step : int
        The first diverging step (0: the prefill itself).
    module_map : optional
        The spec's ``module_map`` (:func:`porting_kit.probes.align.align`). The spec's
        ``module_tolerances`` / ``allow_divergence`` apply per pair
        (:func:`porting_kit.probes.layers.module_rules`).

    Returns
    -------
    StepLocation or None
        ``None`` when no aligned module differs (the fault is in unaligned code).
    """
    import torch

    from porting_kit.probes.align import align
    from porting_kit.probes.capture import capture_full, capture_summaries
    from porting_kit.probes.layers import module_rules

    rules = module_rules(spec)

    if step == 0:
        ref, cand = _drivers(spec, pair)
        tok, start = prompt_of(pair), 0
    else:
        ref, cand = _replay(spec, pair, trace, step - 1)
        tok, start = _token(pair, trace, step), trace.prompt_len + step - 1
    perms = pair.weights.output_permutation
    rrec, crec = [], []
    names_r = {n for n, _ in pair.reference.named_modules()}
    names_c = {n for n, _ in pair.candidate.named_modules()}
    with capture_summaries(pair.reference, rrec), capture_full(pair.reference, names_r) as got_r:
        ref.step(tok, start)
    with capture_summaries(pair.candidate, crec, output_permutation=perms), \
            capture_full(pair.candidate, names_c) as got_c:
        cand.step(tok, start)
    al = align(rrec, crec, module_map=module_map, weight_map=pair.weights.weight_map)

    def metric(p, which: int):
        r = got_r.get(p.reference.key, (None, None))[which]
        c = got_c.get(p.candidate.key, (None, None))[which]
        if r is None or c is None or tuple(r.shape) != tuple(c.shape) or not r.is_floating_point():
            return None
        perm = perms.get(p.candidate.name) if which == 1 else None
        if perm is not None and perm.numel() == c.shape[-1]:
            c = c[..., torch.argsort(perm.to(c.device))]
        return tensor_metrics(r, c, rules.tolerance(p, trace.tolerance))

    rows, flagged = [], []
    for p in al.pairs:
        m = metric(p, 1)
        if m is None:
            continue
        rows.append({"reference": p.reference.key or "<root>", "candidate": p.candidate.key or "<root>",
                     "rel_err": float(m.rel_err)})
        if not m.within_tolerance and not rules.is_allowed(p):
            flagged.append((p, m))
    if not flagged:
        return None
    first, m_first = flagged[0]
    m_in = metric(first, 0)
    input_differs = bool(m_in is not None and not m_in.within_tolerance)
    loc, m_loc = first, m_first
    if input_differs:
        anc = [(p, m) for p, m in flagged[1:] if _encloses(p, first)]
        if anc:
            loc, m_loc = max(anc, key=lambda pm: pm[0].reference.depth)
    return StepLocation(
        reference_module=loc.reference.key or "<root>", candidate_module=loc.candidate.key or "<root>",
        reference_type=loc.reference.type, candidate_type=loc.candidate.type,
        rel_err=float(m_loc.rel_err), max_abs=float(m_loc.max_abs), input_already_differs=input_differs,
        first_output_reference=first.reference.key or "<root>",
        first_output_candidate=first.candidate.key or "<root>", per_module=rows)


def _encloses(outer, inner) -> bool:
    def anc(a: str, b: str) -> bool:
        return (a == "" and b != "") or b.startswith(a + ".")
    return anc(outer.reference.name, inner.reference.name) and anc(outer.candidate.name, inner.candidate.name)
