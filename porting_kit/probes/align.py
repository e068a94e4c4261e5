"""Align the modules of two implementations whose names differ.

Sources, in order of trust (each pair says which one found it):

1. ``module_map`` from the spec: pairs of name patterns. ``*`` matches any
   characters, ``{name}`` matches one dotted component (``[^.]+``) and must be
   the same on both sides: ``("lm.model.layers.{i}.self_attn", "layers.{i}.attention")``.
2. ``weights``: the weight map from loading (candidate parameter -> reference
   tensors, :mod:`porting_kit.load`). A candidate module whose parameters
   all come from one reference module is that module.
3. ``parent``: parents of aligned children correspond (``self_attn`` holds
   ``q_proj``/``o_proj``; the port's ``attn`` holds ``qkv_proj``/``o_proj``).
   Fused modules (one candidate ``qkv_proj`` <- three reference projections)
   vote for their parents too.
4. ``order``: what remains is matched by call order between already aligned
   modules, on a coarse kind (norm, attention, mlp, rotary, embedding, linear,
   activation, layer) and an equal output shape (longest common subsequence).

Whatever stays unmatched is listed as unaligned on each side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from porting_kit.probes.capture import Record
from porting_kit.errors import InputError


@dataclass
class AlignedPair:
    """A reference module call and the candidate module call that computes the same thing.

    Attributes
    ----------
    reference : Record
        The reference's module call (its ``out`` sketch is compared).
    candidate : Record
        The candidate's module call.
    source : str
        Which alignment source paired them, in order of trust: ``"module_map"``,
        ``"weights"``, ``"parent"`` or ``"order"`` (see the module docstring).

    Notes
    -----
    ``comparable`` is False when their output shapes differ (e.g. a model root
    returning logits vs hidden states) or either has no floating output; such pairs
    are listed, not compared.
    """

    reference: Record
    candidate: Record
    source: str

    @property
    def comparable(self) -> bool:
        """True when both calls have a sketched output of one shape (then they are compared)."""
        r, c = self.reference.out, self.candidate.out
        return r is not None and c is not None and r.shape == c.shape


@dataclass
class Alignment:
    """Result of :func:`align`: pairs in reference completion order, and what is left.

    Attributes
    ----------
    pairs : list of AlignedPair
        Sorted by the reference record's ``end`` (children before parents).
    unaligned_reference : list of Record
        Reference calls no source paired, in capture order.
    unaligned_candidate : list of Record
        Candidate calls no source paired, in capture order.
    """

    pairs: list[AlignedPair]
    unaligned_reference: list[Record]
    unaligned_candidate: list[Record]


_KINDS = (
    ("rotary", ("rotary", "rope")),
    ("norm", ("norm",)),
    ("attention", ("attention", "attn")),
    ("mlp", ("mlp", "feedforward", "ffn")),
    ("embedding", ("embed",)),
    ("linear", ("linear",)),
    ("activation", ("silu", "gelu", "relu", "activation", "act", "tanh", "sigmoid")),
    ("layer", ("decoderlayer", "block", "layer")),
)


def kind(rec: Record) -> str:
    """Coarse kind of a module from its class name and last name component.

    Parameters
    ----------
    rec : Record
        A captured module call; ``rec.type`` (class name) is tried first, then the last
        component of ``rec.name``, each lower-cased, against the keyword table.

    Returns
    -------
    str
        One of ``"rotary"``, ``"norm"``, ``"attention"``, ``"mlp"``, ``"embedding"``,
        ``"linear"``, ``"activation"``, ``"layer"`` (first match in that order), else
        the class name itself. Used by the ``order`` source, which matches calls of equal
        kind and equal output shape.
    """
    t = rec.type.lower()
    leaf = rec.name.rsplit(".", 1)[-1].lower()
    for k, keys in _KINDS:
        if any(key in t for key in keys):
            return k
    for k, keys in _KINDS:
        if any(key in leaf for key in keys):
            return k
    return rec.type


def _pattern_regex(pat: str, values: dict[str, str] | None = None) -> re.Pattern:
    out, i = "", 0
    for m in re.finditer(r"\{(\w+)\}|\*", pat):
        out += re.escape(pat[i:m.start()])
        if m.group(0) == "*":
            out += ".*"
        elif values is not None and m.group(1) in values:
            out += re.escape(values[m.group(1)])
        else:
            out += f"(?P<{m.group(1)}>[^.]+)"
        i = m.end()
    out += re.escape(pat[i:])
    return re.compile(out + r"\Z")


def _parse_module_map(module_map) -> list[tuple[str, str]]:
    if module_map is None:
        return []
    items = list(module_map.items()) if isinstance(module_map, dict) else list(module_map)
    out = []
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise InputError(f"module_map: each entry must be a (reference, candidate) pair of "
                             f"name patterns, got {item!r}")
        out.append((item[0], item[1]))
    return out


def _owner(tensor_name: str) -> str:
    """The module that owns a parameter: ``conv.parametrizations.weight.original0`` (torch's
    parametrized weight norm) belongs to ``conv``, like ``conv.weight_g`` does."""
    if ".parametrizations." in tensor_name:
        return tensor_name.split(".parametrizations.", 1)[0]
    return tensor_name.rsplit(".", 1)[0] if "." in tensor_name else ""


def _lift(name: str, names: set[str]) -> str | None:
    """``name`` when it was captured, else its nearest captured ancestor."""
    return name if name in names else _parent(name, names)


def _memo_lift(names: set[str]):
    """:func:`_lift` over ``names`` with every name and ancestor it meets remembered: a
    weight map names hundreds of tensors under a few dozen captured modules."""
    memo: dict[str, str | None] = {}

    def lift(name: str) -> str | None:
        if name in memo:
            return memo[name]
        if name in names:
            got = name
        elif not name:
            got = None
        else:
            got = lift(name.rsplit(".", 1)[0] if "." in name else "")
        memo[name] = got
        return got
    return lift


def _parent(name: str, names: set[str]) -> str | None:
    while name:
        name = name.rsplit(".", 1)[0] if "." in name else ""
        if name in names:
            return name
    return None


def align(ref: list[Record], cand: list[Record], *, module_map=None,
          weight_map: dict[str, list[str]] | None = None) -> Alignment:
    """Pair reference and candidate module calls.

    Parameters
    ----------
    ref, cand : list of Record
        Module calls of each side, in completion order (as captured).
    module_map : list of (str, str) or dict, optional
        Explicit name-pattern pairs (see module docstring).
    weight_map : dict, optional
        Candidate parameter name -> reference tensor names.

    Returns
    -------
    Alignment

    Raises
    ------
    InputError
        For a malformed ``module_map``.
    """
    st = _Pairing(ref, cand)
    _by_module_map(st, module_map)
    fused = _by_weights(st, weight_map)
    _by_parents(st, fused)
    _by_order(st)
    out = [AlignedPair(st.rby[rk], st.cby[ck], src) for rk, (ck, src) in st.pairs.items()]
    out.sort(key=lambda p: p.reference.end)
    return Alignment(pairs=out,
                     unaligned_reference=[r for r in ref if r.key not in st.pairs],
                     unaligned_candidate=[c for c in cand if c.key not in st.used_c])


@dataclass
class _Pairing:
    """The pairs found so far while :func:`align` runs its sources in order of trust."""

    ref: list[Record]
    cand: list[Record]
    rby: dict[str, Record] = field(init=False)
    cby: dict[str, Record] = field(init=False)
    rnames: set[str] = field(init=False)
    cnames: set[str] = field(init=False)
    pairs: dict[str, tuple[str, str]] = field(default_factory=dict)  # ref key -> (cand key, source)
    used_c: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rby = {r.key: r for r in self.ref}
        self.cby = {c.key: c for c in self.cand}
        self.rnames = {r.name for r in self.ref}
        self.cnames = {c.name for c in self.cand}

    def add(self, rk: str, ck: str, source: str) -> bool:
        """Pair ``rk`` with ``ck`` unless either is taken or unknown; True when added."""
        if rk in self.pairs or ck in self.used_c or rk not in self.rby or ck not in self.cby:
            return False
        self.pairs[rk] = (ck, source)
        self.used_c.add(ck)
        return True


def _by_module_map(st: _Pairing, module_map) -> None:
    """1. The spec's explicit ``module_map`` (a pattern pair counts only where it matches one module)."""
    for rpat, cpat in _parse_module_map(module_map):
        rre = _pattern_regex(rpat)
        for r in st.ref:
            m = rre.match(r.key)
            if not m:
                continue
            cre = _pattern_regex(cpat, m.groupdict())
            hits = [c.key for c in st.cand if cre.match(c.key)]
            if len(hits) == 1:
                st.add(r.key, hits[0], "module_map")


