"""PKN1xx normalisation layers ported with the wrong epsilon, gain convention or precision.

PKN101: an epsilon written as a literal where the code has the configured one at hand.
Two forms, both read from the AST: (a) a norm class that takes or stores an epsilon
(``__init__(self, dim, eps=1e-6)``, ``self.variance_epsilon = eps``) and adds a literal
instead in its forward (``torch.rsqrt(var + 1e-6)``, ``F.layer_norm(x, s, w, b, 1e-5)``);
(b) a function that builds one norm from the config's epsilon (``eps=config.rms_norm_eps``)
and another with a literal (``RMSNorm(head_dim, eps=1e-6)``): the port runs the literal
whatever the checkpoint's config says (Qwen-style q/k norms copied from another model).

PKN102: a ``(1 + w)`` gain on a plain-gain weight. A weight initialised to ones (a plain
gain, as the checkpoint stores it) used as ``1 + self.weight`` / ``self.weight + 1``
(Gemma's zero-centred convention) doubles the scale. Read per class:
``nn.Parameter(torch.ones(d))`` in ``__init__`` against the ``1 +`` in the forward, directly or
through a simple local alias (``w = self.weight`` ... ``(1.0 + w)``: a name bound only to that
weight in the function). The
reverse (zeros used as a plain gain) is not flagged: residual forms such as ConvNeXt-V2's
GRN (``gamma * y + beta + x``) start at zeros on purpose.

PKN103: an RMSNorm forward that squares and averages its input in the input's own dtype:
``x.pow(2).mean(-1, keepdim=True)`` with no ``.float()`` / ``.to(torch.float32)`` in the
function. In bf16 the mean of squares loses 8 bits and the norm drifts from the reference
(which upcasts: transformers' ``LlamaRMSNorm`` does ``hidden_states.to(torch.float32)``).
Checked in classes whose name contains ``RMSNorm`` / ``RmsNorm`` (none of whose
``forward`` / ``_norm`` upcasts: a forward may upcast before calling ``_norm``) and in free
functions named ``*rms_norm*``. A warning: a port faithful to a reference that never upcasts
either matches it, which one file cannot show.
"""

from __future__ import annotations

import ast

from porting_kit.lint.astutil import dotted, keyword, names_in
from porting_kit.lint.codec_io import own_nodes

#: Epsilon literals: positive and small (a norm's eps is 1e-12 ... 1e-3).
_EPS_MAX = 1e-2
#: Calls that build a norm layer, by their last name part.
_NORM_BUILDERS = ("LayerNorm", "RMSNorm", "RmsNorm", "GroupNorm", "LlamaRMSNorm")
#: Functional norms whose epsilon is the keyword ``eps`` (or this positional index).
_FUNCTIONAL_EPS = {"layer_norm": 4, "rms_norm": 3, "group_norm": 4}
#: Receivers that hold a model config.
_CONFIG_WORDS = ("config", "cfg", "args", "hparams", "params")


def _eps_literal(node: ast.AST | None) -> bool:
    return (node is not None and node.__class__ is ast.Constant and isinstance(node.value, float)
            and 0.0 < node.value <= _EPS_MAX)


def _config_eps(node: ast.AST | None) -> bool:
    """``config.rms_norm_eps`` / ``self.config.layer_norm_epsilon`` / ``getattr(cfg, "norm_eps", ...)``."""
    if node is None:
        return False
    if node.__class__ is ast.Attribute and "eps" in node.attr.lower():
        receiver = dotted(node.value).lower().rpartition(".")[2]
        return any(w in receiver for w in _CONFIG_WORDS)
    if node.__class__ is ast.Call and dotted(node.func) == "getattr" and len(node.args) >= 2:
        key = node.args[1]
        return (key.__class__ is ast.Constant and isinstance(key.value, str) and "eps" in key.value.lower()
                and any(w in dotted(node.args[0]).lower() for w in _CONFIG_WORDS))
    return False


