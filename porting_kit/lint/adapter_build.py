"""PK9xx adapter ``build()`` that extracts a request value it never forwards.

A TTS adapter's ``build(self, request, ...)`` turns the OpenAI speech request
into the engine prompt and ``tts_params``. A local assigned from the request
(``ref_audio = request.ref_audio``) that is never read again is a value the
user sent and the model never sees: voice cloning silently falls back to the
default voice. (vLLM-Omni's ruff F841 catches the same thing only when the
name is unused everywhere; this rule also names the request value.) Names read
by nested functions count as read; ``_`` is ignored.
"""

from __future__ import annotations

import ast


class BuildState:
    """Per ``build()``: the request parameter, names extracted from it, names read.

    Parameters
    ----------
    request : str
        Name of the request parameter (``request``, ``req`` or the first after ``self``).

    Attributes
    ----------
    extracted : dict of str to ast.AST
        Local name -> the ``Name`` node of its assignment from an expression reading the
        request (``ref_audio = request.ref_audio``); a later re-assignment replaces it.
    loads : set of str
        Names read anywhere in the ``build()`` body, nested functions included.
    """

    __slots__ = ("extracted", "loads", "request")

    def __init__(self, request: str) -> None:
        self.request = request
        self.extracted: dict[str, ast.AST] = {}
        self.loads: set[str] = set()


def on_function_enter(lin, frame, node: ast.FunctionDef) -> BuildState | None:
    """Start tracking a ``build()`` method of a class (PK901).

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The new function frame; its ``build`` slot is set when tracking starts.
    node : ast.FunctionDef
        The function being entered.

    Returns
    -------
    BuildState or None
        ``None`` unless ``node`` is a method named ``build`` with a parameter besides
        ``self`` / ``cls``; the engine then pushes it on ``lin.build_stack``.
    """
    if node.name != "build" or frame.parent is None or frame.parent.kind != "class":
        return None
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    if not params:
        return None
    request = next((p for p in params if p in ("request", "req")), params[0])
    state = BuildState(request)
    frame.build = state
    return state


def _reads(node: ast.AST, name: str) -> bool:
    return any(sub.__class__ is ast.Name and sub.id == name for sub in ast.walk(node))


def on_assign(lin, node: ast.AST) -> None:
    """Record names assigned, in the ``build()`` body itself, from an expression that reads
    the request parameter.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        ``lin.build_stack[-1]`` is the innermost ``build()`` (must be non-empty).
    node : ast.Assign or ast.AnnAssign
        Tuple / list targets are unpacked; ``_`` and attribute targets are ignored.
    """
    state = lin.build_stack[-1]
    if lin.frame.build is not state or node.value is None or not _reads(node.value, state.request):
        return
    targets = node.targets if node.__class__ is ast.Assign else [node.target]
    for target in targets:
        elts = target.elts if target.__class__ in (ast.Tuple, ast.List) else [target]
        for elt in elts:
            if elt.__class__ is ast.Name and elt.id != "_":
                state.extracted[elt.id] = elt


def on_function_exit(lin, frame) -> None:
    """Report PK901 for every extracted name never read, and pass the reads outwards.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The ``build()`` frame being left (its ``build`` slot holds the state).
    """
    state = frame.build
    for name, node in state.extracted.items():
        if name not in state.loads:
            lin.report("PK901", node, f"build() reads `{name}` from the request and never forwards it")
    if lin.build_stack:
        lin.build_stack[-1].loads |= state.loads
