"""Static config parity: the RoPE / norm constants each side declares, before any forward.

Code: ``config.mismatch`` (one finding per disagreeing key; evidence: ``key``,
``reference_value``, ``candidate_value``, ``reference_source``,
``candidate_source``); ``config.ok``; ``config.skipped``.

Sources, in order: the spec's ``reference_config()`` / ``candidate_config()``
(dict-like), else the model's ``.config`` (HF ``PretrainedConfig``) or
``.params`` (Meta ``ModelArgs``). Each side's keys are read under their usual
names and reported with the path they came from:

=================  ==================================================================
canonical key      read from (first found)
=================  ==================================================================
rope_theta         ``rope_parameters['rope_theta']`` (transformers 5.x), ``rope_theta``,
                   ``rope_scaling['rope_theta']``, ``rotary_emb_base``
rope_type          ``rope_parameters['rope_type']``, ``rope_scaling['rope_type'|'type']``,
                   ``rope_type``, Meta ``use_scaled_rope`` (True -> ``llama3``)
rope_factor        ``rope_parameters['factor']``, ``rope_scaling['factor']``
norm_eps           ``rms_norm_eps``, ``layer_norm_eps``, ``layer_norm_epsilon``, ``norm_eps``
head_dim           ``head_dim``, else ``hidden_size // num_attention_heads`` or Meta
                   ``dim // n_heads``
rotary_dim         ``rotary_dim``, else ``head_dim * partial_rotary_factor``
=================  ==================================================================

A key missing on either side is not compared. transformers 5.x keeps
``rope_theta`` inside ``config.rope_parameters``; a port that reads only a
top-level ``rope_theta`` attribute falls back to a default, and this check is
where that shows first.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Where, ok, skip

P = "config"

_HINT = {
    "rope_theta": "Read rope_theta where the reference config keeps it (transformers 5.x: "
                  "config.rope_parameters['rope_theta']), not a top-level attribute with a default.",
    "rope_type": "Carry the reference's rope scaling (rope_parameters['rope_type'] and its factor) "
                 "into the port's rotary embedding.",
    "rope_factor": "Use the reference's rope scaling factor.",
    "norm_eps": "Pass the reference's norm epsilon (rms_norm_eps / norm_eps) to every norm of the port.",
    "head_dim": "Take head_dim from the config (it need not be hidden_size // num_attention_heads).",
    "rotary_dim": "Rotate head_dim * partial_rotary_factor dims, as the reference does.",
}


def as_dict(cfg: Any) -> dict[str, Any] | None:
    """A config as a plain dict.

    Parameters
    ----------
    cfg : Any
        A dict (copied), an HF ``PretrainedConfig`` (``to_dict()``, plus ``head_dim``,
        ``rope_theta``, ``rope_parameters``, ``rope_scaling`` read as attributes when
        ``to_dict`` drops them), a dataclass (Meta ``ModelArgs``: ``asdict``), any object
        with ``__dict__`` (public attributes), or ``None``.

    Returns
    -------
    dict or None
        ``None`` for ``None`` and objects with none of the above.
    """
    if cfg is None:
        return None
    if isinstance(cfg, dict):
        return dict(cfg)
    if hasattr(cfg, "to_dict"):
        try:
            d = dict(cfg.to_dict())
        except Exception:  # noqa: BLE001
            d = {}
        # to_dict() may drop computed attributes (head_dim); read the common ones too
        for k in ("head_dim", "rope_theta", "rope_parameters", "rope_scaling"):
            if k not in d and hasattr(cfg, k):
                d[k] = getattr(cfg, k)
        return d
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    if hasattr(cfg, "__dict__"):
        return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}
    return None


def _rope_dict(d: dict[str, Any], key: str) -> dict[str, Any] | None:
    v = d.get(key)
    if not isinstance(v, dict):
        return None
    if v and all(isinstance(x, dict) for x in v.values()):  # per layer type: take the first
        return next(iter(v.values()))
    return v


def canonical(d: dict[str, Any], label: str) -> dict[str, tuple[Any, str]]:
    """Canonical key -> (value, where it came from), for one side's config dict.

    Parameters
    ----------
    d : dict
        From :func:`as_dict`.
    label : str
        Prefixes the source (``reference_config()``, ``reference.config``).

    Returns
    -------
    dict of str to (Any, str)
        Keys of the module table that the config gives, values as declared (``head_dim``
        and ``rotary_dim`` in dims); the first source in the table's order wins. A
        per-layer-type ``rope_parameters`` dict (a dict of dicts) contributes its first entry.
    """
    out: dict[str, tuple[Any, str]] = {}
    rp, rs = _rope_dict(d, "rope_parameters"), _rope_dict(d, "rope_scaling")

    def put(key, value, src):
        if key not in out and value is not None:
            out[key] = (value, f"{label}{src}")

    if rp:
        put("rope_theta", rp.get("rope_theta"), "['rope_parameters']['rope_theta']")
    put("rope_theta", d.get("rope_theta"), "['rope_theta']")
    if rs:
        put("rope_theta", rs.get("rope_theta"), "['rope_scaling']['rope_theta']")
    put("rope_theta", d.get("rotary_emb_base"), "['rotary_emb_base']")

    if rp and rp.get("rope_type"):
        put("rope_type", rp.get("rope_type"), "['rope_parameters']['rope_type']")
        put("rope_factor", rp.get("factor"), "['rope_parameters']['factor']")
    if rs:
        put("rope_type", rs.get("rope_type", rs.get("type")), "['rope_scaling']['rope_type']")
        put("rope_factor", rs.get("factor"), "['rope_scaling']['factor']")
    elif "rope_scaling" in d and d["rope_scaling"] is None and "rope_type" not in d and not rp:
        put("rope_type", "default", "['rope_scaling'] (None)")
    put("rope_type", d.get("rope_type"), "['rope_type']")
    if isinstance(d.get("use_scaled_rope"), bool):
        put("rope_type", "llama3" if d["use_scaled_rope"] else "default", "['use_scaled_rope']")

    for k in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"):
        put("norm_eps", d.get(k), f"['{k}']")

    put("head_dim", d.get("head_dim"), "['head_dim']")
    if "head_dim" not in out:
        h, n = d.get("hidden_size", d.get("dim")), d.get("num_attention_heads", d.get("n_heads"))
        if isinstance(h, int) and isinstance(n, int) and n:
            src = "['hidden_size'] // ['num_attention_heads']" if "hidden_size" in d else "['dim'] // ['n_heads']"
            put("head_dim", h // n, src)
    put("rotary_dim", d.get("rotary_dim"), "['rotary_dim']")
    prf = d.get("partial_rotary_factor", rp.get("partial_rotary_factor") if rp else None)
    if "rotary_dim" not in out and prf is not None and "head_dim" in out:
        put("rotary_dim", int(out["head_dim"][0] * float(prf)), "['head_dim'] * ['partial_rotary_factor']")
    return out


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "rope_type":
        return str(a or "default") == str(b or "default")
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    if fa == fb:
        return True
    return math.isfinite(fa) and math.isfinite(fb) and abs(fa - fb) <= 1e-9 * max(abs(fa), abs(fb))


def _side_config(ctx: CheckContext, side: str) -> tuple[dict | None, str]:
    spec = ctx.spec
    fn = f"{side}_config"
    if spec.has(fn):
        d = as_dict(spec.call(fn))
        if d is None:
            raise InputError(f"{spec.name}: {fn}() must return a dict-like config")
        return d, f"{fn}()"
    if not spec.has_parity:
        return None, ""
    from porting_kit.load import load_pair

    model = getattr(load_pair(ctx), side)
    for attr in ("config", "params", "args"):
        cfg = getattr(model, attr, None)
        if cfg is not None and not callable(cfg):
            d = as_dict(cfg)
            if d:
                return d, f"{side}.{attr}"
    # a wrapper holding the LM: the first submodule with an HF config
    for name, sub in model.named_modules():
        if "config" not in sub.__dict__ and not hasattr(type(sub), "config"):
            continue  # cheaper than getattr's miss through nn.Module.__getattr__
        cfg = getattr(sub, "config", None)
        if name and cfg is not None and hasattr(cfg, "to_dict"):
            return as_dict(cfg), f"{side}.{name}.config"
    return None, ""


def run(ctx: CheckContext) -> list[Finding]:
    """Compare rope theta / scaling / eps / head_dim / rotary_dim. No forward runs.

    Parameters
    ----------
    ctx : CheckContext
        Configs come from the spec's ``reference_config()`` / ``candidate_config()``, else
        the loaded models' ``.config`` / ``.params`` / ``.args`` (or a submodule's HF
        config).

    Returns
    -------
    list of Finding
        One ``config.mismatch`` (``fail``) per disagreeing key (numbers equal within a
        relative 1e-9; ``rope_type`` ``None`` counts as ``"default"``), else ``config.ok``;
        ``config.skipped`` when a side has no config or the two share no key.

    Raises
    ------
    InputError
        ``<side>_config()`` raises or returns something that is not dict-like.
    """
    ref, ref_label = _side_config(ctx, "reference")
    cand, cand_label = _side_config(ctx, "candidate")
    if ref is None or cand is None:
        missing = "reference" if ref is None else "candidate"
        return [skip(P, f"no {missing} config (define {missing}_config() in the spec, or give the "
                        "model a .config)")]
    a, b = canonical(ref, ref_label), canonical(cand, cand_label)
    findings = []
    compared = [k for k in a if k in b]
    for key in compared:
        (va, sa), (vb, sb) = a[key], b[key]
        if _same(key, va, vb):
            continue
        findings.append(Finding(
            P, "config.mismatch", "fail",
            f"{key}: the reference declares {va!r} ({sa}), the candidate {vb!r} ({sb}).",
            {"key": key, "reference_value": _plain(va), "candidate_value": _plain(vb),
             "reference_source": sa, "candidate_source": sb},
            Where(None, None), _HINT[key]))
    if not compared:
        return [skip(P, "the two configs share none of rope_theta, rope_type, rope_factor, norm_eps, "
                        "head_dim, rotary_dim")]
    return findings or [ok(P, f"{len(compared)} static keys agree: {', '.join(compared)}.",
                           {"keys": ", ".join(compared)})]


def _plain(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