def _by_weights(st: _Pairing, weight_map: dict[str, list[str]] | None) -> list[tuple[set[str], str]]:
    """2. The weight map: candidate module <- reference module(s).

    A module not captured (a coarse pass hooks one module per repeated block)
    counts for its nearest captured ancestor. Returns the fused groups (one
    candidate module holding several reference modules' weights, e.g.
    ``qkv_proj``), which vote for their parents in :func:`_by_parents`.
    """
    fused: list[tuple[set[str], str]] = []
    if not weight_map:
        return fused
    c2r: dict[str, set[str]] = {}
    r2c: dict[str, set[str]] = {}
    lift_c, lift_r = _memo_lift(st.cnames), _memo_lift(st.rnames)
    for cparam, rtensors in weight_map.items():
        cmod = lift_c(_owner(cparam))
        if cmod is None:
            continue
        if len(rtensors) > 1:  # tied weights: prefer the one with the same leaf names
            leaf = ".".join(cparam.split(".")[-2:])
            same = [t for t in rtensors if t.endswith(leaf)]
            rtensors = same if len(same) == 1 else rtensors
        for rt in rtensors:
            rmod = lift_r(_owner(rt))
            if rmod is None:
                continue
            c2r.setdefault(cmod, set()).add(rmod)
            r2c.setdefault(rmod, set()).add(cmod)
    for cmod, rmods in sorted(c2r.items()):
        if len(rmods) == 1:
            rmod = next(iter(rmods))
            if len(r2c.get(rmod, ())) == 1:
                st.add(rmod, cmod, "weights")
        else:
            fused.append((rmods, cmod))
    return fused


