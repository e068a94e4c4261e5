"""The generated port's weight map, from the checkpoint's own key names (issue 31, point 3).

Every checkpoint key (and every name of the transformers model's state dict, which is what
``porting-kit check`` passes the port) is either mapped to a port parameter — with the shard
of a stacked parameter (``q``/``k``/``v`` into ``qkv_proj``, ``0``/``1`` into ``gate_up_proj``)
— or listed as deliberately skipped with the reason. Rules, in order:

1. a key transformers renames on load (a legacy checkpoint layout) is mapped as its new name;
2. the family's prefix rules (:class:`PrefixRule`): the first whose ``source`` prefixes the
   key replaces it with ``target``; ``fuse`` says whether stacked projections are fused under
   it (the talker's decoders) or kept as they are (a wrapped reference codec);
3. a key no rule covers is skipped with the reason "no slot in the port" (and the scaffold
   notes it: ``porting-kit check`` then names it as ``parity.unmapped_weights``).

Tied weights (``_tied_weights_keys``) missing from the checkpoint are mapped too; the port
fills one from the other when the checkpoint does not carry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Stacked projections: (source infix, target infix, shard id).
STACKED = (
    (".self_attn.q_proj.", ".self_attn.qkv_proj.", "q"),
    (".self_attn.k_proj.", ".self_attn.qkv_proj.", "k"),
    (".self_attn.v_proj.", ".self_attn.qkv_proj.", "v"),
    (".self_attention.q_proj.", ".self_attention.qkv_proj.", "q"),
    (".self_attention.k_proj.", ".self_attention.qkv_proj.", "k"),
    (".self_attention.v_proj.", ".self_attention.qkv_proj.", "v"),
    (".mlp.gate_proj.", ".mlp.gate_up_proj.", 0),
    (".mlp.up_proj.", ".mlp.gate_up_proj.", 1),
)


@dataclass(frozen=True)
class PrefixRule:
    """Checkpoint prefix ``source`` becomes port prefix ``target``; ``fuse`` fuses the stacked
    projections under it."""

    source: str
    target: str
    fuse: bool = True


@dataclass
class WeightMap:
    """The generated map.

    Attributes
    ----------
    entries : dict
        Checkpoint / state name -> ``(port parameter, shard or None)``.
    skipped : dict
        Name -> why it is not loaded.
    tied : dict
        Port parameter -> the port parameter it takes its values from when the checkpoint
        lacks it.
    """

    entries: dict[str, tuple[str, str | int | None]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    tied: dict[str, str] = field(default_factory=dict)


def map_name(name: str, rules: tuple[PrefixRule, ...]) -> tuple[str, str | int | None] | None:
    """The port parameter and shard for state name ``name`` under ``rules`` (None: no rule)."""
    for rule in rules:
        if not name.startswith(rule.source):
            continue
        target = rule.target + name[len(rule.source):]
        if rule.fuse:
            for infix, fused, shard in STACKED:
                if infix in target:
                    return target.replace(infix, fused, 1), shard
        return target, None
    return None


def build_weight_map(checkpoint_keys: list[str], state_names: list[str], renamed: dict[str, str],
                     tied: dict[str, str], rules: tuple[PrefixRule, ...]) -> WeightMap:
    """Map every checkpoint key and state name (module docstring).

    Parameters
    ----------
    checkpoint_keys : list of str
        The checkpoint's tensor names (header only).
    state_names : list of str
        The transformers model's state-dict names ([] when unknown).
    renamed : dict
        Checkpoint key -> state name where transformers renames on load.
    tied : dict
        The transformers class's tied weights: name -> the name it shares storage with.
    rules : tuple of PrefixRule

    Returns
    -------
    WeightMap
    """
    result = WeightMap()
    for name in sorted(set(checkpoint_keys) | set(state_names)):
        mapped = map_name(renamed.get(name, name), rules)
        if mapped is None:
            result.skipped[name] = "no slot in the port (no prefix rule covers it)"
        else:
            result.entries[name] = mapped
    for target, source in tied.items():
        t, s = map_name(target, rules), map_name(source, rules)
        if t is not None and s is not None and target not in checkpoint_keys:
            result.tied[t[0]] = s[0]
    return result


def table_rows(wm: WeightMap) -> list[tuple[str, str]]:
    """``(checkpoint name, port parameter[shard] or 'skipped: why')`` rows for the README table."""
    rows = []
    for name in sorted(set(wm.entries) | set(wm.skipped)):
        if name in wm.entries:
            target, shard = wm.entries[name]
            rows.append((name, target if shard is None else f"{target} [shard {shard}]"))
        else:
            rows.append((name, f"skipped: {wm.skipped[name]}"))
    return rows