def _builder_eps(call: ast.Call) -> ast.AST | None:
    """The epsilon argument of a norm constructor call (``eps=``; LayerNorm/RMSNorm's 2nd positional)."""
    name = dotted(call.func).rpartition(".")[2]
    if not name.endswith(_NORM_BUILDERS):
        return None
    eps = keyword(call, "eps")
    if eps is None and name.endswith(("LayerNorm", "RMSNorm", "RmsNorm")) and len(call.args) >= 2:
        eps = call.args[1]
    return eps


def _functional_eps(call: ast.Call) -> ast.AST | None:
    """The epsilon argument of ``F.layer_norm`` / ``F.rms_norm`` / ``F.group_norm``."""
    name = dotted(call.func).rpartition(".")[2]
    if name not in _FUNCTIONAL_EPS:
        return None
    eps = keyword(call, "eps")
    index = _FUNCTIONAL_EPS[name]
    if eps is None and len(call.args) > index:
        eps = call.args[index]
    return eps


def _added_literal(node: ast.AST) -> ast.Constant | None:
    """``var + 1e-6`` (either order): the literal."""
    if node.__class__ is ast.BinOp and node.op.__class__ is ast.Add:
        for side in (node.left, node.right):
            if _eps_literal(side):
                return side
    return None


_STAT_WORDS = ("mean", "var", "sum", "std", "norm", "square", "pow")


def _root_eps_literals(func: ast.AST) -> list[ast.AST]:
    """Literal epsilons the forward adds under a root (``rsqrt(v + 1e-6)``, ``(v + 1e-6).sqrt()``,
    ``sqrt(v + 1e-6)``), adds to a statistic (``var = 1e-6 + torch.mean(x ** 2)``) or passes to a
    functional norm."""
    found = []
    for node in own_nodes(func):
        if node.__class__ is ast.BinOp and node.op.__class__ is ast.Add:
            lit = _added_literal(node)
            other = node.right if lit is node.left else node.left
            if lit is not None and any(w in name.lower() for name in names_in(other) for w in _STAT_WORDS):
                found.append(lit)
            continue
        if node.__class__ is not ast.Call:
            continue
        name = dotted(node.func).rpartition(".")[2]
        if name in ("rsqrt", "sqrt"):
            operands = list(node.args[:1])
            if node.func.__class__ is ast.Attribute and not node.args:
                operands = [node.func.value]
            for op in operands:
                lit = _added_literal(op)
                if lit is not None:
                    found.append(lit)
        else:
            eps = _functional_eps(node)
            if _eps_literal(eps):
                found.append(eps)
    return found


def _takes_eps(init: ast.AST) -> bool:
    """``__init__`` has an ``eps``-like parameter or stores one on self."""
    args = init.args
    if any("eps" in a.arg.lower() for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)):
        return True
    for node in own_nodes(init):
        if node.__class__ is ast.Assign:
            for t in node.targets:
                if t.__class__ is ast.Attribute and "eps" in t.attr.lower() and dotted(t.value) == "self":
                    return True
    return False


def _method(cls: ast.ClassDef, *names: str):
    return [s for s in cls.body if s.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef) and s.name in names]


def _weight_init(init: ast.AST) -> dict[str, str]:
    """``self.<w> = nn.Parameter(torch.ones(...))`` -> {"w": "ones"} (``zeros`` likewise)."""
    out = {}
    for node in own_nodes(init):
        if node.__class__ is not ast.Assign or len(node.targets) != 1:
            continue
        t = node.targets[0]
        if not (t.__class__ is ast.Attribute and dotted(t.value) == "self"):
            continue
        value = node.value
        if value.__class__ is ast.Call and dotted(value.func).rpartition(".")[2] == "Parameter" and value.args:
            value = value.args[0]
        if value.__class__ is ast.Call:
            name = dotted(value.func).rpartition(".")[2]
            if name in ("ones", "zeros"):
                out[t.attr] = name
    return out


def _is_one(node: ast.AST) -> bool:
    return node.__class__ is ast.Constant and not isinstance(node.value, bool) and node.value == 1


