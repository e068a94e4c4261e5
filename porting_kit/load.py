"""Load a pair: build the spec's models, load the reference's weights into the candidate, account for every tensor.

:func:`load_pair` is the one entry every family that needs both models uses
(cached in the check context); :func:`run_side` runs one side the way the spec says.

Weights flow reference -> candidate (DESIGN.md, "The port spec"), by the first
of these that the spec / candidate offers:

1. the spec's ``convert_weights(reference_state_dict) -> dict`` (candidate state
   dict, loaded with ``load_state_dict(strict=False)``);
2. the candidate's own vLLM-style ``load_weights(iterable of (name, tensor))``;
3. plain ``load_state_dict`` when the names match.

Accounting
----------
*Candidate parameters never set*: before loading, every floating-point
parameter of the candidate is filled with NaN; one still all-NaN afterwards
was never written. It is then given back its own initial values, so the
forward shows what the port would really compute.

*Reference tensors never loaded*: a reference tensor counts as loaded when its
values appear in some candidate parameter or persistent buffer. A handful of sampled values are
looked up (``torch.isin``) in every candidate parameter: renames, transposes,
q/k permutations, splits and fused concatenations (``qkv_proj``,
``gate_up_proj``) all keep values, so the same lookup also yields the weight
map (candidate parameter -> reference tensors) that alignment uses. Tensors
whose sampled values are not distinct (constant init, e.g. all-ones) cannot be
traced and are not reported. A conversion that changes values (rescaling,
folding ``1 + w``) must list those reference tensors in the spec's
``transformed_weights`` (fnmatch patterns); reference tensors the port does
not need at all go in ``unused_reference_weights``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from porting_kit.errors import InputError
from porting_kit.spec import Spec

_SAMPLES_PER_TENSOR = 4


@dataclass
class WeightLoad:
    """What happened when the reference's weights were loaded into the candidate.

    Attributes
    ----------
    method : str
        ``convert_weights``, ``load_weights`` or ``names``.
    weight_map : dict[str, list[str]]
        Candidate parameter name -> reference tensor names whose values it holds.
    unmapped_reference : list[str]
        Reference tensors whose values appear in no candidate parameter.
    unset_candidate : list[str]
        Candidate parameters that loading never wrote.
    untraceable : list[str]
        Reference tensors with non-distinct values (not checked).
    output_permutation : dict[str, torch.LongTensor]
        Candidate module name -> ``perm`` [shape=(out_features,)] when its ``weight`` holds
        the reference module's weight with rows reordered (``cand.weight == ref.weight[perm]``),
        as the q/k permutation between Meta's interleaved and HF's rotate-half RoPE does.
        Then candidate output feature ``j`` is reference feature ``perm[j]``, and
        comparisons map the candidate's output through it first.
    unexpected_keys : list[str]
        Names ``convert_weights`` returned that the candidate has no parameter or buffer
        for (strict loading: reported, never silently dropped).
    """

    method: str
    weight_map: dict[str, list[str]] = field(default_factory=dict)
    unmapped_reference: list[str] = field(default_factory=list)
    unset_candidate: list[str] = field(default_factory=list)
    untraceable: list[str] = field(default_factory=list)
    output_permutation: dict[str, Any] = field(default_factory=dict)
    unexpected_keys: list[str] = field(default_factory=list)


def row_permutation(ref, cand):
    """``perm`` with ``cand == ref[perm]`` (rows of a 2-D weight reordered), or ``None``.

    Parameters
    ----------
    ref : torch.Tensor [shape=(out_features, in_features)]
        The reference module's weight.
    cand : torch.Tensor [shape=(out_features, in_features)]
        The candidate parameter that holds the same values.

    Returns
    -------
    torch.LongTensor [shape=(out_features,)] or None
        ``None`` when either is not 2-D, the shapes differ, the two are already equal
        (identity: nothing to map) or no row permutation makes them equal.

    Notes
    -----
    Rows are matched by their float64 dot product with a fixed random vector (seed 0;
    equal rows give bitwise-equal sums), sorted on both sides, then the permutation is
    verified exactly with ``torch.equal``. The case it exists for is the q/k row
    permutation between Meta's interleaved RoPE and HF's rotate-half layout
    (transformers' ``convert_llama_weights_to_hf.py`` ``permute``).
    """
    import torch

    if ref.dim() != 2 or ref.shape != cand.shape or torch.equal(ref, cand):
        return None
    g = torch.Generator().manual_seed(0)
    v = torch.randn(ref.shape[1], generator=g, dtype=torch.float64).to(ref.device)
    hr, hc = ref.double() @ v, cand.double() @ v
    order_r, order_c = torch.argsort(hr), torch.argsort(hc)
    perm = torch.empty_like(order_c)
    perm[order_c] = order_r
    if torch.equal(ref[perm], cand):
        return perm
    return None


class _Tracking:
    """Iterator over ``(name, tensor)`` that remembers the last item handed out."""

    def __init__(self, items: Iterable[tuple[str, Any]]):
        self._it = iter(items)
        self.last: tuple[str, Any] | None = None
        self.count = 0

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return self

    def __next__(self) -> tuple[str, Any]:
        self.last = next(self._it)
        self.count += 1
        return self.last


def _materialize(candidate) -> None:
    """A candidate built on the meta device gets real (uninitialised) storage, as
    vLLM's loader does with ``to_empty``; non-persistent buffers stay garbage —
    exactly the state in which a port must recompute them (``rope.inv_freq_uninitialized``)."""
    import torch

    if any(t.is_meta for t in list(candidate.parameters()) + list(candidate.buffers())):
        candidate.to_empty(device=torch.device("cpu"))


def _check_shapes(sd: dict[str, Any], candidate, source: str) -> None:
    cand_sd = candidate.state_dict()
    for name, tensor in sd.items():
        if name.endswith("_extra_state"):  # a module's get_extra_state(): any object, no shape
            continue
        if name in cand_sd and tuple(cand_sd[name].shape) != tuple(tensor.shape):
            raise InputError(f"weights cannot be loaded into the candidate: {name} has shape "
                             f"{tuple(tensor.shape)} in the {source} but {tuple(cand_sd[name].shape)} "
                             "in the candidate")


def load_weights(spec: Spec, reference, candidate) -> WeightLoad:
    """Load ``reference``'s weights into ``candidate`` (in place) and account for them.

    Parameters
    ----------
    spec : Spec
        Supplies ``convert_weights`` / ``transformed_weights`` /
        ``unused_reference_weights`` when defined.
    reference, candidate : torch.nn.Module

    Returns
    -------
    WeightLoad

    Raises
    ------
    InputError
        When the weights cannot be loaded at all: a shape mismatch (names the
        tensor and both shapes), the candidate's ``load_weights`` /
        the spec's ``convert_weights`` raising, or ``convert_weights`` returning
        anything but a dict of tensors (names the first other value).
    """
    import torch

    _materialize(candidate)
    # a module's get_extra_state() puts any object in its state dict: kept, never traced
    ref_sd = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in reference.state_dict().items()}
    params = dict(candidate.named_parameters())
    with torch.no_grad():
        saved = {n: p.detach().clone() for n, p in params.items() if p.is_floating_point()}
        for n in saved:
            params[n].fill_(float("nan"))

        method, unexpected = _apply_weights(spec, ref_sd, candidate)

        unset = [n for n, p in params.items() if n in saved and p.numel() and bool(torch.isnan(p).all())]
        for n in unset:
            params[n].copy_(saved[n])
        del saved

        result = WeightLoad(method=method, unset_candidate=unset, unexpected_keys=unexpected)
        # values may land in parameters or persistent buffers (codebooks are buffers)
        cand_sd = dict(candidate.state_dict())
        _trace_values(ref_sd, cand_sd, result, spec)
        _find_output_permutations(ref_sd, cand_sd, result)
    return result


def _apply_weights(spec: Spec, ref_sd: dict[str, Any], candidate) -> tuple[str, list[str]]:
    """Load ``ref_sd`` into ``candidate`` by the first way the spec/candidate offers; return its name
    (``convert_weights``, ``load_weights`` or ``names``) and the converted names the candidate
    has no slot for. Raises InputError when loading fails."""
    import torch

    if spec.has("convert_weights"):
        converted = spec.call("convert_weights", dict(ref_sd))
        if not isinstance(converted, dict):
            raise InputError(f"{spec.name}: convert_weights() must return a dict of tensors, "
                             f"got {type(converted).__name__}")
        for name, value in converted.items():
            if not isinstance(value, torch.Tensor) and not name.endswith("_extra_state"):
                raise InputError(f"{spec.name}: convert_weights() must return a dict of tensors; "
                                 f"{name} is a {type(value).__name__}, not a tensor")
        _check_shapes(converted, candidate, "converted reference weights")
        loaded = candidate.load_state_dict(converted, strict=False)
        return "convert_weights", sorted(loaded.unexpected_keys)
    if callable(getattr(candidate, "load_weights", None)):
        items = _Tracking((k, v) for k, v in ref_sd.items() if isinstance(v, torch.Tensor))
        try:
            candidate.load_weights(items)
        except Exception as exc:
            where = ""
            if items.last is not None:
                where = f" while loading {items.last[0]} (shape {tuple(items.last[1].shape)})"
            raise InputError(f"weights cannot be loaded into the candidate{where}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                             ) from exc
        return "load_weights", []
    _check_shapes(ref_sd, candidate, "reference state dict")
    candidate.load_state_dict(ref_sd, strict=False)
    return "names", []


def _find_output_permutations(ref_sd: dict[str, Any], cand_sd: dict[str, Any], result: WeightLoad) -> None:
    """Record the row permutation of every 1:1-mapped ``.weight`` whose rows were permuted
    (the q/k permutation between interleaved and rotate-half RoPE) in ``result.output_permutation``."""
    for cname, rnames in result.weight_map.items():
        if cname.endswith(".weight") and len(rnames) == 1:
            perm = row_permutation(ref_sd[rnames[0]], cand_sd[cname])
            if perm is not None:
                result.output_permutation[cname[: -len(".weight")]] = perm


def _trace_values(ref_sd: dict[str, Any], params: dict[str, Any], result: WeightLoad, spec: Spec) -> None:
    """Fill ``weight_map`` / ``unmapped_reference`` / ``untraceable`` by value lookup in
    ``params`` (the candidate's state dict: parameters and persistent buffers)."""
    import torch

    exempt = list(spec.get("transformed_weights", []) or []) + list(spec.get("unused_reference_weights", []) or [])
    sample_vals: list[float] = []
    owners: list[int] = []
    names: list[str] = []
    for name, t in ref_sd.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            continue
        if any(fnmatch.fnmatchcase(name, pat) for pat in exempt):
            continue
        flat = t.reshape(-1)
        k = min(_SAMPLES_PER_TENSOR, flat.numel())
        idx = (torch.arange(k, dtype=torch.long) * (flat.numel() - 1) // max(k - 1, 1)).to(flat.device)
        vals = flat[idx].float().cpu()
        if k < 2 or torch.unique(vals).numel() < k or not bool(torch.isfinite(vals).all()):
            result.untraceable.append(name)
            continue
        names.append(name)
        sample_vals.extend(vals.tolist())
        owners.extend([len(names) - 1] * k)
    if not names:
        return
    samples = torch.tensor(sample_vals, dtype=torch.float32)
    order = torch.argsort(samples)
    sorted_vals = samples[order]
    owner_list = torch.tensor(owners)[order].tolist()
    found: dict[int, dict[str, int]] = {}
    for pname, p in params.items():
        if not isinstance(p, torch.Tensor) or not p.is_floating_point() or p.numel() == 0:
            continue
        s = sorted_vals.to(device=p.device, dtype=p.dtype)
        flat = p.detach().reshape(-1)
        # membership by binary search in the few sorted samples: O(N log M), no N x M compare
        pos = torch.searchsorted(s, flat).clamp_(max=s.numel() - 1)
        hit = s[pos] == flat
        if not bool(hit.any()):
            continue
        hit_vals = torch.unique(flat[hit]).cpu()
        sv = sorted_vals.to(hit_vals.dtype)
        lo = torch.searchsorted(sv, hit_vals).tolist()
        hi = torch.searchsorted(sv, hit_vals, right=True).tolist()
        for start, stop in zip(lo, hi):
            for j in range(start, stop):  # equal values may repeat in the samples (tied weights)
                counts = found.setdefault(owner_list[j], {})
                counts[pname] = counts.get(pname, 0) + 1
    need = max(2, _SAMPLES_PER_TENSOR // 2)
    for i, rname in enumerate(names):
        holders = [c for c, cnt in found.get(i, {}).items() if cnt >= need]
        if not holders:
            result.unmapped_reference.append(rname)
        for c in holders:
            result.weight_map.setdefault(c, []).append(rname)


@dataclass
class LoadedPair:
    """The spec's models with the reference's weights loaded into the candidate.

    Attributes
    ----------
    reference, candidate : torch.nn.Module
        In eval mode, on ``ctx.device``, cast to ``ctx.dtype`` when given.
    inputs : dict
        The spec's ``inputs()``, tensors moved to the device (floating ones cast).
    weights : WeightLoad
        Weight map and the unmapped / unset tensors.
    """

    reference: Any
    candidate: Any
    inputs: dict
    weights: WeightLoad


def move_inputs(obj, device, dtype):
    """``obj`` (a tensor, or dicts / lists / tuples of them) moved to ``device``.

    Floating tensors are also cast to ``dtype`` when it is not ``None``; integer tensors
    (token ids) and non-tensors keep theirs.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device=device)
    if isinstance(obj, dict):
        return {k: move_inputs(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_inputs(v, device, dtype) for v in obj)
    return obj


#: Non-persistent buffers that keep float32 under :func:`to_serving_dtype`: the rotary
#: frequency tables transformers computes in float32 (``inv_freq``, and
#: ``original_inv_freq`` kept for dynamic rope scaling).
KEEP_FP32_BUFFERS = ("inv_freq", "original_inv_freq")


def to_serving_dtype(module, dtype) -> list[str]:
    """Cast ``module`` to the serving ``dtype`` the way ``from_pretrained(dtype=...)`` leaves it.

    Parameters
    ----------
    module : torch.nn.Module
        Cast in place (on whatever device it is on).
    dtype : torch.dtype
        A floating dtype: ``torch.bfloat16``, ``torch.float16``, ``torch.float32``.

    Returns
    -------
    list[str]
        Names of the buffers kept in float32 (for the report; empty when none).

    Notes
    -----
    Rule: every floating parameter and every floating buffer is cast to ``dtype``, except a
    **non-persistent float32 buffer whose attribute name is** ``inv_freq`` **or**
    ``original_inv_freq`` (:data:`KEEP_FP32_BUFFERS`), which stays float32. Complex buffers
    (Meta's ``freqs_cis``) keep their dtype, as ``nn.Module.to(dtype=...)`` also does.

    Why: ``module.to(dtype=bfloat16)`` also casts those buffers (relative error 3e-3 in
    bf16), so a reference cast that way drifts by itself (measured on the Meta-vs-HF Llama
    pair: angle error 0.028 rad in bf16 over 64 positions, 0.051 rad over 128 on an H200)
    and the rope check blames the candidate. ``from_pretrained(dtype=bfloat16)`` does not:
    transformers' rope init (``_compute_default_rope_parameters``,
    ``modeling_rope_utils.py``) builds ``inv_freq`` with ``dtype=torch.float``
    explicitly, registers it with ``persistent=False`` (so no checkpoint overwrites it)
    and the loaded model serves with it in float32 (``LlamaRotaryEmbedding.forward`` computes
    ``freqs`` in float32 and casts only cos/sin to the activations' dtype). Checked with
    transformers 5.24: ``LlamaForCausalLM.from_pretrained(d, dtype=torch.bfloat16)`` has
    bf16 weights and float32 ``inv_freq`` / ``original_inv_freq``. A user's serving model
    therefore has float32 ``inv_freq``; this reproduces that state on both sides, so a
    candidate that really computes its tables in bf16 still shows up.
    """
    import torch

    kept: list[str] = []
    for mname, sub in module.named_modules():
        for pname, p in list(sub._parameters.items()):
            if p is not None and p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
                if p.grad is not None:
                    p.grad.data = p.grad.data.to(dtype)
        non_persistent = getattr(sub, "_non_persistent_buffers_set", set())
        for bname, b in list(sub._buffers.items()):
            if b is None or not b.is_floating_point():
                continue
            if bname in KEEP_FP32_BUFFERS and bname in non_persistent and b.dtype == torch.float32:
                kept.append(f"{mname}.{bname}" if mname else bname)
                continue
            sub._buffers[bname] = b.to(dtype)
    return kept


def load_pair(ctx) -> LoadedPair:
    """Build the spec's models, load weights reference -> candidate, move to device/dtype.

    Parameters
    ----------
    ctx : porting_kit.context.CheckContext
        Supplies the spec, ``device`` and ``dtype``; the result is cached in
        ``ctx.state["pair"]`` and returned from there on later calls.

    Returns
    -------
    LoadedPair
        Both models in eval mode on ``ctx.device`` (cast to ``ctx.dtype`` when given),
        the inputs moved the same way, and the :class:`WeightLoad` accounting.

    Raises
    ------
    InputError
        A spec function fails, ``reference()`` / ``candidate()`` is not an
        ``nn.Module``, ``inputs()`` is not a dict, the weights cannot be loaded
        (:func:`load_weights`), an unknown ``--dtype``, or the models cannot be moved to
        ``--device`` (exit 2).
    """
    if "pair" in ctx.state:
        return ctx.state["pair"]
    import torch

    spec = ctx.spec
    ctx.progress("parity: building models")
    reference = spec.call("reference")
    candidate = spec.call("candidate")
    for side, m in (("reference", reference), ("candidate", candidate)):
        if not isinstance(m, torch.nn.Module):
            raise InputError(f"{spec.name}: {side}() must return a torch.nn.Module, got {type(m).__name__}")
    inputs = spec.call("inputs")
    check_inputs(spec.name, inputs)
    ctx.progress("parity: loading weights")
    weights = load_weights(spec, reference, candidate)
    dtype = ctx.torch_dtype()
    try:
        for m in (reference, candidate):
            m.to(ctx.device)
            if dtype is not None:
                to_serving_dtype(m, dtype)
    except (RuntimeError, AssertionError) as exc:
        raise InputError(f"--device {ctx.device}: cannot move the models there: {exc}") from exc
    reference.eval()
    candidate.eval()
    pair = LoadedPair(reference, candidate, move_inputs(inputs, ctx.device, dtype), weights)
    ctx.state["pair"] = pair
    return pair


def check_inputs(spec_name: str, inputs: Any) -> None:
    """Refuse spec inputs no comparison can use, before any model runs.

    An empty tensor would make every output "match"; NaN/Inf in an input would be
    blamed on the model as a NaN origin.

    Parameters
    ----------
    spec_name : str
        For the message.
    inputs : Any
        What the spec's ``inputs()`` returned: a dict of tensors and other values.

    Raises
    ------
    InputError
        ``inputs`` is not a dict, is empty, or a tensor in it has no elements or holds
        NaN/Inf (the key and the count are named).
    """
    import torch

    if not isinstance(inputs, dict):
        raise InputError(f"{spec_name}: inputs() must return a dict, got {type(inputs).__name__}")
    if not inputs:
        raise InputError(f"{spec_name}: inputs() returned an empty dict; nothing to compare")
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            continue
        if value.numel() == 0:
            raise InputError(f"{spec_name}: inputs()[{key!r}] is empty (shape {tuple(value.shape)}); "
                             "an empty input makes every output match")
        if (value.is_floating_point() or value.is_complex()) and not torch.isfinite(value).all():
            bad = int((~torch.isfinite(value)).sum())
            raise InputError(f"{spec_name}: inputs()[{key!r}] holds {bad} NaN/Inf value(s) of "
                             f"{value.numel()}; fix the inputs before blaming the model")


def run_side(spec, side: str, model, inputs: dict) -> Any:
    """Forward ``model`` with the spec's ``run_<side>(model, inputs)`` or ``model(**inputs)``.

    Parameters
    ----------
    spec : porting_kit.spec.Spec
    side : {"reference", "candidate"}
    model : torch.nn.Module
    inputs : dict
        The spec's inputs, already on the device.

    Returns
    -------
    Whatever the forward returns (no gradient is recorded).

    Raises
    ------
    InputError
        The forward raised (the spec cannot be run as written).
    """
    import torch

    with torch.no_grad():
        if spec.has(f"run_{side}"):
            return spec.call(f"run_{side}", model, inputs)
        try:
            return model(**inputs)
        except Exception as exc:
            raise InputError(f"{spec.name}: {side} forward model(**inputs) raised "
                             f"{type(exc).__name__}: {exc}; define run_{side}(model, inputs)") from exc