def _parent_votes(st: _Pairing, fused: list[tuple[set[str], str]]) -> dict[tuple[str, str], int]:
    """(reference parent, candidate parent) -> number of aligned children (fused groups count each member)."""
    votes: dict[tuple[str, str], int] = {}
    for rk, (ck, _) in st.pairs.items():
        pr, pc = _parent(st.rby[rk].name, st.rnames), _parent(st.cby[ck].name, st.cnames)
        if pr is not None and pc is not None:
            votes[(pr, pc)] = votes.get((pr, pc), 0) + 1
    for rmods, cmod in fused:
        pc = _parent(cmod, st.cnames)
        prs = {_parent(rm, st.rnames) for rm in rmods}
        if pc is not None and len(prs) == 1 and None not in prs:
            key = (prs.pop(), pc)
            votes[key] = votes.get(key, 0) + len(rmods)
    return votes


def _by_parents(st: _Pairing, fused: list[tuple[set[str], str]]) -> None:
    """3. Parents of aligned children (and of fused groups) correspond, until nothing changes.

    A parent pair is taken when its vote is the best for both parents; the
    closest wrapper by sketch error is chosen among nested candidates.
    """
    while True:
        votes = _parent_votes(st, fused)
        best_r: dict[str, int] = {}
        best_c: dict[str, int] = {}
        for (a, b), v in votes.items():
            best_r[a] = max(best_r.get(a, 0), v)
            best_c[b] = max(best_c.get(b, 0), v)
        added = False
        for (pr, pc), n in sorted(votes.items(), key=lambda kv: -kv[1]):
            if n == best_r[pr] == best_c[pc]:
                found = _closest_wrapper(pr, pc, st.rby, st.cby, st.rnames, st.cnames, st.pairs, st.used_c)
                if found is not None and st.add(found[0], found[1], "parent"):
                    added = True
        if not added:
            return


