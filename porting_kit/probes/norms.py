"""Find normalization modules in a model and fingerprint the function each computes.

Used by :mod:`porting_kit.checks.norm`. A norm module is probed as a black box
with synthetic inputs, so the fingerprint does not depend on the activations
of a particular forward (nor on upstream faults):

* **kind and weight** — rows of scale 100 (eps negligible) are normalised both
  ways, RMS ``x / sqrt(mean(x^2))`` and Layer ``(x - mean) / std``; per dim a
  least-squares fit ``y = a * n + c`` gives the effective weight ``a`` (and
  bias ``c``); the kind whose fit leaves no residual is the module's.
* **eps** — rows ``s * (+1, -1, +1, ...)`` (mean 0, mean square = variance =
  ``s^2``) for ``s`` from 1e-6 to 1: ``y = a x / sqrt(s^2 + eps)``, so
  ``eps = (a x / y)^2 - s^2``, read on the row where ``eps`` and ``s^2`` are
  of the same order.
* **precision** — the module copied to bfloat16 runs on bfloat16 rows and is
  compared with the same module in float64: a norm that computes its
  variance in the input dtype (no fp32 upcast) has a several-times larger
  error than one that upcasts.

:func:`capture_norm_calls` records, during a real forward, which norm runs in
which block and what it was fed: a pre-norm block feeds its first norm the
block input itself; a post-norm block feeds it ``x + sublayer(x)``.

Formulas: RMSNorm, Zhang & Sennrich 2019, ``y = w * x / sqrt(mean(x^2) + eps)``;
LayerNorm, Ba et al. 2016, ``y = w * (x - mean) / sqrt(var + eps) + b``
(biased variance, as ``torch.nn.LayerNorm``).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from porting_kit.locate import NormSite

_SEED = 20261129


# --------------------------------------------------------------------------- math

def rms_norm(x, weight=None, eps: float = 1e-6):
    """Root-mean-square norm over the last axis, in float64.

    Parameters
    ----------
    x : torch.Tensor [shape=(..., D)]
    weight : torch.Tensor [shape=(D,)], optional (default: ones)
    eps : float
        Added to the mean square.

    Returns
    -------
    torch.Tensor float64 [shape=(..., D)]: ``w * x / sqrt(mean(x^2) + eps)``.

    Examples
    --------
    ``x = full(4, 1e-3)``: eps 1e-6 gives 0.7071 (``1e-3 / sqrt(2e-6)``),
    eps 1e-5 gives 0.3015 (``1e-3 / sqrt(1.1e-5)``).
    """
    import torch

    x = x.to(torch.float64)
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.to(torch.float64)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """Layer norm over the last axis (biased variance), in float64.

    Parameters
    ----------
    x : torch.Tensor [shape=(..., D)]
        Any float dtype; computed in float64.
    weight : torch.Tensor [shape=(D,)], optional
        Per-dim scale ``w``; ``None`` means ones.
    bias : torch.Tensor [shape=(D,)], optional
        Per-dim shift ``b``; ``None`` means zeros.
    eps : float, default 1e-5
        Added to the variance (``torch.nn.LayerNorm``'s default).

    Returns
    -------
    torch.Tensor float64 [shape=(..., D)]
        ``w * (x - mean) / sqrt(var + eps) + b``.
        For ``x = [1, 2, 3, 4]``: about ``[-1.342, -0.447, 0.447, 1.342]``
        (RMSNorm gives ``[0.365, 0.730, 1.095, 1.461]``).

    Notes
    -----
    Ba et al. 2016; the biased variance (divide by ``D``) is ``torch.nn.LayerNorm``'s.
    """
    import torch

    x = x.to(torch.float64)
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.to(torch.float64)
    if bias is not None:
        y = y + bias.to(torch.float64)
    return y


# ---------------------------------------------------------------- fingerprint

@dataclass
class Fingerprint:
    """What a norm module computes, measured on synthetic rows.

    Attributes
    ----------
    kind : str
        ``rms``, ``layer`` or ``unknown`` (neither fits).
    weight : torch.Tensor [shape=(D,)] float64
        Effective per-dim weight ``a`` (``1 + w`` for a Gemma-style norm).
    bias : torch.Tensor [shape=(D,)] float64
    eps : float
        Fitted epsilon (0.0 when below what the probe can see, about 1e-13).
    residual : float
        Relative residual of the kind fit (0 for an exact RMS/Layer norm).
    rel_diff_kinds : dict
        Residual of each kind (``{"rms": ..., "layer": ...}``).
    bf16_error : float or None
        Row-common relative error of the module in bfloat16 against itself
        in float64 (:func:`bf16_error`; ``None`` when it cannot run in those dtypes).
    outputs : torch.Tensor [shape=(77, D)] float64
        The module's outputs on the probe rows (random rows, then alternating rows).
    """

    kind: str
    weight: Any = field(repr=False)
    bias: Any = field(repr=False)
    eps: float
    residual: float
    rel_diff_kinds: dict
    bf16_error: float | None
    outputs: Any = field(repr=False, default=None)


def _call(mod, x):
    out = mod(x)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out


def probe_rows(dim: int, dtype=None):
    """The synthetic probe rows of :func:`fingerprint`.

    Parameters
    ----------
    dim : int
        Normalised width ``D``.
    dtype : torch.dtype, optional
        Unused; the rows are always float64 (callers cast).

    Returns
    -------
    rand : torch.Tensor [shape=(64, dim), float64]
        Normal rows plus a per-row normal mean offset, times 100 (eps negligible);
        seeded, the same on every call.
    alt : torch.Tensor [shape=(13, dim), float64]
        ``s * (+1, -1, +1, ...)``: mean 0, mean square = variance = ``s^2``.
    scales : torch.Tensor [shape=(13,), float64]
        ``s = 10 ** linspace(-6, 0, 13)``, one per row of ``alt``.

    Notes
    -----
    Built once per ``dim`` and kept (the rows are a pure function of it); callers must not
    modify them in place.
    """
    hit = _PROBE_ROWS.get(dim)
    if hit is None:
        hit = _PROBE_ROWS[dim] = _make_probe_rows(dim)
    return hit


_PROBE_ROWS: dict[int, tuple] = {}  # dim -> probe_rows(dim)


def _make_probe_rows(dim: int):
    import torch

    g = torch.Generator().manual_seed(_SEED)
    rand = torch.randn(64, dim, generator=g, dtype=torch.float64)
    rand = (rand + torch.randn(64, 1, generator=g, dtype=torch.float64)) * 100.0
    scales = 10.0 ** torch.linspace(-6, 0, 13, dtype=torch.float64)
    sign = torch.ones(dim, dtype=torch.float64)
    sign[1::2] = -1
    alt = scales[:, None] * sign[None, :]
    return rand, alt, scales


def fingerprint(module, dim: int) -> Fingerprint:
    """Fingerprint one norm module (a float32 copy; the model is not touched).

    Parameters
    ----------
    module : torch.nn.Module
        Called as ``module(x)`` with ``x`` of shape ``(rows, dim)``; a tuple
        result (vLLM's ``RMSNorm`` with a residual) uses its first element.
    dim : int

    Returns
    -------
    Fingerprint
    """
    import torch

    m32 = cast_copy(module, torch.float32, "cpu")
    rand, alt, scales = probe_rows(dim)
    with torch.no_grad():
        y = _call(m32, rand.float()).to(torch.float64)
        ya = _call(m32, alt.float()).to(torch.float64)
    fits = {}
    for kind in ("rms", "layer"):
        n = rms_norm(rand, eps=0.0) if kind == "rms" else layer_norm(rand, eps=0.0)
        a, c, res = _ls_fit(n, y)
        fits[kind] = (a, c, res)
    kind = min(fits, key=lambda k: fits[k][2])
    a, c, res = fits[kind]
    if res > 1e-3:
        kind = "unknown"
    eps = _fit_eps(alt, ya, a, c, scales)
    return Fingerprint(kind, a, c, eps, res, {k: v[2] for k, v in fits.items()},
                       bf16_error(module, dim), torch.cat([y, ya], 0))


@dataclass
class NormAgreement:
    """How closely two norm modules agree on the probe rows (:func:`norm_agreements`).

    Attributes
    ----------
    dtype : str
        The dtype the modules ran in natively (the reference's first parameter's).
    element : float
        Largest ``max|y_c - y_r| / max|y_r|`` over rows, natively (unitless).
    row_common : float
        Root mean square over rows of the row-common relative difference (per row, the
        median of ``y_c / y_r - 1`` over elements above 1e-3 of the row's largest), natively:
        an eps or a variance rounding moves a whole row, a per-element weight does not.
    element_bf16, row_common_bf16 : float
        The same with both modules run in bfloat16 (copies when the native dtype is not
        bfloat16; the native figures otherwise).
    """

    dtype: str
    element: float
    row_common: float
    element_bf16: float
    row_common_bf16: float


def _agreement_stats(yr, yc):
    """``(element, row_common)`` per pair, each [shape=(pairs,)] float32 on the outputs'
    device (no sync), from stacked outputs ``yr``, ``yc`` [shape=(pairs, rows, D)]."""
    import torch

    yr, yc = yr.float(), yc.float()
    peak = yr.abs().amax(-1, keepdim=True)
    element = ((yc - yr).abs().amax(-1, keepdim=True) / peak.clamp_min(1e-30)).amax(dim=(-2, -1))
    keep = yr.abs() > 1e-3 * peak
    ratio = torch.where(keep, yc / torch.where(keep, yr, torch.ones_like(yr)), torch.nan)
    row = ratio.nanmedian(dim=-1).values - 1
    row_common = row.pow(2).nanmean(dim=-1).sqrt()
    return element, row_common


def _module_dtype(module):
    import torch

    p = next((t for t in [*module.parameters(), *module.buffers()] if t.is_floating_point()), None)
    return (p.dtype, p.device) if p is not None else (torch.float32, torch.device("cpu"))


def cast_copy(module, dtype, device=None):
    """A copy of ``module`` with its floating parameters and buffers in ``dtype`` (the model
    is not touched): ``copy.deepcopy(module).to(dtype=dtype, device=device)``.

    Parameters
    ----------
    module : torch.nn.Module
    dtype : torch.dtype
    device : torch.device or str, optional
        Default: where each tensor is.

    Returns
    -------
    torch.nn.Module
        For a leaf module (a norm: no children, no hooks), a shallow copy whose own tensor
        dicts hold cast copies and whose public dict / list / set attributes are copied one level
        (a deep copy of every attribute costs more than the module's call on a few rows);
        otherwise the deep copy.
    """
    import torch

    if module._modules or module._forward_hooks or module._forward_pre_hooks:
        return copy.deepcopy(module).to(dtype=dtype, device=device)

    def cast(t):
        if t is None:
            return None
        got = t.detach().to(device=device, dtype=dtype if t.is_floating_point() else t.dtype, copy=True)
        return torch.nn.Parameter(got, requires_grad=False) if isinstance(t, torch.nn.Parameter) else got

    out = copy.copy(module)
    # its own containers are copied one level (a norm's cache dict gets no entry of the copy's;
    # torch's hook dicts, empty here, stay shared: nothing registers on the copy)
    out.__dict__ = {k: copy.copy(v) if k[0] != "_" and isinstance(v, (dict, list, set)) else v
                    for k, v in module.__dict__.items()}
    out._parameters = {k: cast(v) for k, v in module._parameters.items()}
    out._buffers = {k: cast(v) for k, v in module._buffers.items()}
    return out


def _pair_outputs(ref, cand, x):
    """``(native (y_ref, y_cand), bfloat16 (y_ref, y_cand), dtype name)`` on ``x``."""
    import torch

    with torch.no_grad():
        native = (_call(ref, x), _call(cand, x))
        if x.dtype == torch.bfloat16:
            return native, native
        r16, c16 = cast_copy(ref, torch.bfloat16), cast_copy(cand, torch.bfloat16)
        x16 = x.to(torch.bfloat16)
        return native, (_call(r16, x16), _call(c16, x16))


def norm_agreements(pairs: list[tuple[Any, Any, int]]) -> list[NormAgreement | None]:
    """Run each pair of norm modules on the same probe rows and measure how they differ.

    The cheap screen before :func:`fingerprint`: two modules that agree here compute the
    same function (kind, weight, eps and bfloat16 rounding all move these outputs).

    Parameters
    ----------
    pairs : list of (torch.nn.Module, torch.nn.Module, int)
        ``(reference norm, candidate norm, width D)``; called as ``module(x)`` with ``x``
        of shape ``(77, D)`` (:func:`probe_rows`: the 64 random rows scaled down by 100,
        then the 13 alternating rows) on the reference's device, in its dtype; then in
        bfloat16 (deep copies, the models untouched, unless already bfloat16).

    Returns
    -------
    list of NormAgreement or None
        One per pair; None where a module cannot run on such rows or in bfloat16, or
        returns another shape. The figures of all pairs of one width are computed stacked,
        and come to the host in one copy.
    """
    import torch

    rows: dict[int, Any] = {}
    groups: dict[tuple, list[tuple[int, Any, Any]]] = {}  # (dim, device) -> (index, native, low)
    dtypes: list[str] = []
    for i, (ref, cand, dim) in enumerate(pairs):
        if dim not in rows:
            rand, alt, _ = probe_rows(dim)
            rows[dim] = torch.cat([rand / 100.0, alt], 0)
        dtype, device = _module_dtype(ref)
        dtypes.append(str(dtype).replace("torch.", ""))
        try:
            native, low = _pair_outputs(ref, cand, rows[dim].to(device=device, dtype=dtype))
        except Exception:  # noqa: BLE001 - a module that cannot run on (rows, dim) alone: no screen
            continue
        shape = (rows[dim].shape[0], dim)
        if any(tuple(y.shape) != shape for y in (*native, *low)):
            continue
        groups.setdefault((dim, str(device)), []).append((i, native, low))
    figures: dict[int, Any] = {}
    stacked = []
    for items in groups.values():
        k = len(items)
        if all(lo is n for _, n, lo in items):  # already bfloat16: the low figures are the native ones
            el, row = _agreement_stats(torch.stack([n[0] for _, n, _ in items]),
                                       torch.stack([n[1] for _, n, _ in items]))
            el16, row16 = el, row
        else:  # native and bfloat16 outputs in one stack (figures in float32 either way)
            el, row = _agreement_stats(
                torch.stack([n[0].float() for _, n, _ in items] + [lo[0].float() for _, _, lo in items]),
                torch.stack([n[1].float() for _, n, _ in items] + [lo[1].float() for _, _, lo in items]))
            el, el16, row, row16 = el[:k], el[k:], row[:k], row[k:]
        stacked.append(([i for i, _, _ in items], torch.stack([el, row, el16, row16], 1).cpu()))
    for idx, host in stacked:  # one host copy per width and device
        for i, vals in zip(idx, host.tolist()):
            figures[i] = vals
    return [NormAgreement(dtypes[i], *figures[i]) if i in figures else None for i in range(len(pairs))]


def same_function_key(module, dim: int) -> tuple | None:
    """What two norm modules must share to compute the same function, parameters aside.

    Parameters
    ----------
    module : torch.nn.Module
    dim : int
        Its normalised width.

    Returns
    -------
    tuple or None
        ``(class, dim, plain attributes, (name, shape, dtype) of each parameter / buffer)``;
        ``None`` (never shared) for a module with submodules or with a public attribute that
        is not a number, string, bool, ``None`` or a tuple of those (its behaviour could
        hang on it).
    """
    if module._modules:
        return None
    attrs = []
    for k, v in module.__dict__.items():  # set in __init__'s order: the same for one class
        if k[0] == "_" or k == "training":
            continue
        if not isinstance(v, _PLAIN) and not (isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v)):
            return None
        attrs.append((k, v))
    state = tuple((n, t.shape, t.dtype, t.device)  # a leaf: its own tensors
                  for tensors in (module._parameters, module._buffers) for n, t in tensors.items()
                  if t is not None)
    return (type(module), dim, tuple(attrs), state)


_PLAIN = (bool, int, float, str, type(None))  # attribute values a same_function_key may hold


def same_state(a, b) -> bool:
    """Whether two modules of one :func:`same_function_key` hold equal parameters and buffers.

    Parameters
    ----------
    a, b : torch.nn.Module
        Leaf modules (a :func:`same_function_key` is only given to modules without children).

    Returns
    -------
    bool
        Every parameter and buffer equal element for element (:func:`states_equal` for one pair).
    """
    return states_equal([(a, b)])[0]


def _own_tensors(module) -> list[Any]:
    """The module's own parameters then buffers (not its children's), in registration order."""
    return [t for t in (*module._parameters.values(), *module._buffers.values()) if t is not None]


def states_equal(pairs: list[tuple[Any, Any]]) -> list[bool]:
    """For each ``(a, b)`` pair of leaf modules, whether their parameters and buffers, taken
    in order, are equal element for element (:func:`same_state` for many pairs at once).

    Parameters
    ----------
    pairs : list of (torch.nn.Module, torch.nn.Module)
        Modules without children (norms); their own ``_parameters`` / ``_buffers`` are read.

    Returns
    -------
    list of bool
        False where the counts, shapes, dtypes or devices differ. Pairs whose tensors have
        the same shapes are compared stacked (one comparison per tensor position for the
        whole group, not one per pair), and every verdict comes to the host in one copy per
        device (one sync).
    """
    import torch

    out: list[Any] = [False] * len(pairs)
    groups: dict[tuple, list[tuple[int, list[Any], list[Any]]]] = {}
    for i, (a, b) in enumerate(pairs):
        ta, tb = _own_tensors(a), _own_tensors(b)
        sig = tuple((tuple(x.shape), x.dtype, x.device) for x in ta)
        if len(ta) != len(tb) or sig != tuple((tuple(y.shape), y.dtype, y.device) for y in tb):
            continue
        if not ta:
            out[i] = True
            continue
        groups.setdefault(sig, []).append((i, ta, tb))
    lazy: dict[Any, list[tuple[list[int], Any]]] = {}  # device -> (indices, verdicts on device)
    for sig, items in groups.items():
        verdict = None
        for j in range(len(sig)):
            ref = torch.stack([ta[j] for _, ta, _ in items]).reshape(len(items), -1)  # 0-dim too
            cand = torch.stack([tb[j] for _, _, tb in items]).reshape(len(items), -1)
            eq = (ref == cand).all(1)
            verdict = eq if verdict is None else verdict & eq
        lazy.setdefault(verdict.device, []).append(([i for i, _, _ in items], verdict))
    for parts in lazy.values():
        host = torch.cat([v for _, v in parts]).tolist()
        k = 0
        for idx, _ in parts:
            for i in idx:
                out[i] = bool(host[k])
                k += 1
    return out


def _ls_fit(n, y):
    """Per-dim least squares ``y = a * n + c``; returns (a, c, relative residual)."""
    nm, ym = n.mean(0), y.mean(0)
    dn, dy = n - nm, y - ym
    a = (dn * dy).sum(0) / (dn * dn).sum(0).clamp_min(1e-300)
    c = ym - a * nm
    res = float((y - (a * n + c)).norm() / y.norm().clamp_min(1e-300))
    return a, c, res


def _fit_eps(alt, ya, a, c, scales) -> float:
    """eps from the alternating rows: ``eps = (a x / (y - c))^2 - s^2`` per row, read where
    it is of the order of ``s^2``."""
    import torch

    num = a[None, :] * alt
    den = ya - c[None, :]
    ok = (num.abs() > 0) & (den.abs() > 0)
    best, best_gap = 0.0, float("inf")
    for i, s in enumerate(scales.tolist()):
        g = torch.where(ok[i], num[i] / den[i], torch.nan)
        g = g[torch.isfinite(g)]
        if g.numel() == 0:
            continue
        inv = float(g.median()) ** 2  # = s^2 + eps
        est = inv - s * s
        if est <= 0:
            continue
        gap = abs(math.log(est / (s * s)))
        if gap < best_gap:
            best, best_gap = est, gap
    return best if best_gap < math.log(1e4) else 0.0


def bf16_error(module, dim: int) -> float | None:
    """Row-common relative error of ``module`` run in bfloat16 against itself in float64.

    Rows: the probe's normal rows at scale 1, cast to bfloat16 first so both
    runs see the same input; the float64 run uses the bfloat16-rounded
    parameters. Per row the median of ``y_bf16 / y_f64 - 1`` (over elements above
    1e-3 of the row's largest) is the error common to the whole row, i.e. the error
    of the row's ``rsqrt(variance + eps)``; the result is its root mean square over rows.

    Parameters
    ----------
    module : torch.nn.Module
        A norm module; deep-copied twice (to bfloat16 and float64 on the CPU), never modified.
    dim : int
        Its normalised width ``D``.

    Returns
    -------
    float or None
        Unitless relative error. ``None`` when the module cannot run in bfloat16 /
        float64 or no row gives a finite median.

    Notes
    -----
    A norm that upcasts to float32 (HF ``LlamaRMSNorm``: ``hidden_states.to(torch.float32)``)
    only rounds each output element (independent errors, row median near 0: about 4e-4
    for width 64); one that computes the variance in bfloat16 rounds that per-row scalar
    to 8 bits (about 2e-3).
    """
    import torch

    rand, _, _ = probe_rows(dim)
    x16 = (rand / 100.0).to(torch.bfloat16)
    try:
        m16 = cast_copy(module, torch.bfloat16, "cpu")
        m64 = cast_copy(module, torch.float64, "cpu")
        with torch.no_grad():
            for p64, p16 in zip(m64.parameters(), m16.parameters()):
                p64.copy_(p16.to(torch.float64))
            y16 = _call(m16, x16).to(torch.float64)
            y64 = _call(m64, x16.to(torch.float64))
    except Exception:  # noqa: BLE001 - a module that cannot run in these dtypes: no verdict
        return None
    keep = y64.abs() > 1e-3 * y64.abs().amax(-1, keepdim=True)
    ratio = torch.where(keep, y16 / torch.where(keep, y64, torch.ones_like(y64)), torch.nan)
    row = ratio.nanmedian(dim=-1).values - 1
    row = row[torch.isfinite(row)]
    return float(row.pow(2).mean().sqrt()) if row.numel() else None


# ------------------------------------------------------------------- capture

@dataclass
class NormCall:
    """One call of a norm module during a forward.

    Attributes
    ----------
    name : str
    dim : int
    block : str or None
        The enclosing block (an element of a ``ModuleList``: ``model.layers.0``).
    fed_block_input : bool or None
        For the first norm of the block's own width called in the block: True
        when its input equals the block's input (pre-norm), False otherwise
        (post-norm). None for the other calls.
    """

    name: str
    dim: int
    block: str | None
    fed_block_input: bool | None = None


def _blocks(model, walk=None) -> dict[str, Any]:
    import torch

    out = {}
    for name, mod in (model.named_modules() if walk is None else walk):
        if isinstance(mod, torch.nn.ModuleList):
            for cname, child in mod.named_children():
                out[f"{name}.{cname}" if name else cname] = child
    return out


@contextmanager
def capture_norm_calls(model, sites: list[NormSite], walk=None) -> Iterator[list[NormCall]]:
    """Record the norm calls of one forward of ``model`` (no tensors are kept).

    Parameters
    ----------
    model : torch.nn.Module
        Every element of every ``ModuleList`` is a block; a pre-hook notes each block's
        floating tensor inputs.
    sites : list of NormSite
        The norms to hook (from :func:`porting_kit.locate.find_norms` on ``model``).
    walk : list of (str, torch.nn.Module), optional
        ``list(model.named_modules())`` when the caller has it.

    Yields
    ------
    list of NormCall
        Filled, in call order, by the forward run inside the ``with`` block. For the
        first call in a block of a norm whose ``dim`` equals the last axis of one of the
        block's inputs, ``fed_block_input`` tells whether its input is exactly
        (``torch.equal``) that block input: True for a pre-norm block, False for post-norm.
    """
    import torch

    calls: list[NormCall] = []
    blocks = _blocks(model, walk)
    block_inputs: dict[str, list[Any]] = {}
    first_seen: set[str] = set()
    handles = []
    site_by_mod = {id(s.module): s for s in sites}

    def block_pre(bname):
        def hook(mod, args, kwargs):
            tensors = [a for a in list(args) + list(kwargs.values())
                       if isinstance(a, torch.Tensor) and a.is_floating_point()]
            block_inputs[bname] = tensors
            first_seen.discard(bname)
        return hook

    def enclosing(name: str) -> str | None:
        parts = name.split(".")  # the longest proper prefix that is a block
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in blocks:
                return prefix
        return None

    def norm_pre(site: NormSite):
        blk = enclosing(site.name)

        def hook(mod, args, kwargs):
            x = args[0] if args else next(iter(kwargs.values()), None)
            fed = None
            if blk is not None and blk in block_inputs and blk not in first_seen and isinstance(
                    x, torch.Tensor):
                block_dim = [t for t in block_inputs[blk] if t.shape[-1] == site.dim]
                if block_dim:
                    first_seen.add(blk)
                    # the same tensor object (a pre-norm block's usual case) needs no comparison
                    fed = any(t is x for t in block_dim) or any(
                        t.shape == x.shape and torch.equal(t, x) for t in block_dim)
            calls.append(NormCall(site.name, site.dim, blk, fed))
        return hook

    wanted = {enclosing(site.name) for site in sites} - {None}  # blocks holding no norm: no hook
    for bname, mod in blocks.items():
        if bname in wanted:
            handles.append(mod.register_forward_pre_hook(block_pre(bname), with_kwargs=True))
    for site in sites:
        handles.append(site.module.register_forward_pre_hook(norm_pre(site), with_kwargs=True))
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()
        del site_by_mod


# ------------------------------------------------------------ functional norms

@dataclass
class FunctionalNormCall:
    """One call of a functional norm (``F.rms_norm`` / ``F.layer_norm`` / ``F.group_norm``).

    Attributes
    ----------
    function : str
        ``"rms_norm"``, ``"layer_norm"`` or ``"group_norm"``.
    eps : float or None
        The eps the call ran with (``None``: ``rms_norm``'s default, the dtype's eps).
    width : int
        Normalised size: last axis of ``normalized_shape``; for ``group_norm`` the group count.
    module : str
        The innermost module running when it was called (``"<root>"`` outside any).
    explicit_eps : bool
        eps was passed by the caller (positionally or by keyword) rather than defaulted.
    """

    function: str
    eps: float | None
    width: int
    module: str
    explicit_eps: bool


#: function name -> (index of eps in the positional arguments, default eps).
_FUNCTIONAL = {"rms_norm": (3, None), "layer_norm": (4, 1e-5), "group_norm": (4, 1e-5)}


@contextmanager
def capture_functional_norms(model) -> Iterator[list[FunctionalNormCall]]:
    """Record every functional norm call of one forward of ``model``, with the eps it ran with.

    ``torch.nn.functional.rms_norm`` / ``layer_norm`` / ``group_norm`` (and ``torch.rms_norm``
    / ``torch.layer_norm`` / ``torch.group_norm``) are seen through wrappers put in their
    place for the block (:class:`FunctionalNormRecorder`); a nested call of the same norm (``F.layer_norm``
    calling ``torch.layer_norm``) is recorded once. Norm modules (``nn.LayerNorm``,
    ``nn.RMSNorm``) call these too and are recorded with their own eps, so an eps hard-coded in
    a functional call anywhere in the forward is read from what runs, not from attributes.

    Parameters
    ----------
    model : torch.nn.Module
        Its module names label the calls (the innermost running module, read from the
        call stack when a call is recorded: :class:`porting_kit.probes.intercept.ModuleNamer`).

    Yields
    ------
    list of FunctionalNormCall
        Filled, in call order, by the forward run inside the ``with`` block.
    """
    from porting_kit.probes.intercept import ModuleNamer, module_names

    with FunctionalNormRecorder(ModuleNamer(module_names(model), "<root>")).patched() as calls:
        yield calls


class FunctionalNormRecorder:
    """Functional norm calls with their eps, recorded while :meth:`patched` is active (what
    :func:`capture_functional_norms` records; the parity pass's prefill facts use it too).

    ``torch.nn.functional`` / ``torch`` ``rms_norm``, ``layer_norm`` and ``group_norm`` are
    replaced, for the duration of the block, by wrappers that note the call and run the
    original: a model's ``F.rms_norm(...)`` / ``torch.layer_norm(...)`` looks the function
    up when it runs, so it gets the wrapper. Cheaper than a ``TorchFunctionMode``, which
    would add a Python call to *every* torch call of the forward (about 4 us each on a CPU
    core; a 28-layer model makes thousands). A model that bound the function at import time
    (``from torch.nn.functional import rms_norm``) is not seen: its eps is then judged only
    through its norm modules' fingerprints.

    Parameters
    ----------
    namer : porting_kit.probes.intercept.ModuleNamer
        Names the innermost module running (``FunctionalNormCall.module``).

    Attributes
    ----------
    calls : list of FunctionalNormCall
        In call order; a call nested in another (``F.layer_norm`` calling
        ``torch.layer_norm``) is not recorded again.
    """

    def __init__(self, namer) -> None:
        self.namer = namer
        self.calls: list[FunctionalNormCall] = []
        self._depth = 0

    def _wrap(self, name: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if self._depth == 0:
                self.calls.append(_functional_call(name, args, kwargs, self.namer.innermost()))
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
        return wrapper

    @contextmanager
    def patched(self) -> Iterator[list[FunctionalNormCall]]:
        """Record while the ``with`` block runs; the originals are put back on exit (also on
        error). Yields :attr:`calls`."""
        import torch

        saved = []
        try:
            for name in _FUNCTIONAL:
                for owner in (torch.nn.functional, torch):
                    fn = owner.__dict__.get(name)
                    if fn is not None:
                        saved.append((owner, name, fn))
                        setattr(owner, name, self._wrap(name, fn))
            yield self.calls
        finally:
            for owner, name, fn in reversed(saved):
                setattr(owner, name, fn)


def _functional_call(name: str, args, kwargs, module: str) -> FunctionalNormCall:
    """The eps and width of one functional norm call from its arguments."""
    pos, default = _FUNCTIONAL[name]
    explicit = "eps" in kwargs or len(args) > pos
    eps = kwargs.get("eps", args[pos] if len(args) > pos else default)
    if name == "group_norm":
        width = int(kwargs.get("num_groups", args[1] if len(args) > 1 else 0))
    else:
        shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else ())
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        width = int(shape[-1]) if shape else 0
    return FunctionalNormCall(name, None if eps is None else float(eps), width, module, bool(explicit))
