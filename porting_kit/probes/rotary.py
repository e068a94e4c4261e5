"""Find rotary position embeddings in a model and measure the rotation it applies.

Used by :mod:`porting_kit.checks.rope`. Three things live here:

* **RoPE math** in float64: :func:`default_inv_freq`, :func:`rotate`,
  :func:`layout_permutation`, :func:`fit_base`.
* **Discovery** (:func:`porting_kit.locate.find_rotary`): the frequency table each side holds,
  found by name and type — HF ``*RotaryEmbedding`` modules with an
  ``inv_freq`` buffer, vLLM-style modules with ``inv_freq`` or
  ``cos_sin_cache``, Meta Llama's complex ``freqs_cis`` attribute.
* **Capture and measurement** (:func:`capture_qk`, :func:`measure_rotation`):
  the post-rotary q/k that each model feeds its attention kernel
  (``scaled_dot_product_attention`` or the first ``q @ k^T`` matmul of an
  attention call), caught with a :class:`torch.overrides.TorchFunctionMode`;
  the reference's pre-rotary q/k recovered by undoing the reference's own
  rotation (its rotary module's ``cos``/``sin``, captured by a forward hook).
  The candidate's rotation is then *measured*: for each way of pairing dims
  (rotate-half or interleaved, through the q/k weight-map permutation or not,
  rotary over ``r`` dims) the per-(position, pair) complex ratio
  ``post / pre`` is fitted by least squares over batch and heads; the pairing
  whose residual vanishes is the candidate's layout, and the ratio's angle is
  the candidate's rotation angle ``theta[t, i]`` (its magnitude the
  attention scaling).

Conventions (Su et al. 2021, "RoFormer"; HF ``apply_rotary_pos_emb``; Meta
``apply_rotary_emb``): pair ``i`` of a head vector rotates by
``theta[t, i] = position_t * inv_freq[i]`` with
``inv_freq[i] = base ** (-2 i / rotary_dim)``. *Rotate-half* (GPT-NeoX, HF)
pairs dims ``(i, i + rotary_dim/2)``; *interleaved* (GPT-J, Meta's complex
form) pairs ``(2i, 2i + 1)``. HF's Llama conversion permutes q/k rows from
interleaved to rotate-half order (:func:`layout_permutation`), which makes the
two conventions compute the same attention scores.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from porting_kit.locate import RotarySite

HALF, INTERLEAVED = "rotate_half", "interleaved"


# --------------------------------------------------------------------------- math

def default_inv_freq(base: float, rotary_dim: int):
    """Inverse frequencies of plain RoPE.

    Parameters
    ----------
    base : float
        ``rope_theta`` (e.g. 10000, 500000, 1000000).
    rotary_dim : int
        Number of rotated dims of a head (``head_dim`` times
        ``partial_rotary_factor``); even.

    Returns
    -------
    torch.Tensor [shape=(rotary_dim // 2,), float64]
        ``base ** (-2 i / rotary_dim)`` in radians per position. For
        ``rotary_dim=64, base=1e4`` it starts 1.0, 0.749894, 0.562341,
        0.421696, 0.316228.

    Notes
    -----
    Su et al. 2021 (RoFormer), eq. 15; HF ``_compute_default_rope_parameters``.
    """
    import torch

    i = torch.arange(0, rotary_dim, 2, dtype=torch.float64)
    return 1.0 / (float(base) ** (i / rotary_dim))


def fit_base(inv_freq) -> tuple[float, float]:
    """Fit ``base`` of a default-RoPE frequency table by least squares on the log.

    Parameters
    ----------
    inv_freq : torch.Tensor [shape=(n,)]
        Radians per position, ``n = rotary_dim // 2``.

    Returns
    -------
    base : float
        The base ``b`` minimising ``sum_i (log inv_freq[i] + (i / n) log b)^2``.
    rel_residual : float
        ``max_i |default_inv_freq(b)[i] / inv_freq[i] - 1|``: near 0 when the
        table is a plain geometric series with first value 1.
    """
    import torch

    w = inv_freq.detach().to(torch.float64).flatten()
    n = w.numel()
    if n < 2 or not torch.isfinite(w).all() or (w <= 0).any():
        return float("nan"), float("inf")
    x = torch.arange(n, dtype=torch.float64) / n
    log_b = float(-(torch.log(w) * x).sum() / (x * x).sum())
    b = math.exp(log_b)
    pred = default_inv_freq(b, 2 * n)
    return b, float((pred / w - 1).abs().max())


def layout_permutation(head_dim: int):
    """Index ``perm`` with ``x_interleaved = x_rotate_half[..., perm]``.

    The inverse of the row permutation HF's ``convert_llama_weights_to_hf``
    applies to ``wq``/``wk`` (view as ``(heads, head_dim/2, 2, dim)``, swap the
    middle axes): Meta dim ``2i`` is HF dim ``i`` and Meta dim ``2i+1`` is HF
    dim ``i + head_dim/2``.

    Parameters
    ----------
    head_dim : int
        Dims of one attention head; even.

    Returns
    -------
    torch.Tensor [shape=(head_dim,), int64]
        ``[0, h, 1, h + 1, ..., h - 1, 2h - 1]`` with ``h = head_dim // 2``.

    Notes
    -----
    Source: transformers ``models/llama/convert_llama_weights_to_hf.py``, ``permute``.
    """
    import torch

    h = head_dim // 2
    return torch.stack([torch.arange(h), torch.arange(h) + h], dim=1).reshape(-1)


def rotary_permutation(rotary_dim: int, head_dim: int):
    """:func:`layout_permutation` over the first ``rotary_dim`` dims, the pass-through dims
    kept in place: the q/k row order of an interleaved kernel for a partial-rotary model
    (a conversion that permutes only the rotated part of each head).

    Parameters
    ----------
    rotary_dim : int
        Rotated dims of a head (even, ``<= head_dim``).
    head_dim : int

    Returns
    -------
    torch.Tensor [shape=(head_dim,), int64]
        ``layout_permutation(rotary_dim)`` then ``rotary_dim, ..., head_dim - 1``;
        ``layout_permutation(head_dim)`` when ``rotary_dim == head_dim``.
    """
    import torch

    return torch.cat([layout_permutation(rotary_dim), torch.arange(rotary_dim, head_dim)])


def _pairs(layout: str, rotary_dim: int, head_dim: int):
    """(a, b) index tensors of the rotated pairs and the pass-through dims."""
    import torch

    n = rotary_dim // 2
    if layout == HALF:
        a = torch.arange(n)
        b = a + n
    else:
        a = torch.arange(n) * 2
        b = a + 1
    rest = torch.arange(rotary_dim, head_dim)
    return a, b, rest


def rotate(x, theta, layout: str = HALF, scale: float = 1.0):
    """Apply RoPE rotation angles to head vectors.

    Parameters
    ----------
    x : torch.Tensor [shape=(..., T, head_dim)]
    theta : torch.Tensor [shape=(T, rotary_dim // 2)]
        Angles in radians (``position * inv_freq``).
    layout : {"rotate_half", "interleaved"}
    scale : float
        Attention scaling multiplying cos and sin (YaRN); 1.0 otherwise.

    Returns
    -------
    torch.Tensor, float64, shape of ``x``; dims ``rotary_dim..head_dim`` pass through.
    """
    import torch

    x = x.to(torch.float64)
    head_dim = x.shape[-1]
    a, b, _ = _pairs(layout, 2 * theta.shape[-1], head_dim)
    c, s = torch.cos(theta) * scale, torch.sin(theta) * scale
    out = x.clone()
    out[..., a] = x[..., a] * c - x[..., b] * s
    out[..., b] = x[..., b] * c + x[..., a] * s
    return out


def garbage_reason(inv_freq) -> str | None:
    """Why a stored frequency table cannot be a RoPE table, or ``None`` when it can.

    A RoPE table is finite, positive, non-increasing and at most 1 rad per
    position at ``i = 0`` (``base ** 0 = 1``; scaling only lowers it). A
    non-persistent ``inv_freq`` left by meta-device init / ``to_empty()`` is
    uninitialised memory: zeros, denormals, NaN or arbitrary values.

    Parameters
    ----------
    inv_freq : torch.Tensor [shape=(rotary_dim // 2,)]
        Radians per position as stored (any float dtype; compared in float64).

    Returns
    -------
    str or None
        One clause for the finding's message (``"3 of 32 values are NaN/Inf"``), checked
        in that order: empty, non-finite, non-positive, ``inv_freq[0] > 1 + 1e-3``
        rad/position, increasing by more than a relative 1e-6 anywhere, two or more values
        all equal (memory filled with one value; a RoPE base is > 1, so its table decays).
    """
    import torch

    # a table has a few dozen entries: plain floats beat a handful of tensor ops
    w = inv_freq.detach().to("cpu", torch.float64).reshape(-1).tolist()
    n = len(w)
    if not n:
        return "the table is empty"
    bad = sum(1 for x in w if not math.isfinite(x))
    if bad:
        return f"{bad} of {n} values are NaN/Inf"
    bad = sum(1 for x in w if x <= 0)
    if bad:
        return f"{bad} of {n} values are zero or negative"
    if w[0] > 1.0 + 1e-3:
        return f"inv_freq[0] = {w[0]:.6g} > 1 rad/position"
    if any(b > a * (1 + 1e-6) for a, b in zip(w, w[1:])):
        return "values are not decreasing (not a geometric series)"
    if n > 1 and w[-1] >= w[0]:  # base ** (-2i / d) decays for every base > 1
        return f"all {n} values are equal ({w[0]:.6g}): no decay over the pairs"
    return None


def table_rows_reason(rows, tol: float = 2e-2) -> str | None:
    """Why a precomputed cos/sin (or complex) table's first rows are not RoPE rows, or ``None``.

    Row ``p`` of a RoPE table holds ``scale * exp(i p w_j)`` per entry: one magnitude (the
    attention scaling) everywhere, angle 0 at position 0, and the angle at position ``p``
    ``p`` times the one at position 1 (mod 2 pi). Uninitialised memory breaks that even when
    position 1's angles happen to look like a frequency table (one pair, or values that fall
    in order).

    Parameters
    ----------
    rows : torch.Tensor [shape=(positions, entries), complex] or None
        :attr:`porting_kit.locate.RotarySite.rows` (``cos + i sin``); None: nothing to judge.
    tol : float, default 2e-2
        Relative magnitude spread and angle error (radians) allowed: a bfloat16 table is
        within about 4e-3 of its float64 values; garbage is off by order 1.

    Returns
    -------
    str or None
        One clause for the finding's message; None when the rows are consistent, or fewer
        than two rows.
    """
    import torch

    if rows is None or rows.ndim != 2 or rows.shape[0] < 2 or rows.numel() == 0:
        return None
    r = rows.to(torch.complex128)
    if not bool(torch.isfinite(torch.view_as_real(r)).all()):
        return "the table holds NaN/Inf"
    mag = r.abs()
    top = float(mag.max())
    if top == 0:
        return "the table is all zeros"
    if float(mag.min()) < top * (1 - tol):
        return (f"its cos/sin magnitudes vary from {float(mag.min()):.3g} to {top:.3g} over positions "
                f"0..{rows.shape[0] - 1} (a rotation table has one)")
    w = torch.angle(r[1])
    p = torch.arange(r.shape[0], dtype=torch.float64)[:, None]
    err = float(wrap(torch.angle(r) - p * w[None]).abs().max())
    if err > tol * max(1, r.shape[0] - 1):
        return (f"its angles at positions 0..{rows.shape[0] - 1} are not multiples of position 1's "
                f"(off by up to {err:.3g} rad)")
    return None


@dataclass
class PaddedTable:
    """A frequency table that ends in a regular block of zeros: partial rotary by padding.

    Attributes
    ----------
    rotating_pairs : int
        Leading entries that are a valid RoPE table (positive, decreasing, <= 1 rad/position).
    total_pairs : int
        Entries of the table (``rotary_dim // 2`` of the padded width).
    """

    rotating_pairs: int
    total_pairs: int

    @property
    def fraction(self) -> float:
        """Rotated fraction of the padded width: ``rotating_pairs / total_pairs``."""
        return self.rotating_pairs / self.total_pairs


def padded_table(inv_freq) -> PaddedTable | None:
    """Recognise deliberate zero padding: a valid RoPE table followed by exact zeros.

    A port that rotates part of the head sometimes keeps full-width tables and pads
    ``inv_freq`` with zeros (cos = 1, sin = 0: the identity) instead of slicing. That
    is a regular block (all the zeros at the end, every value before them a RoPE
    table), unlike uninitialised memory (zeros scattered, or the whole table).

    Parameters
    ----------
    inv_freq : torch.Tensor [shape=(pairs,)]
        Radians per position as stored (or as read from a cos/sin cache).

    Returns
    -------
    PaddedTable or None
        The rotating prefix and the width, when the zeros are one trailing block of at
        least one entry after at least one valid entry; else None.
    """
    import torch

    w = inv_freq.to(torch.float64)
    if w.numel() < 2 or not torch.isfinite(w).all():
        return None
    zero = w == 0
    n_zero = int(zero.sum())
    if n_zero == 0 or n_zero == w.numel():
        return None
    k = w.numel() - n_zero
    if not bool(zero[k:].all()) or garbage_reason(w[:k]) is not None:
        return None
    return PaddedTable(k, int(w.numel()))


def mixed_layout_residuals(pre, post, theta, scale: float = 1.0, span: int | None = None) -> dict[str, float]:
    """Relative residual of the two mixed RoPE layouts against measured post-rotary vectors.

    A port can build cos/sin in one layout and pair elements in the other. Both
    hypotheses are computed from the reference's pre-rotary vectors and angles:

    * ``"half_table_interleaved_rotation"``: ``cos = cat(c, c)`` (HF's cache layout),
      applied with the interleaved rotation ``x * cos + rotate_every_two(x) * sin``;
    * ``"interleaved_table_half_rotation"``: ``cos = repeat_interleave(c, 2)``, applied
      with ``x * cos + rotate_half(x) * sin``.

    Parameters
    ----------
    pre, post : torch.Tensor [shape=(B, H, T, head_dim)]
        Pre-rotary (reference's, its rotation undone) and the candidate's post-rotary.
    theta : torch.Tensor [shape=(T, rotary_dim // 2)]
        The reference's angles, radians.
    scale : float
        Attention scaling multiplying cos/sin.
    span : int, optional
        Width of the candidate's tables when it does partial rotary by zero padding: the
        angles padded with zeros (identity pairs) to ``span / 2`` and the mix applied over
        ``span`` dims (default: ``rotary_dim``, no padding).

    Returns
    -------
    dict of str to float
        Hypothesis -> ``||hyp - post|| / ||post||`` (the first ``rotary_dim`` (or ``span``)
        dims rotated, the rest passed through).
    """
    import torch

    pre, post = pre.to(torch.float64), post.to(torch.float64)
    if span is not None and span > 2 * theta.shape[-1]:
        theta = torch.cat([theta, theta.new_zeros(theta.shape[0], span // 2 - theta.shape[-1])], -1)
    r = 2 * theta.shape[-1]
    c, s = torch.cos(theta) * scale, torch.sin(theta) * scale
    x = pre[..., :r]
    half_turn = torch.cat((-x[..., r // 2:], x[..., : r // 2]), dim=-1)
    pair_turn = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    hyps = {
        "half_table_interleaved_rotation": x * torch.cat((c, c), -1) + pair_turn * torch.cat((s, s), -1),
        "interleaved_table_half_rotation": (x * c.repeat_interleave(2, -1)
                                            + half_turn * s.repeat_interleave(2, -1)),
    }
    norm = float(post.norm()) or 1.0
    out = {}
    for name, h in hyps.items():
        full = torch.cat((h, pre[..., r:]), dim=-1)
        out[name] = float((full - post).norm()) / norm
    return out


# ---------------------------------------------------------------- capture

@dataclass
class QKCapture:
    """q and k as one attention call saw them (after RoPE).

    Attributes
    ----------
    site : str
        Innermost module running when the call happened (``layers.0.attention``).
    op : str
        ``sdpa`` or ``matmul``.
    q, k : torch.Tensor [shape=(B, H, T, head_dim)], detached copies.
    """

    site: str
    op: str
    q: Any = field(repr=False)
    k: Any = field(repr=False)


class ForwardStopped(BaseException):
    """Raised inside a forward by :func:`capture_qk` (``stop=True``) once it has what it
    needs; a ``BaseException`` so that a model's ``except Exception`` does not swallow it.
    The ``with capture_qk(...)`` block absorbs it."""


@contextmanager
def capture_qk(model, limit: int = 1, *, stop: bool = False) -> Iterator[list[QKCapture]]:
    """Record the q/k of the first ``limit`` attention calls of ``model``.

    Catches ``torch.nn.functional.scaled_dot_product_attention`` and, for eager
    attention, the first 4-D ``matmul(q, k^T)`` of each module call (shapes
    ``(B, H, T, D) @ (B, H, D, S)``) through one :class:`torch.overrides.TorchFunctionMode`
    (:class:`QKRecorder` on :func:`porting_kit.probes.intercept.tap_ops`).

    Parameters
    ----------
    model : torch.nn.Module
        Its module names label the captures (the running module is read from the call
        stack when a call is recorded, :class:`porting_kit.probes.intercept.ModuleNamer`).
    limit : int, default 1
        Attention calls to record; later calls are ignored.
    stop : bool, default False
        End the forward (:class:`ForwardStopped`, absorbed at the end of the ``with``
        block: the rest of the block's body does not run) as soon as ``limit`` calls are
        recorded, before that attention runs: layer 0's q/k cost one layer of the forward,
        not all of it.

    Yields
    ------
    list of QKCapture
        Filled by the forward run inside the ``with`` block: ``q``
        [shape=(batch, heads, seq, head_dim)] and ``k`` [shape=(batch, kv_heads, seq,
        head_dim)] as detached clones after RoPE (for ``matmul`` the ``k^T`` operand is
        transposed back). 3-D SDPA inputs ``(heads, seq, head_dim)`` get a batch axis of 1.
    """
    from porting_kit.probes.intercept import ModuleNamer, module_names, tap_ops

    rec = QKRecorder(ModuleNamer(module_names(model, root="")), limit, stop=stop)
    handlers: dict = {}
    rec.register(handlers)
    try:
        with tap_ops(handlers):
            yield rec.got
    except ForwardStopped:
        pass


class QKRecorder:
    """The q/k of the first ``limit`` attention calls, seen through :func:`~porting_kit.probes.intercept.tap_ops`.

    What :func:`capture_qk` records, as handlers that can share one mode with other probes
    (:mod:`porting_kit.probes.prefill`): ``scaled_dot_product_attention``'s ``query`` /
    ``key``, or, for eager attention, the first 4-D ``matmul(q, k^T)`` of each module call
    (shapes ``(B, H, T, D) @ (B, H, D, S)``; ``k^T`` transposed back; one per module) Once ``limit`` calls
    are recorded its handlers leave the mode's table (later torch calls cost nothing more).

    Parameters
    ----------
    namer : porting_kit.probes.intercept.ModuleNamer
        Names the module each call ran in (``QKCapture.site``).
    limit : int
        Attention calls to record.
    stop : bool
        Raise :class:`ForwardStopped` once ``limit`` calls are recorded, before that
        attention runs.

    Attributes
    ----------
    got : list of QKCapture
        Detached clones, q [shape=(batch, heads, seq, head_dim)], k [shape=(batch,
        kv_heads, seq, head_dim)]; 3-D SDPA inputs get a batch axis of 1.
    """

    def __init__(self, namer, limit: int = 1, *, stop: bool = False) -> None:
        self.namer = namer
        self.limit = limit
        self.stop = stop
        self.got: list[QKCapture] = []
        self._seen_modules: set[str] = set()
        self._table: dict | None = None
        self._mine: dict = {}

    def register(self, table: dict) -> None:
        """Add this recorder's handlers to a :func:`~porting_kit.probes.intercept.tap_ops` table."""
        import torch
        import torch.nn.functional as F

        self._table = table
        self._mine = {F.scaled_dot_product_attention: self._sdpa, torch.matmul: self._matmul,
                      torch.Tensor.matmul: self._matmul, torch.Tensor.__matmul__: self._matmul}
        for fn, h in self._mine.items():
            table.setdefault(fn, []).append(h)

    def _done(self) -> None:
        for fn, h in self._mine.items():
            hs = self._table.get(fn, [])
            if h in hs:
                hs.remove(h)
            if not hs:
                self._table.pop(fn, None)

    def _record(self, op: str, q, k, site: str) -> None:
        if len(self.got) >= self.limit:
            return
        if q.ndim == 3:
            q, k = q.unsqueeze(0), k.unsqueeze(0)
        self.got.append(QKCapture(site, op, q.detach().clone(), k.detach().clone()))
        if len(self.got) >= self.limit:
            self._done()
            if self.stop:
                raise ForwardStopped

    def _sdpa(self, func, args, kwargs, nested) -> None:
        q = args[0] if args else kwargs.get("query")
        k = args[1] if len(args) > 1 else kwargs.get("key")
        self._record("sdpa", q, k, self.namer.innermost())

    def _matmul(self, func, args, kwargs, nested) -> None:
        import torch

        if len(args) != 2:
            return
        a, b = args
        if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.ndim == 4
                and b.ndim == 4 and a.shape[:2] == b.shape[:2] and a.shape[-1] == b.shape[-2]
                and a.is_floating_point()):
            site = self.namer.innermost()
            if site not in self._seen_modules:  # q @ k^T, not the attention's later p @ v
                self._seen_modules.add(site)
                self._record("matmul", a, b.transpose(-1, -2), site)


@dataclass
class QKResidual:
    """How far the candidate's post-rotary q/k are from the reference's (:func:`qk_residual`).

    Attributes
    ----------
    max_residual : float
        Largest relative residual over positions and head dims, q and k (unitless; about
        the angle error in radians of a pair rotated differently). NaN when either side
        holds NaN/Inf.
    positions : int
        Sequence length compared.
    per_position : list of float
        The largest residual at each position (q and k), in position order; NaN where a
        side holds NaN/Inf.
    """

    max_residual: float
    positions: int
    per_position: list[float] = field(default_factory=list)


def qk_residual(q_ref, q_cand, k_ref, k_cand, floor: float = 0.25) -> QKResidual:
    """Relative residual of the candidate's post-rotary q/k against the reference's.

    Per position ``t`` and head dim ``d``: ``rms(c - r) / max(rms(r), floor * rms_d(r))``,
    the root mean squares taken over batch and heads (``rms_d`` also over the head dims).
    A pair of dims rotated by an angle off by ``delta`` moves those two dims by about
    ``delta`` of their magnitude, so the residual is about the largest angle error; the
    floor keeps dims that are near zero at a position from dividing noise by nothing.

    Parameters
    ----------
    q_ref, q_cand : torch.Tensor [shape=(batch, heads, seq, head_dim)]
        Same shape and layout (the caller matches them); any device and floating dtype.
    k_ref, k_cand : torch.Tensor [shape=(batch, kv_heads, seq, head_dim)]
    floor : float, default 0.25
        Fraction of the position's rms over all head dims under which a dim's rms is
        raised to it.

    Returns
    -------
    QKResidual
        Computed on the tensors' device in float32; one host copy at the end.
    """
    import torch

    rows = []
    for r, c in ((q_ref, q_cand), (k_ref, k_cand)):
        r32, c32 = r.detach().float(), c.detach().float()
        num = (c32 - r32).pow(2).mean(dim=(0, 1)).sqrt()  # (seq, head_dim)
        den = r32.pow(2).mean(dim=(0, 1)).sqrt()
        den = torch.maximum(den, floor * den.pow(2).mean(-1, keepdim=True).sqrt()).clamp_min(1e-30)
        res = num / den
        rows.append(torch.where(torch.isfinite(res), res, torch.full_like(res, float("nan"))).amax(-1))
    both = torch.stack(rows).cpu()  # (2, seq): q, k; one host copy
    value = float("nan") if torch.isnan(both).any() else float(both.max())
    per_position = both.amax(0).tolist()
    return QKResidual(value, int(q_ref.shape[-2]), per_position)


@contextmanager
def capture_cos_sin(module) -> Iterator[list[tuple[Any, Any, Any]]]:
    """Record ``(cos, sin, position_ids)`` each time an HF-style rotary module runs.

    Parameters
    ----------
    module : torch.nn.Module
        An HF ``*RotaryEmbedding``: ``forward(x, position_ids) -> (cos, sin)``.

    Yields
    ------
    list of (torch.Tensor, torch.Tensor, torch.Tensor or None)
        Per call, detached clones of ``cos`` and ``sin`` [shape=(batch, seq, rotary_dim)]
        in rotate-half form (``cat(freqs, freqs)``), already multiplied by
        ``attention_scaling``, and ``position_ids`` [shape=(batch, seq)] (positional or
        keyword; ``None`` when not given). Calls returning anything but a 2-tuple of
        tensors are skipped.
    """
    import torch

    got: list[tuple[Any, Any, Any]] = []

    def hook(mod, args, kwargs, out):
        if isinstance(out, tuple) and len(out) == 2 and all(isinstance(o, torch.Tensor) for o in out):
            pos = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
            got.append((out[0].detach().clone(), out[1].detach().clone(),
                        None if pos is None else pos.detach().clone()))

    h = module.register_forward_hook(hook, with_kwargs=True)
    try:
        yield got
    finally:
        h.remove()


# ------------------------------------------------------------- measurement

@dataclass
class Structure:
    """One way the candidate may pair dims: layout, weight-map permutation, rotary dims.

    Attributes
    ----------
    layout : {"rotate_half", "interleaved"}
        ``rotate_half`` pairs dims ``(i, i + rotary_dim/2)`` (GPT-NeoX, transformers'
        ``rotate_half``); ``interleaved`` pairs ``(2i, 2i + 1)`` (GPT-J, Meta's
        ``apply_rotary_emb`` complex form).
    permuted : bool
        The reference's pre-rotary vectors are first reordered with
        :func:`rotary_permutation` over ``rotary_dim`` (the q/k weight permutation of HF's
        Llama conversion; over the rotated dims only for partial rotary).
    rotary_dim : int
        Dims rotated per head (even); ``rotary_dim..head_dim`` pass through.
    """

    layout: str
    permuted: bool
    rotary_dim: int

    def describe(self) -> str:
        """The structure in words: ``"interleaved over 64 dims through the q/k permutation"``."""
        p = " through the q/k permutation" if self.permuted else ""
        return f"{self.layout} over {self.rotary_dim} dims{p}"


@dataclass
class RotationFit:
    """The candidate's rotation measured under one :class:`Structure`.

    Attributes
    ----------
    structure : Structure
    residual : float
        ``||post - fitted rotation(pre)|| / ||post||`` (0 when the structure
        explains the data exactly).
    theta : torch.Tensor [shape=(T, rotary_dim // 2)]
        Fitted rotation angle in radians, wrapped to ``(-pi, pi]``.
    scale : torch.Tensor [shape=(T, rotary_dim // 2)]
        Fitted magnitude (attention scaling; 1 for plain RoPE).
    """

    structure: Structure
    residual: float
    theta: Any = field(repr=False)
    scale: Any = field(repr=False)


def measure_rotation(pre, post, structure: Structure) -> RotationFit:
    """Fit ``post = rho[t, i] * pre`` per rotated pair (complex least squares).

    Parameters
    ----------
    pre : torch.Tensor [shape=(B, H, T, head_dim)]
        Pre-rotary q (or k) in the *reference's* dim order.
    post : torch.Tensor [shape=(B, H, T, head_dim)]
        The candidate's post-rotary q (or k) in its own dim order.
    structure : Structure
        When ``permuted``, ``pre`` is first mapped to interleaved order with
        :func:`rotary_permutation` over ``structure.rotary_dim`` (the conversion's q/k
        permutation).

    Returns
    -------
    RotationFit
        Pass-through dims must equal ``pre``; they add to the residual.
    """
    import torch

    pre = pre.to(torch.float64)
    post = post.to(torch.float64)
    d = pre.shape[-1]
    if structure.permuted:
        pre = pre[..., rotary_permutation(structure.rotary_dim, d)]
    a, b, rest = _pairs(structure.layout, structure.rotary_dim, d)
    zx = torch.complex(pre[..., a], pre[..., b])
    zy = torch.complex(post[..., a], post[..., b])
    num = (zy * zx.conj()).sum(dim=(0, 1))
    den = (zx.abs() ** 2).sum(dim=(0, 1)).clamp_min(1e-300)
    rho = num / den  # (T, n)
    err = (zy - rho * zx).abs().pow(2).sum() + (post[..., rest] - pre[..., rest]).pow(2).sum()
    total = post.pow(2).sum().clamp_min(1e-300)
    return RotationFit(structure, float((err / total).sqrt()), torch.angle(rho), rho.abs())


def structures(head_dim: int, reference_rotary_dim: int, extra: tuple[int, ...] = ()) -> list[Structure]:
    """The pairings :func:`measure_rotation` tries.

    Parameters
    ----------
    head_dim : int
        Dims of one attention head.
    reference_rotary_dim : int
        Rotated dims of the reference (``head_dim * partial_rotary_factor``), tried first.
    extra : tuple of int, optional
        Other rotary widths to try, e.g. the width the data shows (:func:`rotated_width`: a
        port that slices the head at a width that is no quarter fraction of it).

    Returns
    -------
    list of Structure
        For the reference's rotary dims and ``head_dim``: 2 layouts x {plain, permuted}
        (the permutation over those dims); then, for ``head_dim/2``, ``head_dim/4``,
        ``3 head_dim/4`` and ``extra`` (even, >= 2, <= ``head_dim``, no repeats),
        rotate-half and interleaved through the permutation (the two pairings a weight map
        makes equivalent to the reference's). Plain interleaved pairs need no other width:
        interleaved over ``head_dim`` fits an interleaved kernel of any narrower width (its
        tail pairs fit a rotation of 0).
    """
    out = []
    for r in dict.fromkeys((reference_rotary_dim, head_dim)):
        if not (r >= 2 and r % 2 == 0 and r <= head_dim):
            continue
        for layout in (HALF, INTERLEAVED):
            for permuted in (False, True):
                out.append(Structure(layout, permuted, r))
    done = {s.rotary_dim for s in out}
    for r in (head_dim // 2, head_dim // 4, 3 * head_dim // 4, *extra):
        if r >= 2 and r % 2 == 0 and r <= head_dim and r not in done:
            done.add(r)
            out += [Structure(HALF, False, r), Structure(INTERLEAVED, True, r)]
    return out


def rotated_width(pre, post, tol: float = 1e-3) -> int:
    """The width the data shows rotated: the smallest even ``r`` after which every head dim
    passes through (``post[..., r:]`` within ``tol`` of ``pre[..., r:]``).

    A port that rotates part of the head by slicing keeps its tail dims as they are, in any
    layout (a conversion's permutation for an interleaved kernel moves only the rotated
    part). The slowest pairs of a RoPE table may turn by less than ``tol`` over the probe's
    positions, so the port's width is at least this one, not exactly it.

    Parameters
    ----------
    pre, post : torch.Tensor [shape=(B, H, T, head_dim)]
        The reference's pre-rotary vectors (reference dim order) and the candidate's
        post-rotary ones.
    tol : float, default 1e-3
        Largest difference, relative to the rms of ``pre``, of a dim that counts as passed
        through (above float32 matmul noise; bfloat16 noise exceeds it: then the whole head
        counts as rotated).

    Returns
    -------
    int
        Even width in ``[0, head_dim]``.
    """
    import torch

    pre, post = pre.to(torch.float64), post.to(torch.float64)
    scale = float(pre.pow(2).mean().sqrt()) or 1.0
    diff = (post - pre).abs().amax(dim=(0, 1, 2)) / scale  # (head_dim,)
    moved = torch.nonzero(diff > tol).flatten()
    if moved.numel() == 0:
        return 0
    r = int(moved[-1]) + 1
    return r + r % 2


def sliced_width(pre, post, tried: set[int]) -> int | None:
    """The rotary width of a port that slices the head at a width :func:`structures` does not
    try by default: screened on four heads of one batch row (the fit needs several vectors per
    position and pair to tell pairings apart) over every even width from
    :func:`rotated_width` to ``head_dim`` (rotate-half, or interleaved through the
    permutation over that width), the best fitting one.

    Parameters
    ----------
    pre, post : torch.Tensor [shape=(B, H, T, head_dim)]
    tried : set of int
        Widths tried anyway (skipped here).

    Returns
    -------
    int or None
        The width with the smallest residual, or None when every candidate width is tried anyway.
    """
    d = pre.shape[-1]
    lo = max(2, rotated_width(pre, post))
    widths = [r for r in range(lo + lo % 2, d + 1, 2) if r not in tried]
    if not widths:
        return None
    p1, q1 = pre[:1, :4], post[:1, :4]

    def res(r):
        return min(measure_rotation(p1, q1, Structure(HALF, False, r)).residual,
                   measure_rotation(p1, q1, Structure(INTERLEAVED, True, r)).residual)

    return min(widths, key=res)


def undo_reference_rotation(post, cos, sin):
    """Pre-rotary vectors from the reference's post-rotary ones (HF rotate-half).

    Parameters
    ----------
    post : torch.Tensor [shape=(B, H, T, head_dim)]
    cos, sin : torch.Tensor [shape=(B, T, rotary_dim) or (T, rotary_dim)]
        As HF's rotary module returns them (``cat(freqs, freqs)``, times
        ``attention_scaling``).

    Returns
    -------
    pre : torch.Tensor float64, shape of ``post``
    theta : torch.Tensor [shape=(T, rotary_dim // 2)] of batch row 0
    scale : float (attention scaling)
    """
    import torch

    post = post.to(torch.float64)
    if cos.ndim == 2:  # (T, rotary_dim): a rotary module that returns no batch axis
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    r = cos.shape[-1]
    n = r // 2
    c = cos[..., :n].to(torch.float64).unsqueeze(1)
    s = sin[..., :n].to(torch.float64).unsqueeze(1)
    mag2 = (c * c + s * s).clamp_min(1e-300)
    pre = post.clone()
    ya, yb = post[..., :n], post[..., n:r]
    pre[..., :n] = (ya * c + yb * s) / mag2
    pre[..., n:r] = (yb * c - ya * s) / mag2
    theta = torch.atan2(s[0, 0], c[0, 0])
    scale = float(mag2.sqrt().mean())
    return pre, theta, scale


def wrap(angle):
    """Angles wrapped to ``[-pi, pi)``.

    Parameters
    ----------
    angle : torch.Tensor [shape=(...)]
        Radians.

    Returns
    -------
    torch.Tensor
        ``remainder(angle + pi, 2 pi) - pi``, same shape and dtype.
    """
    import torch

    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def fit_frequencies(theta, positions) -> tuple[Any, Any]:
    """Per-pair slope and intercept of unwrapped angles against positions.

    Parameters
    ----------
    theta : torch.Tensor [shape=(T, n)] wrapped angles, rows in position order.
    positions : torch.Tensor [shape=(T,)]

    Returns
    -------
    inv_freq : torch.Tensor [shape=(n,)] radians per position (valid below pi).
    phase : torch.Tensor [shape=(n,)] angle at position 0.
    """
    import torch

    p = positions.to(torch.float64)
    order = torch.argsort(p)
    p = p[order]
    th = theta[order].to(torch.float64)
    steps = (p[1:] - p[:-1]).clamp_min(1)
    d = wrap(th[1:] - th[:-1]) / steps[:, None]
    unwrapped = torch.cat([th[:1], th[:1] + torch.cumsum(d * steps[:, None], 0)], 0)
    pm = p - p.mean()
    slope = (pm[:, None] * (unwrapped - unwrapped.mean(0))).sum(0) / (pm * pm).sum().clamp_min(1e-300)
    phase = wrap(unwrapped.mean(0) - slope * p.mean())
    return slope, phase


def reference_inv_freq(site: RotarySite, base: float | None = None, scaled: bool = True):
    """Recompute the reference rotary's inverse frequencies with another base or without scaling.

    Uses transformers' own ``ROPE_INIT_FUNCTIONS`` / ``compute_default_rope_parameters``
    on a copy of the HF rotary module's config, so every scaling type HF knows
    (linear, dynamic, yarn, llama3, longrope) is reproduced exactly.

    Parameters
    ----------
    site : RotarySite
        A reference rotary table; ``site.module`` must be an HF rotary module (a
        ``config`` attribute and a ``compute_default_rope_parameters`` classmethod).
    base : float, optional
        ``rope_theta`` to use instead of the config's (the "what would base b give"
        question of ``rope.theta_mismatch``).
    scaled : bool, default True
        False drops the scaling (``rope_type="default"``, keeping
        ``partial_rotary_factor``), for ``rope.scaling_ignored``.

    Returns
    -------
    torch.Tensor [shape=(rotary_dim // 2,), float64] or None
        Radians per position; ``None`` when the module has no HF config or
        transformers cannot rebuild it from the modified config.

    Notes
    -----
    transformers 5 ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` and
    ``*RotaryEmbedding.compute_default_rope_parameters`` (the config's
    ``rope_parameters`` dict).
    """
    import copy

    import torch

    mod = site.module
    cfg = getattr(mod, "config", None)
    if cfg is None or not hasattr(type(mod), "compute_default_rope_parameters"):
        return None
    cfg = copy.deepcopy(cfg)
    params = dict(getattr(cfg, "rope_parameters", None) or {})
    if base is not None:
        params["rope_theta"] = float(base)
        if hasattr(cfg, "rope_theta") and not isinstance(getattr(type(cfg), "rope_theta", None), property):
            cfg.rope_theta = float(base)
    rope_type = params.get("rope_type", "default")
    if not scaled:
        params = {"rope_type": "default", "rope_theta": params.get("rope_theta"),
                  **({"partial_rotary_factor": params["partial_rotary_factor"]}
                     if "partial_rotary_factor" in params else {})}
        rope_type = "default"
    cfg.rope_parameters = params
    try:
        if rope_type == "default":
            inv, _ = type(mod).compute_default_rope_parameters(cfg)
        else:
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

            inv, _ = ROPE_INIT_FUNCTIONS[rope_type](cfg, torch.device("cpu"))
    except Exception:  # noqa: BLE001 - config shapes HF cannot rebuild
        return None
    return inv.detach().to(torch.float64)


def rope_parameters(site: RotarySite) -> dict[str, Any]:
    """``rope_theta`` and ``rope_type`` (+ factor) of an HF rotary module's config, or {}.

    Parameters
    ----------
    site : RotarySite
        Its ``module.config`` is read (transformers 5 ``rope_parameters`` dict first,
        then the older ``rope_theta`` attribute).

    Returns
    -------
    dict
        ``{"rope_theta": float, "rope_type": str}`` plus ``"factor"`` when the
        parameters have one; ``rope_theta`` is absent when neither place gives it.
        ``{}`` when the module has no ``config``.
    """
    cfg = getattr(site.module, "config", None)
    if cfg is None:
        return {}
    params = dict(getattr(cfg, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", None))
    out: dict[str, Any] = {}
    if theta is not None:
        out["rope_theta"] = float(theta)
    out["rope_type"] = params.get("rope_type", getattr(site.module, "rope_type", "default"))
    if "factor" in params:
        out["factor"] = params["factor"]
    return out

