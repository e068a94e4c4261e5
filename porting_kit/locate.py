"""Locate: find the parts of a model that the probes then measure.

Found in the models themselves, by type and attribute name (a spec needs no
names for them, DESIGN.md "The port spec"):

* :func:`find_rotary` -- rotary frequency tables (HF ``inv_freq``, vLLM
  ``cos_sin_cache``, Meta ``freqs_cis``), for :mod:`porting_kit.probes.rotary`;
* :func:`find_norms` -- RMSNorm / LayerNorm modules, for :mod:`porting_kit.probes.norms`.

Data flow: spec -> load -> **locate** -> probes -> checks -> report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_NORM_TYPE = re.compile(r"(rms_?norm|layer_?norm)", re.IGNORECASE)


# ------------------------------------------------------------------ rotary tables

@dataclass
class RotarySite:
    """A frequency table found in a model.

    Attributes
    ----------
    name : str
        Qualified module name holding it (``""`` for the root), plus the
        attribute: ``model.rotary_emb.inv_freq``, ``freqs_cis``.
    kind : str
        ``inv_freq``, ``cos_sin_cache``, ``freqs_cis`` or ``cos_sin_tables`` (a
        ``cos_cached`` / ``sin_cached`` pair; ``name`` ends in the cos table's name).
    inv_freq : torch.Tensor [shape=(rotary_dim // 2,), float64]
        Radians per position as stored (for the tables the angle at position 1).
    dtype : str
        Storage dtype of the table.
    module : torch.nn.Module
        The module (for HF: has ``config``, ``rope_type``, ``attention_scaling``).
    rows : torch.Tensor [shape=(positions, entries), complex128] or None
        For a precomputed table (``cos_sin_cache``, ``freqs_cis``, ``cos_sin_tables``): its
        first rows (positions 0..3) as ``cos + i sin`` per entry, for
        :func:`porting_kit.probes.rotary.table_rows_reason`; None for ``inv_freq``.
    """

    name: str
    kind: str
    inv_freq: Any
    dtype: str
    module: Any = field(repr=False, default=None)
    rows: Any = field(repr=False, default=None)

    @property
    def module_name(self) -> str:
        """Name of the module holding the table (``"<root>"`` for the model itself)."""
        return self.name.rsplit(".", 1)[0] if "." in self.name else "<root>"


#: Precomputed full-width cos tables (older transformers, many ports), each with its sin twin
#: (``cos`` -> ``sin`` in the name): :func:`find_rotary` reads them as one table.
_COS_TABLES = ("cos_cached", "_cos_cached", "cos_cache")
#: The attribute names :func:`find_rotary` and :func:`find_norms` read.
_ROTARY_ATTRS = ("inv_freq", "cos_sin_cache", "freqs_cis", *_COS_TABLES)
_EPS_ATTRS = ("variance_epsilon", "eps")
_CLASS_ATTRS: dict[type, tuple[frozenset, bool]] = {}  # class -> (which of those it defines
# as class attributes (properties), whether it is torch.nn's own)
_EMPTY: dict = {}
_NORM_CLASS: dict[type, str] = {}  # class -> what its name says (find_norms)


def _has_any(mod, attrs: tuple[str, ...]) -> bool:
    """Whether ``mod`` may hold one of ``attrs``: a buffer, parameter or instance attribute
    of that name, or a class attribute (a property). Cheaper than ``getattr(mod, name,
    None)``, whose miss goes through ``nn.Module.__getattr__`` and an AttributeError; a
    weight-normed conv's ``weight`` is even recomputed on each read. A class of torch.nn
    itself (``Linear``, ``Conv1d``, ``SiLU``: most modules of a codec) is judged by its class
    alone: torch's own ``__init__`` sets none of these names except on its norms, which
    :func:`find_norms` knows by class name."""
    cls = _CLASS_ATTRS.get(type(mod))
    if cls is None:
        t = type(mod)
        cls = _CLASS_ATTRS[t] = (frozenset(a for a in (*_ROTARY_ATTRS, *_EPS_ATTRS) if hasattr(t, a)),
                                 t.__module__.startswith("torch.nn.modules."))
    on_class, torch_own = cls
    if not on_class.isdisjoint(attrs):
        return True
    if torch_own:
        return False
    d = mod.__dict__
    return not (d.keys().isdisjoint(attrs) and d.get("_buffers", _EMPTY).keys().isdisjoint(attrs)
                and d.get("_parameters", _EMPTY).keys().isdisjoint(attrs))


def find_rotary(model, walk=None) -> list[RotarySite]:
    """All rotary frequency tables in ``model``, in module order.

    Looks for (by attribute name, on every submodule): a 1-D floating
    ``inv_freq`` tensor (HF ``*RotaryEmbedding``, vLLM ``RotaryEmbedding``), a
    2-D ``cos_sin_cache`` (vLLM: ``[cos | sin]`` per position), a 2-D complex
    ``freqs_cis`` (Meta Llama: ``exp(i * position * inv_freq)``), a pair of full-width
    cos/sin tables (``cos_cached`` / ``sin_cached``, ``_cos_cached`` / ``_sin_cached``,
    ``cos_cache`` / ``sin_cache``: ``(..., max_positions, rotary_dim)``, half-split
    ``cat(f, f)`` or interleaved ``repeat_interleave(f, 2)``; kind ``cos_sin_tables``).
    One site per module: the first found wins, in that order.

    Parameters
    ----------
    model : torch.nn.Module
        Reference or candidate; walked with ``named_modules()``.
    walk : list of (str, torch.nn.Module), optional
        ``list(model.named_modules())`` when the caller has it (one walk serves several
        probes of one run); else the model is walked here.

    Returns
    -------
    list of RotarySite
        Empty when the model has none. ``inv_freq`` of each site is float64 on the CPU
        [shape=(rotary_dim // 2,)], in radians per position.

    Notes
    -----
    For ``cos_sin_cache`` [shape=(max_positions, rotary_dim)] the frequencies are
    ``atan2(sin, cos)`` of row 1 (position 1); for ``freqs_cis``
    [shape=(max_positions, rotary_dim // 2), complex] they are ``angle(row 1)``.
    Both are wrapped to (-pi, pi], so a frequency above pi radians per position would
    alias (none does in practice: the largest is 1 rad/position, ``base ** 0``).
    """
    import torch

    found: list[tuple[str, str, Any, Any]] = []  # (name, kind, row on its device, module)
    for mname, mod in (model.named_modules() if walk is None else walk):
        if not _has_any(mod, _ROTARY_ATTRS):
            continue
        prefix = f"{mname}." if mname else ""
        t = getattr(mod, "inv_freq", None)
        if isinstance(t, torch.Tensor) and t.ndim == 1 and t.is_floating_point():
            found.append((prefix + "inv_freq", "inv_freq", t, mod))
            continue
        t = getattr(mod, "cos_sin_cache", None)
        if isinstance(t, torch.Tensor) and t.ndim == 2 and t.shape[0] > 1:
            found.append((prefix + "cos_sin_cache", "cos_sin_cache", t, mod))
            continue
        t = getattr(mod, "freqs_cis", None)
        if isinstance(t, torch.Tensor) and t.ndim == 2 and t.is_complex() and t.shape[0] > 1:
            found.append((prefix + "freqs_cis", "freqs_cis", t, mod))
            continue
        for cname in _COS_TABLES:
            c, sn = getattr(mod, cname, None), getattr(mod, cname.replace("cos", "sin"), None)
            if (isinstance(c, torch.Tensor) and isinstance(sn, torch.Tensor) and c.shape == sn.shape
                    and c.ndim >= 2 and c.is_floating_point() and c.shape[-1] % 2 == 0):
                rows2 = c.reshape(-1, c.shape[-1])
                if rows2.shape[0] > 1:  # position 1's row: [cos | sin] as a cos_sin_cache row
                    found.append((prefix + cname, "cos_sin_tables",
                                  torch.cat([rows2[:_TABLE_ROWS], sn.reshape(-1, c.shape[-1])[:_TABLE_ROWS]],
                                            -1), mod))
                    break
    heads = [t if kind == "inv_freq" else t[:_TABLE_ROWS] for _, kind, t, _ in found]
    flat = _rows_on_host(heads)
    sites: list[RotarySite] = []
    for (name, kind, t, mod), head, f in zip(found, heads, flat):
        if kind == "inv_freq":
            sites.append(RotarySite(name, kind, f, str(t.dtype).replace("torch.", ""), mod))
            continue
        block = f.reshape(head.shape[0], -1)
        if kind == "freqs_cis":
            rows = block
        else:  # [cos | sin] per row
            half = block.shape[1] // 2
            rows = torch.complex(block[:, :half], block[:, half:])
        row = rows[1]
        w = _table_angles(row) if kind == "cos_sin_tables" else torch.angle(row)
        sites.append(RotarySite(name, kind, w, str(t.dtype).replace("torch.", ""), mod, rows))
    return sites


#: Rows (positions 0..3) of a precomputed table kept for the consistency check.
_TABLE_ROWS = 4


def _table_angles(row):
    """Radians per position from position 1's ``cos + i sin`` of full-width tables: one angle
    per pair, read in the layout the table is in (``cat(f, f)``: the first half; interleaved
    ``repeat_interleave(f, 2)``: every other entry; neither, e.g. uninitialised memory: the
    first half, for :func:`porting_kit.probes.rotary.garbage_reason` to judge)."""
    import torch

    ang = torch.angle(row)
    n = row.numel() // 2
    if torch.equal(ang[:n], ang[n:]):
        return ang[:n]
    if torch.equal(ang[0::2], ang[1::2]):
        return ang[0::2]
    return ang[:n]


def _rows_on_host(rows: list[Any]) -> list[Any]:
    """Each 1-D tensor on the CPU in float64 (complex128 for complex), read with one host copy
    per device and kind (a copy from a GPU waits for its queued work: one wait, not one a row)."""
    import torch

    out: list[Any] = [None] * len(rows)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.device, r.is_complex()), []).append(i)
    for (device, cplx), idx in groups.items():
        dt = torch.complex128 if cplx else torch.float64
        parts = [rows[i].detach().reshape(-1).to(dt) for i in idx]
        host = torch.cat(parts).to("cpu") if device.type != "cpu" else torch.cat(parts)
        for i, piece in zip(idx, host.split([p.numel() for p in parts])):
            out[i] = piece
    return out


# ------------------------------------------------------------------ norms

@dataclass
class NormSite:
    """A normalization module.

    Attributes
    ----------
    name : str
        Qualified module name (``model.layers.0.input_layernorm``).
    dim : int
        Normalised size (last axis).
    type : str
        Class name (``Qwen3RMSNorm``, ``LayerNorm``, ``RMSNorm``).
    eps : float or None
        The module's ``eps`` / ``variance_epsilon`` attribute, when it has one.
    """

    name: str
    dim: int
    type: str
    eps: float | None
    module: Any = field(repr=False, default=None)


def find_norms(model, walk=None) -> list[NormSite]:
    """RMSNorm / LayerNorm modules of ``model`` in module order.

    A module counts when its class name contains ``RMSNorm`` / ``LayerNorm``
    (any case, ``_`` allowed), or when it has an ``eps`` /
    ``variance_epsilon`` attribute and a 1-D ``weight`` and no children.
    GroupNorm / BatchNorm / InstanceNorm (codecs) are not included.

    Parameters
    ----------
    model : torch.nn.Module
        Reference or candidate; walked with ``named_modules()``.
    walk : list of (str, torch.nn.Module), optional
        ``list(model.named_modules())`` when the caller has it.

    Returns
    -------
    list of NormSite
        ``dim`` from the 1-D ``weight`` [shape=(hidden,)] or else the last entry of
        ``normalized_shape``; a module with neither is skipped. ``eps`` is
        ``variance_epsilon`` when present (HF's RMSNorm name), else ``eps``.
    """
    import torch

    out: list[NormSite] = []
    for name, mod in (model.named_modules() if walk is None else walk):
        tname = type(mod).__name__
        kind = _NORM_CLASS.get(type(mod))
        if kind is None:  # by class, once: "other" (Group/Batch/InstanceNorm), "norm", "maybe"
            kind = _NORM_CLASS[type(mod)] = (
                "other" if re.search(r"(group|batch|instance)_?norm", tname, re.IGNORECASE)
                else "norm" if _NORM_TYPE.search(tname) else "maybe")
        if kind == "other" or (kind == "maybe" and not _has_any(mod, _EPS_ATTRS)):
            continue  # not a norm, or neither a norm's class name nor an eps: not read further
        eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
        w = getattr(mod, "weight", None)
        looks = bool(_NORM_TYPE.search(tname)) or (
            isinstance(eps, (int, float)) and isinstance(w, torch.Tensor) and w.ndim == 1
            and not list(mod.children()))
        if not looks:
            continue
        dim = None
        if isinstance(w, torch.Tensor) and w.ndim == 1:
            dim = int(w.shape[0])
        elif hasattr(mod, "normalized_shape"):
            dim = int(tuple(mod.normalized_shape)[-1])
        if dim is None:
            continue
        out.append(NormSite(name, dim, tname, float(eps) if isinstance(eps, (int, float)) else None, mod))
    return out
