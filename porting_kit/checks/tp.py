"""Tensor-parallel family: the sharded port, run on N ranks and gathered, must equal the reference.

Runs with ``porting-kit check --tp N`` (N >= 2) when the spec defines
``candidate_tp(rank, world_size)``; the facts come from
:func:`porting_kit.probes.tp.measure` (N ranks over ``torch.distributed``: gloo on
CPU, NCCL with ``--device cuda`` and N GPUs; per-module outputs gathered along each
layer's parallel axis, aligned and screened as at TP 1). The first aligned module
whose gathered output differs is the location; the hypotheses below are tried on it
(then on the model output) and the one that reproduces the candidate is named.

Codes
-----
``tp.shard_order``
    The gathered output equals the reference after permuting its N shards along the
    parallel axis (evidence ``permutation``: candidate shard i holds reference shard
    ``permutation[i]``): a loader took another rank's slice, or a gather put the shards
    in the wrong order. For a vocabulary-parallel embedding (``shards_of: weight``): the
    output equals the reference looked up with the weight's vocabulary shards permuted
    (a rank masks its own id range but holds another rank's rows: a wrong offset).
    For a fused projection (``qkv_proj`` holding ``q_proj|k_proj|v_proj``; unaligned, so the
    first differing module is the attention's ``o_proj``): its ranks hold other reference rows
    than their own heads of each part (a ``chunk(N)[rank]`` of the whole fused ``[Q|K|V]``
    weight puts all of Q on rank 0); evidence ``rank_sources`` (the rows each rank holds, e.g.
    ``rank 0: q_proj[0:64]; rank 1: k_proj[0:16], v_proj[0:16]``), ``expected_sources``,
    ``shards_of: fused_weight``; the finding is placed at the fused module.
``tp.reduce``
    A row-parallel (all-reduced) output is off by ``N - 1`` extra copies of the layer's
    bias (the bias added on every rank before the all-reduce), by a factor of N (or
    1/N), or the ranks disagree and their sum is the reference (the all-reduce is
    missing). Evidence ``hypothesis``: ``extra_biases``, ``factor_n``,
    ``factor_1_over_n``, ``missing_reduce``.
``tp.gather_axis``
    An output has one axis N times too long and another N times too short, and splitting
    it along the first and concatenating along the second gives the reference: the
    shards were gathered along the wrong axis (evidence ``gathered_axis``, ``expected_axis``).
``tp.unexplained``
    The gathered output differs and no TP hypothesis fits (numbers shown); the same
    fault may show at TP 1 (see the parity family).
``tp.unset_weights``
    The sharded model's ``load_weights`` left parameters unset on some rank.
``tp.ok``
    Every compared module and the output match within the dtype's tolerance.

``skip``: ``--tp`` is 1 (the default), or the spec defines no ``candidate_tp``.
"""

from __future__ import annotations

from porting_kit.report.findings import Finding, Where, ok, skip

P = "tp"

_HINTS = {
    "tp.shard_order": "Use this rank's slice in the layer's weight_loader (narrow(dim, tp_rank * shard, "
                      "shard)), and concatenate gathered shards in rank order.",
    "tp.reduce": "Add a row-parallel layer's bias once, after the all-reduce (vLLM's RowParallelLinear: "
                 "bias only when tp_rank == 0 or after reduce); all-reduce partial sums exactly once.",
    "tp.gather_axis": "Gather column-/vocabulary-parallel outputs along their sharded axis (the last: "
                      "tensor_model_parallel_all_gather(x, dim=-1)).",
    "tp.unexplained": "Compare this module's sharded code with its TP 1 version; run the parity family "
                      "(--tp 1) to see whether the fault is TP-specific.",
}