def _receiver(node: ast.AST) -> str:
    """``self.w`` for ``self.w`` / ``self.w.float()`` / ``self.w.to(x.dtype)`` (one method call
    peeled), else the dotted text."""
    return dotted(node.func.value if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute else node)


def _weight_aliases(func: ast.AST, weights: dict[str, str]) -> dict[str, str]:
    """Simple local aliases of a weight in ``func``: ``w = self.weight`` (or ``self.weight.float()``)
    -> {"w": "weight"}; a name bound anything else anywhere in the function is no alias."""
    bound: dict[str, set] = {}
    for node in own_nodes(func):
        cls = node.__class__
        if cls is ast.Assign or cls is ast.AnnAssign:
            targets = node.targets if cls is ast.Assign else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if sub.__class__ is ast.Name:
                        text = _receiver(node.value) if node.value is not None and t is sub else "?"
                        w = text[5:] if text.startswith("self.") and text[5:] in weights else None
                        bound.setdefault(sub.id, set()).add(w)
        elif cls in (ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr,
                     ast.comprehension):
            for field in ("target", "optional_vars"):
                for item in ([node] if cls not in (ast.With, ast.AsyncWith) else node.items):
                    t = getattr(item, field, None)
                    for sub in ast.walk(t) if t is not None else ():
                        if sub.__class__ is ast.Name:
                            bound.setdefault(sub.id, set()).add(None)
    args = func.args
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if a is not None:
            bound.setdefault(a.arg, set()).add(None)
    return {name: next(iter(ws)) for name, ws in bound.items() if len(ws) == 1 and None not in ws}


def _offset_gain_uses(func: ast.AST, weights: dict[str, str]) -> list[tuple[ast.AST, str]]:
    """``1 + self.w`` / ``self.w + 1`` (also ``self.w.float() + 1``, and through a simple local
    alias ``w = self.w`` ... ``1 + w``) -> (node, w); none under a condition (``1 + w if
    self.offset else w``, an ``if`` block): a module that picks its gain convention from a flag
    handles both."""
    aliases = _weight_aliases(func, weights)
    conditional = set()
    for node in own_nodes(func):
        if node.__class__ is ast.IfExp:
            conditional.update(id(n) for branch in (node.body, node.orelse) for n in ast.walk(branch))
        elif node.__class__ is ast.If:
            conditional.update(id(n) for stmt in (*node.body, *node.orelse) for n in ast.walk(stmt))
    out = []
    for node in own_nodes(func):
        if node.__class__ is ast.BinOp and node.op.__class__ is ast.Add and id(node) not in conditional:
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if _is_one(a):
                    text = _receiver(b)
                    if text in aliases:
                        out.append((node, aliases[text]))
                        continue
                    for w in weights:
                        if text == f"self.{w}":
                            out.append((node, w))
    return out


def on_class(lin, cls: ast.ClassDef) -> None:
    """PKN101 (a), PKN102 and PKN103 over one class (model code only).

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    cls : ast.ClassDef
    """
    enabled = lin.enabled
    if not lin.text_may_have(("norm", "eps")):
        return  # no norm here: the text lacks every word the three rules need (the AST decides)
    inits = _method(cls, "__init__")
    forwards = _method(cls, "forward", "_norm", "_forward")
    if not forwards:
        return
    init = inits[0] if inits else None
    if "PKN101" in enabled and init is not None and _takes_eps(init):
        for func in forwards:
            for lit in _root_eps_literals(func):
                lin.report("PKN101", lit, f"{cls.name} takes an epsilon but its {func.name} adds the literal "
                                          f"{lit.value!r}: the configured eps is ignored")
    if "PKN102" in enabled and init is not None:
        weights = _weight_init(init)
        if weights:
            for func in forwards:
                offset = _offset_gain_uses(func, weights)
                for node, w in offset:
                    if weights[w] == "ones":
                        lin.report("PKN102", node, f"{cls.name}.{w} starts at ones (a plain gain, as the checkpoint "
                                                   f"stores it) but {func.name} applies (1 + {w}): the scale doubles")
    if "PKN103" in enabled and "rmsnorm" in cls.name.lower().replace("_", "") \
            and not any(_upcasts(f) for f in forwards):  # forward may upcast before calling _norm
        for func in forwards:
            _missing_upcast(lin, func, cls.name)


