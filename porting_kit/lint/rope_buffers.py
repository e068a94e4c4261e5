"""PK7xx RoPE buffers that nobody re-initialises after a meta-device build (PK701); RoPE
config keys read with a fallback that transformers 5 moved (PK702).

PK702: a ``rope_theta`` (or ``rope_scaling``) read whose absence falls back to a literal
(``getattr(config, "rope_theta", 10000.0)``, ``getattr(...) or 10000.0``, a ``hasattr``
conditional, ``try`` / ``except AttributeError``), in a file whose code never reads
``rope_parameters`` (an attribute, name, key, getattr / hasattr / ``in`` test or a
``*rope_parameters*`` call; a comment, docstring or plain string naming it reads nothing). transformers 5
keeps both under ``config.rope_parameters``; the attribute lookup falls back and the
port runs with the default base (``rope.theta_mismatch`` at check time).

``register_buffer("inv_freq", ..., persistent=False)`` is not in the
checkpoint. When the module is built on the meta device (transformers'
``from_pretrained``, ``init_empty_weights``, remote-code models) the buffer is
materialised empty and holds garbage unless something recomputes it.
transformers re-initialises it only for classes named ``*RotaryEmbedding``
that keep ``original_inv_freq``. The rule flags a class that registers a
non-persistent ``inv_freq`` without that contract and without any method
other than ``__init__`` that writes ``self.inv_freq`` (assignment or
``.copy_``), in a file whose models transformers builds on the meta device
(it defines a ``*PreTrainedModel`` subclass, or uses ``init_empty_weights``
or the ``"meta"`` device). Every test reads the AST, never the source text. A class that keeps ``original_inv_freq`` but whose
name lacks ``RotaryEmbedding`` (``...RotatoryEmbedding``) breaks that contract
and is flagged wherever it lives.
"""

from __future__ import annotations

import ast

from porting_kit.lint.astutil import const_str, dotted, is_false, keyword


class RopeState:
    """Per-class: candidate buffers and whether the class re-initialises them."""

    __slots__ = ("candidates", "hf_contract", "reinit")

    def __init__(self) -> None:
        self.candidates: list[ast.Call] = []
        self.reinit = False
        self.hf_contract = False


def _state(lin):
    cls = lin.frame.enclosing_class()
    if cls is None:
        return None
    if cls.rope is None:
        cls.rope = RopeState()
    return cls.rope


def _register_buffer(lin, node: ast.Call) -> None:
    name = const_str(node.args[0]) if node.args else const_str(keyword(node, "name"))
    if name is None or not name.endswith("inv_freq"):
        return
    persistent = keyword(node, "persistent")
    if persistent is None and len(node.args) >= 3:
        persistent = node.args[2]
    state = _state(lin)
    if state is None:
        return
    if name == "original_inv_freq":
        state.hf_contract = True
    elif lin.frame.name != "__init__":
        state.reinit = True
    elif is_false(persistent) and name == "inv_freq":
        state.candidates.append(node)


def _copy(lin, node: ast.Call) -> None:
    func = node.func
    if func.__class__ is ast.Attribute and dotted(func.value).endswith("inv_freq"):
        state = _state(lin)
        if state is not None:
            state.reinit = True


#: Config keys transformers 5 moved under ``config.rope_parameters``.
_MOVED_KEYS = ("rope_theta", "rope_scaling")
#: Handlers that catch a missing attribute (``except AttributeError:`` and its bases).
_ABSENCE_ERRORS = ("AttributeError", "Exception", "BaseException")
_KEY = "rope_parameters"


def _is_key(node: ast.AST | None) -> bool:
    return const_str(node) == _KEY


def _reads_rope_node(node: ast.AST) -> bool:
    """One node that reads rope parameters: ``x.rope_parameters``, a name / argument /
    keyword / definition / import holding ``rope_parameters`` (``compute_default_rope_parameters``),
    ``cfg["rope_parameters"]``, ``getattr(c, "rope_parameters")`` / ``hasattr`` / ``.get(...)``,
    ``"rope_parameters" in cfg``. A string literal elsewhere (an assignment, a message) reads nothing."""
    cls = node.__class__
    if cls is ast.Attribute:
        return _KEY in node.attr
    if cls is ast.Name:
        return _KEY in node.id
    if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        return _KEY in node.name
    if cls is ast.arg:
        return _KEY in node.arg
    if cls is ast.keyword:
        return node.arg is not None and _KEY in node.arg
    if cls is ast.alias:
        return _KEY in node.name or (node.asname is not None and _KEY in node.asname)
    if cls is ast.Subscript:
        return _is_key(node.slice)
    if cls is ast.Call:
        name = dotted(node.func).rpartition(".")[2]
        if name in ("getattr", "hasattr") and len(node.args) >= 2:
            return _is_key(node.args[1])
        if name in ("get", "pop", "setdefault") and node.func.__class__ is ast.Attribute and node.args:
            return _is_key(node.args[0])
        return False
    if cls is ast.Compare:
        return any(op.__class__ in (ast.In, ast.NotIn) for op in node.ops) and _is_key(node.left)
    return False