def run(ctx) -> list[Finding]:
    """The family's findings (see the module docstring for the codes).

    Parameters
    ----------
    ctx : CheckContext
        ``ctx.tp`` is the tensor-parallel size; the TP result is cached in ``ctx.state["tp"]``.

    Returns
    -------
    list of Finding
        One fault finding (the first located), plus ``tp.unset_weights`` when it applies;
        or ``tp.ok``; or one ``tp.skipped``.

    Raises
    ------
    InputError
        As :func:`porting_kit.probes.tp.measure` (a rank failed or timed out: exit 2).
    """
    n = int(getattr(ctx, "tp", 1) or 1)
    if not callable(ctx.spec.get("candidate_tp")):
        return [skip(P, f"{ctx.spec.name} defines no candidate_tp(rank, world_size); "
                        "tensor-parallel parity skipped")]
    if n < 2:
        return [skip(P, "tensor-parallel parity runs with --tp N (N >= 2); this run has --tp 1")]
    if not ctx.spec.has("reference") or not ctx.spec.has("inputs"):
        return [skip(P, f"{ctx.spec.name} defines no reference()/inputs(); tensor-parallel parity skipped")]
    from porting_kit.probes.tp import measure

    res = measure(ctx, n)
    ctx.extras["tp_timing"] = dict(res.timing)  # seconds; kept out of the (deterministic) evidence
    common = {"world_size": n, "backend": res.backend, "compared_modules": len(res.stats),
              "aligned_modules": len(res.alignment.pairs), "tolerance": res.tolerance.describe()}
    findings = _unset(res, common)
    fault = _fused(res, common) or _located(res, common) or _shape(res, common) or _output(res, common)
    if fault is not None:
        return findings + [fault]
    if findings:
        return findings
    m = res.output_metric
    return [ok(P, f"At --tp {n} ({res.backend}) all {len(res.stats)} compared modules and the gathered "
                  f"output match the reference (output max |diff| {m.max_abs:.3g}).",
               {**common, "output_max_abs": m.max_abs, "output_rel_err": m.rel_err})]


def _unset(res, common: dict) -> list[Finding]:
    if not res.unset:
        return []
    rank, names = next(iter(sorted(res.unset.items())))
    return [Finding(P, "tp.unset_weights", "fail",
                    f"Rank {rank}'s load_weights never set {len(names)} parameter(s) "
                    f"({', '.join(names[:6])}).",
                    {**common, "rank": rank, "unset": len(names), "unset_names": ", ".join(names[:20])},
                    Where(candidate=names[0].rsplit(".", 1)[0]),
                    "Every parallel layer's weight_loader must write its slice of each full tensor.")]


def _name(key: str) -> str:
    return key or "<root>"


def _diagnosis(h, ref_mod: str, cand_mod: str, common: dict, metric_ev: dict) -> Finding:
    """The finding for hypotheses ``h`` at (``ref_mod``, ``cand_mod``)."""
    n = h.world_size
    where = Where(reference=ref_mod, candidate=cand_mod)
    ev = {**common, **metric_ev, "reference_module": ref_mod, "candidate_module": cand_mod}
    if h.regather is not None:
        wrong, right = h.regather
        return Finding(P, "tp.gather_axis", "fail",
                       f"{cand_mod}'s output holds its {n} shards concatenated along axis {wrong}; "
                       f"concatenated along axis {right} they equal {ref_mod}'s output.",
                       {**ev, "gathered_axis": wrong, "expected_axis": right}, where, _HINTS["tp.gather_axis"])
    if h.permutation is not None and h.shards_of == "weight":
        perm = ",".join(map(str, h.permutation))
        return Finding(P, "tp.shard_order", "fail",
                       f"{cand_mod}'s output equals {ref_mod}'s looked up with the weight's {n} vocabulary "
                       f"shards permuted: rank i serves its own id range from reference shard [{perm}][i] "
                       "(a wrong vocab_start_index or loader offset).",
                       {**ev, "permutation": perm, "axis": 0, "shards_of": "weight"}, where,
                       _HINTS["tp.shard_order"])
    if h.permutation is not None:
        perm = ",".join(map(str, h.permutation))
        return Finding(P, "tp.shard_order", "fail",
                       f"{cand_mod}'s gathered output equals {ref_mod}'s with its {n} shards along axis "
                       f"{h.axis} permuted: candidate shard i holds reference shard [{perm}][i].",
                       {**ev, "permutation": perm, "axis": h.axis}, where, _HINTS["tp.shard_order"])
    if h.reduce is not None:
        words = {"extra_biases": f"the layer's bias added {n - 1} extra time(s) (once per rank before "
                                 "the all-reduce)",
                 "factor_n": f"{n} x the reference (a replicated value all-reduced)",
                 "factor_1_over_n": f"1/{n} of the reference",
                 "missing_reduce": "partial sums: the ranks disagree and their sum is the reference "
                                   "(the all-reduce is missing)"}[h.reduce]
        return Finding(P, "tp.reduce", "fail",
                       f"{cand_mod}'s output is {ref_mod}'s with {words}.",
                       {**ev, "hypothesis": h.reduce, "fit_rel_err": h.fit_rel_err}, where, _HINTS["tp.reduce"])
    return Finding(P, "tp.unexplained", "fail",
                   f"{cand_mod}'s gathered output differs from {ref_mod}'s and no tensor-parallel "
                   "hypothesis (shard order, reduction, gather axis) explains it.",
                   ev, where, _HINTS["tp.unexplained"])