def _by_order(st: _Pairing) -> None:
    """4. Call order between anchors (already aligned pairs), on module kind + output shape."""
    anchors = sorted(((st.rby[rk].end, st.cby[ck].end) for rk, (ck, _) in st.pairs.items()))
    anchors = [(-1, -1)] + anchors + [(10**12, 10**12)]
    for (r0, c0), (r1, c1) in zip(anchors, anchors[1:]):
        if r1 <= r0 or c1 <= c0:
            continue  # crossing anchors: leave this stretch alone
        # records are in completion order with ``end`` equal to their index
        rs = [r for r in st.ref[r0 + 1:min(r1, len(st.ref))] if r.key not in st.pairs]
        cs = [c for c in st.cand[c0 + 1:min(c1, len(st.cand))] if c.key not in st.used_c]
        for r, c in _lcs(rs, cs):
            st.add(r.key, c.key, "order")


def _up(name: str, names: set[str], levels: int) -> list[str]:
    out = [name]
    for _ in range(levels):
        p = _parent(out[-1], names)
        if p is None:
            break
        out.append(p)
    return out


def _closest_wrapper(pr: str, pc: str, rby, cby, rnames, cnames, pairs, used_c) -> tuple[str, str] | None:
    """Among ``(pr, pc)`` and their wrappers up to two levels (``SConv1d`` around
    ``NormConv1d`` around ``Conv1d``; a ``Sequential`` body inside a residual block),
    the unpaired pair with equal output shapes whose outputs are closest (then the
    outermost). Structure alone cannot tell a residual block from its body; the
    sketches can. ``None`` when no pair of equal shapes is free."""
    from porting_kit.probes.capture import estimate_rel_err

    best, best_key = None, None
    for r in _up(pr, rnames, 2):
        for c in _up(pc, cnames, 2):
            if r in pairs or c in used_c or r not in rby or c not in cby:
                continue
            ro, co = rby[r].out, cby[c].out
            if ro is None or co is None or ro.shape != co.shape or ro.proj is None or co.proj is None:
                continue
            # closest first (sketch noise ignored below 1e-6), then the outermost wrappers
            key = (round(estimate_rel_err(ro, co), 6), rby[r].depth + cby[c].depth)
            if best_key is None or key < best_key:
                best, best_key = (r, c), key
    return best


def _sig(rec: Record):
    return (kind(rec), rec.out.shape if rec.out is not None else None)


