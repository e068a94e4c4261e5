"""PK7xx RoPE buffers that nobody re-initialises after a meta-device build (PK701); RoPE
config keys read with a fallback that transformers 5 moved (PK702).

PK702: ``getattr(config, "rope_theta", 10000.0)`` (or ``"rope_scaling"``) with a
non-``None`` default, in a file whose code never reads ``rope_parameters`` (an attribute,
name or key; a comment or docstring naming it reads nothing). transformers 5
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


def _reads_rope_parameters(lin) -> bool:
    """Whether the file's code reads ``rope_parameters`` (``config.rope_parameters``,
    ``getattr(config, "rope_parameters", None)``, ``cfg["rope_parameters"]``) or takes part in
    transformers 5's rope-parameters API (``compute_default_rope_parameters``); a comment,
    docstring or message naming it reads nothing."""
    return lin.file_has(("rope_parameters",))


def _moved_key_fallback(lin, node: ast.Call) -> None:
    """PK702: ``getattr(config, "rope_theta", 10000.0)`` in a file that never reads
    ``rope_parameters``: on transformers 5 the attribute is gone and the default wins."""
    if len(node.args) != 3 or _reads_rope_parameters(lin):
        return
    key = const_str(node.args[1])
    default = node.args[2]
    if key not in _MOVED_KEYS or (default.__class__ is ast.Constant and default.value is None):
        return
    lin.report("PK702", node, f"`{key}` read with a fallback: transformers 5 keeps it in "
                              "config.rope_parameters, so the default is used silently")


CALLS = {"register_buffer": _register_buffer, "copy_": _copy, "getattr": _moved_key_fallback}


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