def _reads_rope_parameters(lin) -> bool:
    """Whether the file's code reads ``rope_parameters`` (:func:`_reads_rope_node` anywhere) or
    takes part in transformers 5's rope-parameters API (``compute_default_rope_parameters``); a
    comment, docstring, message or plain string assignment naming it reads nothing."""
    hit = lin._file_has.get("<rope_parameters>")
    if hit is None:
        hit = lin.text_may_have((_KEY,)) and any(_reads_rope_node(n) for n in ast.walk(lin.tree))
        lin._file_has["<rope_parameters>"] = hit
    return hit


def _literal(node: ast.AST | None) -> bool:
    """A literal other than ``None``: ``10000.0``, ``-1``, ``{}``, ``{"type": "linear"}``."""
    if node is None:
        return False
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return value is not None


def _getattr_key(node: ast.AST) -> str | None:
    """``getattr(x, "rope_theta")`` / ``getattr(x, "rope_theta", <default>)`` -> the key."""
    if node.__class__ is ast.Call and dotted(node.func) == "getattr" and len(node.args) in (2, 3):
        key = const_str(node.args[1])
        if key in _MOVED_KEYS:
            return key
    return None


def _attr_read_key(node: ast.AST) -> str | None:
    """``x.rope_theta`` (a load) or ``getattr(x, "rope_theta"...)`` -> the key."""
    if node.__class__ is ast.Attribute and node.attr in _MOVED_KEYS and node.ctx.__class__ is ast.Load:
        return node.attr
    return _getattr_key(node)


def _hasattr_key(test: ast.AST) -> tuple[str | None, bool]:
    """``hasattr(x, "rope_theta")`` -> ("rope_theta", True); ``not hasattr(...)`` -> (.., False)."""
    positive = True
    if test.__class__ is ast.UnaryOp and test.op.__class__ is ast.Not:
        test, positive = test.operand, False
    if test.__class__ is ast.Call and dotted(test.func) == "hasattr" and len(test.args) == 2:
        key = const_str(test.args[1])
        if key in _MOVED_KEYS:
            return key, positive
    return None, positive