def _lcs(a: list[Record], b: list[Record]) -> list[tuple[Record, Record]]:
    """Longest common subsequence of two call sequences under :func:`_sig` equality."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    sa, sb = [_sig(x) for x in a], [_sig(y) for y in b]
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            dp[i][j] = dp[i + 1][j + 1] + 1 if sa[i] == sb[j] else max(dp[i + 1][j], dp[i][j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        if sa[i] == sb[j]:
            out.append((a[i], b[j]))
            i, j = i + 1, j + 1
        elif dp[i + 1][j] >= dp[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


@dataclass
class MapOutlier:
    """A repeated block whose weight map differs from its siblings' (:func:`weight_map_outliers`).

    Attributes
    ----------
    block : str
        The candidate block (``layers.1``).
    block_type : str
        Its class name; blocks are compared within one class.
    candidate_tensor : str
        The candidate parameter that maps unlike its siblings (``layers.1.attention.wk.weight``).
    reference_tensor : str
        The reference tensor it holds (``model.layers.1.self_attn.v_proj.weight``).
    expected_reference : str
        What the siblings' map gives for this block (``model.layers.1.self_attn.k_proj.weight``).
    siblings : int
        Blocks of the class that map the siblings' way.
    blocks : int
        Blocks of the class holding this parameter.
    """

    block: str
    block_type: str
    candidate_tensor: str
    reference_tensor: str
    expected_reference: str
    siblings: int
    blocks: int


_BLOCK_RE = re.compile(r"^(.*?\.)?(\d+)\.(.+)$")
_DIGITS = re.compile(r"\d+")


def _submodule(model, name: str):
    """``model.get_submodule(name)`` read from the ``_modules`` dicts (no attribute lookups),
    or None when there is no such submodule."""
    mod = model
    for part in name.split("."):
        mod = mod._modules.get(part) if hasattr(mod, "_modules") else None
        if mod is None:
            return None
    return mod


def weight_map_outliers(weight_map: dict[str, list[str]], candidate) -> list[MapOutlier]:
    """Parameters of repeated blocks that map to the reference unlike the same parameter in
    the sibling blocks of the same class (layer 1's ``wk`` holding ``v_proj`` while every
    other layer's ``wk`` holds ``k_proj``).

    Parameters
    ----------
    weight_map : dict of str to list of str
        Candidate parameter -> reference tensors whose values it holds
        (:class:`porting_kit.load.WeightLoad`).
    candidate : torch.nn.Module
        Supplies each block's class (hybrid stacks are compared within each class).

    Returns
    -------
    list of MapOutlier
        In candidate-name order; ``[]`` when every block maps alike.

    Notes
    -----
    A block is the prefix up to the first numeric name component (``layers.3``). A
    parameter's *map* is the reference name with every number written ``#``
    (``model.layers.#.self_attn.k_proj.weight``); within one (block class, parameter
    name) group the most common map is the rule, ties broken by how closely the reference
    leaf names resemble the candidate's (difflib ratio), then by the lowest block index. Only
    1:1 maps take part (fused and tied parameters have several reference tensors).
    """
    import difflib

    groups: dict[tuple[str, str], list[tuple[int, str, str, str]]] = {}
    block_types: dict[str, str | None] = {}  # block -> class name, looked up once per block
    for cname, rnames in weight_map.items():
        m = _BLOCK_RE.match(cname)
        if len(rnames) != 1 or m is None:
            continue
        block = (m.group(1) or "") + m.group(2)
        if block not in block_types:
            mod = _submodule(candidate, block)
            block_types[block] = None if mod is None else type(mod).__name__
        btype = block_types[block]
        if btype is None:
            continue
        key = (btype, (m.group(1) or "") + "#." + m.group(3))
        groups.setdefault(key, []).append((int(m.group(2)), block, cname, rnames[0]))
    out: list[MapOutlier] = []
    for (btype, _), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        shapes: dict[str, list] = {}
        for mem in members:
            shapes.setdefault(_DIGITS.sub("#", mem[3]), []).append(mem)
        if len(shapes) < 2:
            continue

        def rank(item):
            pattern, mems = item
            leaf_c = ".".join(mems[0][2].split(".")[-2:])
            leaf_r = ".".join(pattern.split(".")[-2:])
            return (-len(mems), -difflib.SequenceMatcher(None, leaf_c, leaf_r).ratio(),
                    min(x[0] for x in mems))

        rule, rule_mems = min(shapes.items(), key=rank)
        example = rule_mems[0]
        for pattern, mems in shapes.items():
            if pattern == rule:
                continue
            for idx, block, cname, rname in sorted(mems):
                expected = _renumber(example[3], example[0], idx)
                out.append(MapOutlier(block=block, block_type=btype, candidate_tensor=cname,
                                      reference_tensor=rname, expected_reference=expected,
                                      siblings=len(rule_mems), blocks=len(members)))
    return sorted(out, key=lambda o: o.candidate_tensor)


def _renumber(name: str, old: int, new: int) -> str:
    """``name`` with its first numeric component equal to ``old`` set to ``new``."""
    parts = name.split(".")
    if str(old) in parts:
        parts[parts.index(str(old))] = str(new)
    return ".".join(parts)