def on_function(lin, func: ast.AST) -> None:
    """PKN101 (b): in one function, a norm built from the config's epsilon next to one built
    with a literal; PKN103 for a free ``*rms_norm*`` function.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Model code only.
    func : ast.FunctionDef or ast.AsyncFunctionDef
    """
    if "PKN103" in lin.enabled and "rms_norm" in func.name.lower() and lin.frame.kind != "class":
        _missing_upcast(lin, func, func.name)
    if "PKN101" not in lin.enabled or not lin.text_of_may_have(func, ("eps",)):
        return  # builds no norm with eps= (the text only rules out; the AST decides)
    configured, literal = False, []
    for node in own_nodes(func):
        if node.__class__ is not ast.Call:
            continue
        eps = _builder_eps(node)
        if eps is None:
            eps = _functional_eps(node)
        if eps is None:
            continue
        if _config_eps(eps):
            configured = True
        elif _eps_literal(eps):
            literal.append((node, eps))
    if configured:
        for call, eps in literal:
            lin.report("PKN101", eps, f"`{dotted(call.func)}(...)` gets the literal eps {eps.value!r} while this "
                                      "function builds its other norms from the config's eps")


def _squares_mean(func: ast.AST) -> ast.AST | None:
    """The first ``x.pow(2).mean(...)`` / ``(x * x).mean(...)`` / ``x.square().mean(...)`` /
    ``torch.mean(x ** 2, ...)`` (or ``.sum``, as tensor-parallel norms take it) in ``func``."""
    for node in own_nodes(func):
        if node.__class__ is not ast.Call:
            continue
        name = dotted(node.func).rpartition(".")[2]
        if name not in ("mean", "sum"):  # sum: tensor-parallel norms divide the summed squares later
            continue
        if node.func.__class__ is ast.Attribute and dotted(node.func.value) not in ("torch", "np", "numpy"):
            arg = node.func.value
        elif node.args:
            arg = node.args[0]
        else:
            continue
        if arg.__class__ is ast.Call and arg.func.__class__ is ast.Attribute and (
                (arg.func.attr == "pow" and arg.args and arg.args[-1].__class__ is ast.Constant
                 and arg.args[-1].value == 2) or arg.func.attr == "square"):
            return node  # x.pow(2), x.square(), torch.pow(x, 2), torch.square(x)
        if arg.__class__ is ast.BinOp and (
                (arg.op.__class__ is ast.Pow and arg.right.__class__ is ast.Constant and arg.right.value == 2)
                or (arg.op.__class__ is ast.Mult and dotted(arg.left) == dotted(arg.right) != "?")):
            return node
    return None


def _upcasts(func: ast.AST) -> bool:
    """``.float()``, ``.double()``, ``.to(torch.float32)``, ``dtype=torch.float32`` ... anywhere in ``func``,
    or a cast to the module's own compute dtype (``x.to(self.compute_dtype)``: a deliberate choice)."""
    for node in own_nodes(func):
        if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr in ("to", "type") \
                and any(_own_dtype(a) for a in node.args):
            return True
        if node.__class__ is ast.Attribute and node.attr in ("float32", "float64", "float", "double"):
            return True
        if node.__class__ is ast.Constant and node.value in ("float32", "float64"):
            return True
    return False


def _own_dtype(node: ast.AST) -> bool:
    """``self.dtype`` / ``self.compute_dtype``: the module's own compute dtype (not ``self.weight.dtype``)."""
    parts = dotted(node).split(".")
    return len(parts) == 2 and parts[0] == "self" and "dtype" in parts[1]


def _missing_upcast(lin, func: ast.AST, owner: str) -> None:
    mean = _squares_mean(func)
    if mean is None or _upcasts(func):
        return
    lin.report("PKN103", mean, f"{owner}: the mean of squares is taken in the input's dtype (no .float() / "
                               ".to(torch.float32) before it): in bf16 the RMS loses 8 bits")
