"""PK2xx per-request state: state that outlives a step must be keyed by ``global_request_id``.

A generator / cache dict on ``self`` that ``forward`` indexes by a constant
(PK201) is shared by every request in the batch. ``_omni_req_id`` (PK202) is a
legacy key the vLLM-Omni engine never sets, so code that reads it silently
falls back; a fallback chain that ends in ``id(info)`` (PK203) keys state by a
recycled object id, which collapses requests or replays a finished request's
generator for the next one. PK204: a per-request generator/stream dict stored
in ``forward`` under a key that is not derived from a request id.
"""

from __future__ import annotations

import ast
import re

from porting_kit.lint.astutil import const_str, is_self_attr, names_in

LEGACY_KEY = "_omni_req_id"
_PER_REQUEST_WORDS = frozenset({"gen", "gens", "generator", "generators", "stream", "streams", "session",
                                "sessions", "request", "requests", "req", "reqs"})
_STATE_WORDS = _PER_REQUEST_WORDS | {"state", "states", "cache", "caches", "buffer", "buffers", "pending",
                                     "queue", "queues", "ctx", "context", "contexts"}


class _Words:
    """Match an attribute name by its ``_``-separated words (``freq_pad`` is not ``req``)."""

    def __init__(self, words: frozenset[str]) -> None:
        self.words = words

    def search(self, attr: str) -> bool:
        return any(w in self.words for w in attr.lower().split("_"))


_STATE_ATTR = _Words(_STATE_WORDS)
_PER_REQUEST_ATTR = _Words(_PER_REQUEST_WORDS)
_REQUEST_WORD = re.compile(r"(req|rid|request)", re.IGNORECASE)


def _in_forward(lin) -> bool:
    f = lin.frame
    return f.kind == "func" and (f.name == "forward" or f.name.startswith(("forward_", "_forward")))


def _constant_key(lin, node: ast.AST, attr: str, key: ast.AST) -> None:
    if key.__class__ is not ast.Constant:
        return
    if isinstance(key.value, str) or (key.value is None) or \
            (isinstance(key.value, int) and _PER_REQUEST_ATTR.search(attr)):
        lin.report("PK201", node, f"`self.{attr}[{key.value!r}]` in forward(): one entry shared by every "
                                  "request in the batch")


def _keyed_by_request(lin, key: ast.AST) -> bool:
    words = names_in(key)
    assigned = lin.frame.assigned or {}
    for word in list(words):
        value = assigned.get(word)
        if value is not None:
            words |= names_in(value)
    return any(_REQUEST_WORD.search(w) for w in words)


def on_subscript(lin, node: ast.Subscript) -> None:
    """PK202 for a ``[_omni_req_id]`` lookup anywhere; PK201 / PK204 inside ``forward()``.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.Subscript
        Inside ``forward`` / ``forward_*`` / ``_forward*``, a subscript of a ``self``
        attribute whose name has a state word (``gens``, ``cache``, ``state``...): a
        constant key is PK201 (strings and ``None`` always; ints only for per-request
        names), a store under a key that mentions no request id (directly or through a
        local assigned in ``forward``) is PK204.
    """
    key = node.slice
    if const_str(key) == LEGACY_KEY:
        lin.report("PK202", node, f"`{LEGACY_KEY}` is never set by the engine; the lookup always misses")
        return
    if not _in_forward(lin):
        return
    attr = is_self_attr(node.value)
    if attr is None or not _STATE_ATTR.search(attr):
        return
    if key.__class__ is ast.Constant:
        _constant_key(lin, node, attr, key)
    elif node.ctx.__class__ is ast.Store and _PER_REQUEST_ATTR.search(attr) and not _keyed_by_request(lin, key):
        lin.report("PK204", node, f"`self.{attr}[...]` is stored under a key not derived from the request id")


def _dict_call(lin, node: ast.Call) -> None:
    args = node.args
    if not args:
        return
    if const_str(args[0]) == LEGACY_KEY:
        lin.report("PK202", node, f"`{LEGACY_KEY}` is never set by the engine; the lookup always misses")
        return
    if len(args) > 1 and args[1].__class__ is ast.Call and args[1].func.__class__ is ast.Name \
            and args[1].func.id == "id" and node.func.attr == "get":
        lin.report("PK203", node, "request key falls back to id(...): a recycled object id merges requests")
        return
    if _in_forward(lin):
        attr = is_self_attr(node.func.value)
        if attr is not None and _STATE_ATTR.search(attr):
            _constant_key(lin, node, attr, args[0])


CALLS = {"get": _dict_call, "pop": _dict_call, "setdefault": _dict_call}


def on_boolop(lin, node: ast.BoolOp) -> None:
    """PK203 for ``a or b or id(...)``: a request key that falls back to an object id.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.BoolOp
        Flagged when it is an ``or`` whose last operand is a call of the builtin ``id``.
    """
    last = node.values[-1]
    if isinstance(node.op, ast.Or) and last.__class__ is ast.Call and last.func.__class__ is ast.Name \
            and last.func.id == "id":
        lin.report("PK203", node, "request key falls back to id(...): a recycled object id merges requests")


def on_assign(lin, node: ast.AST) -> None:
    """Remember simple assignments in forward() so PK204 can see what a key was built from.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.Assign or ast.AnnAssign
        Plain-name targets only; stored in ``lin.frame.assigned`` (name -> value node),
        the last assignment winning.
    """
    if not _in_forward(lin) or node.value is None:
        return
    frame = lin.frame
    if frame.assigned is None:
        frame.assigned = {}
    targets = node.targets if node.__class__ is ast.Assign else [node.target]
    for target in targets:
        if target.__class__ is ast.Name:
            frame.assigned[target.id] = node.value