def _catches_absence(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    if kind is None:
        return True
    kinds = kind.elts if kind.__class__ is ast.Tuple else [kind]
    return any(dotted(k).rpartition(".")[2] in _ABSENCE_ERRORS for k in kinds)


def _targets(stmt: ast.stmt) -> list[str]:
    targets = stmt.targets if stmt.__class__ is ast.Assign else [stmt.target]
    return [dotted(t) for t in targets]


def _literal_targets(stmts: list[ast.stmt]) -> set[str]:
    """Targets the statements assign a literal to (``theta = 10000.0`` -> {"theta"})."""
    return {t for s in stmts if s.__class__ in (ast.Assign, ast.AnnAssign) and _literal(s.value)
            for t in _targets(s)}


def _reads_into(stmts: list[ast.stmt], fallback: set[str]):
    """(read, key) for each moved-key read assigned to a target that ``fallback`` also names."""
    for stmt in stmts:
        if stmt.__class__ not in (ast.Assign, ast.AnnAssign) or stmt.value is None \
                or not fallback.intersection(_targets(stmt)):
            continue
        for sub in ast.walk(stmt.value):
            key = _attr_read_key(sub)
            if key is not None:
                yield sub, key


def _fallbacks(tree: ast.AST):
    """(node, key) for every read of a moved key whose absence falls back to a literal:
    ``getattr(c, "rope_theta", 10000.0)`` (any non-``None`` default), ``getattr(c, "rope_theta",
    None) or 10000.0``, ``c.rope_theta if hasattr(c, "rope_theta") else 10000.0`` (and the
    ``if`` / ``else`` statement), ``try: t = c.rope_theta`` / ``except AttributeError: t = 10000.0``."""
    for node in ast.walk(tree):
        cls = node.__class__
        if cls is ast.Call:
            key = _getattr_key(node)
            if key is not None and len(node.args) == 3 and not (
                    node.args[2].__class__ is ast.Constant and node.args[2].value is None):
                yield node, key
        elif cls is ast.BoolOp and node.op.__class__ is ast.Or:
            for i, value in enumerate(node.values[:-1]):
                key = _getattr_key(value)
                if key is not None and any(_literal(v) for v in node.values[i + 1:]):
                    yield value, key
        elif cls is ast.IfExp or cls is ast.If:
            key, positive = _hasattr_key(node.test)
            if key is None:
                continue
            if cls is ast.IfExp:
                read, other = (node.body, node.orelse) if positive else (node.orelse, node.body)
                if _attr_read_key(read) == key and _literal(other):
                    yield read, key
            else:
                read, other = (node.body, node.orelse) if positive else (node.orelse, node.body)
                for sub, sub_key in _reads_into(read, _literal_targets(other)):
                    if sub_key == key:
                        yield sub, key
        elif cls is ast.Try or cls.__name__ == "TryStar":
            fallback = set()
            for handler in node.handlers:
                if _catches_absence(handler):
                    fallback |= _literal_targets(handler.body)
            if fallback:
                yield from _reads_into(node.body, fallback)


def on_module(lin) -> None:
    """PK702 over the whole file: a ``rope_theta`` / ``rope_scaling`` read whose absence falls
    back to a literal (:func:`_fallbacks`), in a file whose code never reads ``rope_parameters``:
    on transformers 5 the attribute is gone and the default wins silently.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Model code only; every test reads the AST.
    """
    if not lin.text_may_have(_MOVED_KEYS) or _reads_rope_parameters(lin):
        return
    for node, key in _fallbacks(lin.tree):
        lin.report("PK702", node, f"`{key}` read with a fallback: transformers 5 keeps it in "
                                  "config.rope_parameters, so the default is used silently")


CALLS = {"register_buffer": _register_buffer, "copy_": _copy}


def on_assign(lin, node: ast.AST) -> None:
    """Note writes of ``self.inv_freq`` / ``self.original_inv_freq`` in the enclosing class.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.Assign or ast.AnnAssign
        ``self.original_inv_freq = ...`` marks the transformers contract; an assignment to
        an attribute ending in ``inv_freq`` in a method other than ``__init__`` marks the
        class as re-initialising its buffer.
    """
    targets = node.targets if node.__class__ is ast.Assign else [node.target]
    for target in targets:
        if target.__class__ is not ast.Attribute:
            continue
        text = dotted(target)
        if text == "self.original_inv_freq":
            state = _state(lin)
            if state is not None:
                state.hf_contract = True
        elif text.endswith("inv_freq") and lin.frame.kind == "func" and lin.frame.name != "__init__":
            state = _state(lin)
            if state is not None:
                state.reinit = True


def _outside_inv_freq(node: ast.AST) -> bool:
    """``module.inv_freq`` / ``module.inv_freq.data`` (any receiver but ``self``)."""
    if node.__class__ is ast.Attribute and node.attr == "data":
        node = node.value
    return node.__class__ is ast.Attribute and node.attr == "inv_freq" and not dotted(node).startswith("self.")


def _file_reinits_other_modules(tree: ast.Module) -> bool:
    """Whether the file writes some module's ``inv_freq`` from outside that module
    (``init.copy_(module.inv_freq, ...)``, ``module.inv_freq = ...``,
    ``module.inv_freq.copy_(...)``: a model's ``_init_weights`` or loader, as transformers 5's
    own modeling files do per module class); then a class without its own re-initialisation
    is not flagged."""
    for node in ast.walk(tree):
        cls = node.__class__
        if cls is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr == "copy_":
            if (node.args and _outside_inv_freq(node.args[0])) or _outside_inv_freq(node.func.value):
                return True
        elif cls is ast.Assign or cls is ast.AugAssign or cls is ast.AnnAssign:
            targets = node.targets if cls is ast.Assign else [node.target]
            if any(_outside_inv_freq(t) for t in targets):
                return True
    return False


def on_class_exit(lin, frame) -> None:
    """Report PK701 for a class's non-persistent ``inv_freq`` that nothing re-initialises.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The class frame being left (its ``rope`` slot holds the :class:`RopeState`).

    Notes
    -----
    A class that keeps ``original_inv_freq`` (or defines
    ``compute_default_rope_parameters``) is fine only when its name contains
    ``RotaryEmbedding``: transformers' ``PreTrainedModel._init_weights`` recognises rotary
    modules by that name and ``original_inv_freq`` (transformers 5, ``modeling_utils.py``).
    Other classes are flagged only in files :meth:`Linter.meta_hint` says are built on
    the meta device.
    """
    state = frame.rope
    if state is None or not state.candidates or state.reinit:
        return
    if state.hf_contract or any(s.__class__ is ast.FunctionDef and s.name == "compute_default_rope_parameters"
                                for s in frame.node.body):
        if "RotaryEmbedding" in frame.name:
            return
        for node in state.candidates:
            lin.report("PK701", node, f"{frame.name} keeps original_inv_freq but its name lacks "
                                      "'RotaryEmbedding', so transformers' _init_weights never re-initialises it")
        return
    if not lin.meta_hint() or _file_reinits_other_modules(lin.tree):
        return
    for node in state.candidates:
        lin.report("PK701", node, f"{frame.name}.inv_freq is non-persistent and never re-initialised: "
                                  "garbage after a meta-device build")