def _fused(res, common: dict) -> Finding | None:
    """A fused projection whose ranks hold other reference rows than their own shard of each part."""
    f = getattr(res, "fused", None)
    if f is None:
        return None
    parts = "|".join(name for name, _ in f.parts)
    held = "; ".join(f"rank {r}: {src}" for r, src in enumerate(f.sources))
    want = "; ".join(f"rank {r}: {src}" for r, src in enumerate(f.expected))
    return Finding(P, "tp.shard_order", "fail",
                   f"{f.candidate_module} fuses [{parts}] but its ranks hold the wrong rows ({held}); "
                   f"each rank must hold its own heads of every part ({want}): the fused weight was "
                   "split as one tensor (a plain chunk over ranks) instead of per part.",
                   {**common, "candidate_module": f.candidate_module, "reference_modules": parts,
                    "rank_sources": held, "expected_sources": want, "axis": 0, "shards_of": "fused_weight"},
                   Where(reference=f.parts[0][0].rsplit(".", 1)[0], candidate=f.candidate_module),
                   _HINTS["tp.shard_order"])


def _located(res, common: dict) -> Finding | None:
    """The first aligned module whose gathered output differs."""
    if res.first is None:
        return None
    p = res.first.pair
    layout = res.calls[p.candidate.key].layout
    return _diagnosis(res.first_hypotheses, _name(p.reference.key), _name(p.candidate.key),
                      {**common, "layout": layout}, res.first_metric.evidence())


def _shape(res, common: dict) -> Finding | None:
    """An aligned module whose output shape a wrong gather axis explains."""
    if res.shape_pair is None:
        return None
    p, h = res.shape_pair
    return _diagnosis(h, _name(p.reference.key), _name(p.candidate.key),
                      {**common, "reference_shape": str(tuple(p.reference.out.shape)),
                       "candidate_shape": str(tuple(p.candidate.out.shape))}, {})


def _output(res, common: dict) -> Finding | None:
    """The model outputs (``run_reference`` vs rank 0's ``run_candidate``)."""
    m, h = res.output_metric, res.output_hypotheses
    if m is not None and m.within_tolerance:
        return None
    ev = {"reference_shape": str(res.output_shapes[0]), "candidate_shape": str(res.output_shapes[1])}
    if h is None or not h.explained:
        if m is None:
            return Finding(P, "tp.unexplained", "fail",
                           f"The gathered output has shape {res.output_shapes[1]}, the reference "
                           f"{res.output_shapes[0]}, and no gather axis explains it.",
                           {**common, **ev}, Where(reference="<output>", candidate="<output>"),
                           _HINTS["tp.unexplained"])
    return _diagnosis(h, "<output>", "<output>", {**common, **ev},
                      m.evidence() if m is not None else {})
