"""PK2xx per-request state: state that outlives a step must be keyed by ``global_request_id``.

A generator / cache dict on ``self`` that ``forward`` indexes by a constant
(PK201) is shared by every request in the batch. ``_omni_req_id`` (PK202) is a
legacy key the vLLM-Omni engine never sets, so code that reads it silently
falls back; a fallback chain that ends in ``id(info)`` (PK203) keys state by a
recycled object id, which collapses requests or replays a finished request's
generator for the next one. PK204: a per-request generator/stream dict stored
in ``forward`` under a key that is not derived from a request id.

PK205: per-request streaming state popped on the first chunk. A chunk handler
(``*chunk*`` / ``*stream*`` in its name, a ``*chunk*`` parameter, or a ``forward``
whose code names chunks; not a generator, not a teardown hook such as
``on_requests_finished``) that runs
``self.<state>.pop(request_id)`` or ``del self.<state>[req_id]`` outside any
``finished`` / ``is_last`` / ``last_chunk`` / ``eos`` / error condition drops the
decoder cache after the first chunk: every later chunk decodes without its left
context (clicks at every boundary). A pop whose dict is written back in the same
function (take, update, put back) is left alone.
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


# ---- PK205: per-request streaming state dropped while the stream still runs ----------------

#: Words of a condition that only holds once a request's stream is over (or failed).
_END_WORDS = frozenset({"finish", "finished", "finishing", "last", "final", "done", "eos", "end", "ended",
                        "terminal", "complete", "completed", "stop", "stopped", "abort", "aborted", "error",
                        "cancel", "cancelled", "canceled", "expired", "stale", "flush", "close", "closed",
                        "exhausted", "remaining", "eof", "timeout", "evict", "evicted", "free", "fail", "failed",
                        "failure", "dead", "orphan", "orphaned"})
#: Function-name words of teardown / setup code (popping there is the right place).
_TEARDOWN = frozenset({"finish", "finished", "cleanup", "clean", "release", "free", "evict", "abort", "remove",
                       "reset", "close", "clear", "drop", "end", "done", "stop", "cancel", "teardown", "expire",
                       "discard", "flush", "gc", "delete", "pop", "purge", "prune", "start", "init", "begin",
                       "register", "setup", "prepare", "open", "fail", "error", "finalize", "complete"})
_NEW_REQUEST = re.compile(r"new_req", re.IGNORECASE)


def _ends_stream(node: ast.AST) -> bool:
    """Whether an expression mentions an end-of-stream / failure word (``is_last``, ``finished``)."""
    for word in names_in(node):
        if any(part in _END_WORDS for part in re.split(r"[_\W]+", word.lower())):
            return True
    return False


def _handles_chunk(lin, func: ast.AST) -> bool:
    """A function that serves one chunk of a stream: ``*chunk*`` / ``*stream*`` in its name, a
    ``*chunk*`` parameter, or a ``forward`` whose code names chunks (vLLM-Omni's async-chunk
    code2wav); not a teardown hook, not a generator (that one runs the whole stream)."""
    name = func.name.lower()
    args = func.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if not ("chunk" in name or "stream" in name or any("chunk" in p.lower() for p in params)
            or (name == "forward" and "chunk" in lin.words_of(func))):
        return False
    if _TEARDOWN.intersection(name.strip("_").split("_")) or _NEW_REQUEST.search(name):
        return False
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if node.__class__ in (ast.Yield, ast.YieldFrom):
            return False
        if node.__class__ not in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return True


def _live_request_key(attr: str, key: ast.AST) -> bool:
    """A request id key (``req_id``, ``request_id``) of a dict of live state: not a ``failed_req_id``,
    not a ``completed_ids`` / ``finished_requests`` bookkeeping dict."""
    if not any(_REQUEST_WORD.search(w) for w in names_in(key)):
        return False
    return not _ends_stream(key) and not _END_WORDS.intersection(re.split(r"[_\W]+", attr.lower()))


def _dropped_state(stmt: ast.AST) -> list[tuple[ast.AST, str]]:
    """``self.<attr>.pop(<request id>...)`` / ``del self.<attr>[<request id>]`` in one statement.

    ``return self.<attr>.pop(<request id>, ...)`` is not one: the value is handed to the caller (a
    one-shot queue of ready chunks), not decoder state dropped."""
    found = []
    if stmt.__class__ is ast.Return and stmt.value.__class__ is ast.Call \
            and stmt.value.func.__class__ is ast.Attribute and stmt.value.func.attr == "pop":
        return found
    if stmt.__class__ is ast.Delete:
        for target in stmt.targets:
            if target.__class__ is ast.Subscript:
                attr = is_self_attr(target.value)
                if attr is not None and _live_request_key(attr, target.slice):
                    found.append((stmt, attr))
        return found
    for node in ast.walk(stmt):
        if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr == "pop" \
                and node.args:
            attr = is_self_attr(node.func.value)
            if attr is not None and _live_request_key(attr, node.args[0]):
                found.append((node, attr))
    return found


def _stored_attrs(func: ast.AST) -> set[str]:
    """``self.<attr>`` dicts written in ``func`` (``self.x[k] = v``, ``.setdefault``, ``.update``)."""
    out = set()
    for node in ast.walk(func):
        if node.__class__ is ast.Subscript and node.ctx.__class__ is ast.Store:
            attr = is_self_attr(node.value)
        elif node.__class__ is ast.Call and node.func.__class__ is ast.Attribute \
                and node.func.attr in ("setdefault", "update", "__setitem__"):
            attr = is_self_attr(node.func.value)
        else:
            continue
        if attr is not None:
            out.add(attr)
    return out


def _unguarded_drops(body: list, guarded: bool, out: list) -> None:
    """Collect the state drops of ``body`` that no end-of-stream condition guards."""
    for stmt in body:
        cls = stmt.__class__
        if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            continue
        if cls is ast.If:
            here = guarded or _ends_stream(stmt.test)
            _unguarded_drops(stmt.body, here, out)
            _unguarded_drops(stmt.orelse, here, out)
            if here and stmt.body and stmt.body[-1].__class__ in (ast.Return, ast.Raise, ast.Continue, ast.Break):
                guarded = True  # `if not is_last: return` - the rest runs on the last chunk only
        elif cls in (ast.For, ast.AsyncFor, ast.While):
            head = stmt.test if cls is ast.While else stmt.iter
            _unguarded_drops(stmt.body, guarded or _ends_stream(head), out)
            _unguarded_drops(stmt.orelse, guarded, out)
        elif cls in (ast.With, ast.AsyncWith):
            _unguarded_drops(stmt.body, guarded, out)
        elif cls is ast.Try or cls.__name__ == "TryStar":
            _unguarded_drops(stmt.body, guarded, out)
            _unguarded_drops(stmt.orelse, guarded, out)
            # except / finally: error or teardown paths, not the steady state of a stream
        elif cls is ast.Match:
            for case in stmt.cases:
                _unguarded_drops(case.body, guarded or _ends_stream(case.pattern), out)
        elif not guarded:
            drops = _dropped_state(stmt)
            if drops and not any(n.__class__ in (ast.IfExp, ast.BoolOp) and _ends_stream(n)
                                 for n in ast.walk(stmt)):
                out.extend(drops)


def on_function(lin, func: ast.AST) -> None:
    """PK205: per-request streaming state popped in a chunk handler on every chunk.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Model code only.
    func : ast.FunctionDef or ast.AsyncFunctionDef
        Checked when it handles a chunk (:func:`_handles_chunk`): a
        ``self.<attr>.pop(<request id>)`` or ``del self.<attr>[<request id>]`` that no
        ``finished`` / ``is_last`` / ``last_chunk`` / ``eos`` / error condition guards
        (an enclosing ``if``, ``while`` or loop over finished ids, an earlier
        ``if not is_last: return``, an ``except`` / ``finally`` block) is reported,
        unless the function writes the same dict back (pop, update, put back).
    """
    if "PK205" not in lin.enabled or not _handles_chunk(lin, func):
        return
    drops: list = []
    _unguarded_drops(func.body, False, drops)
    if not drops:
        return
    stored = _stored_attrs(func)
    for node, attr in drops:
        if attr in stored:
            continue
        lin.report("PK205", node, f"`self.{attr}` entry of the request dropped in a chunk handler with no "
                                  "finished / last-chunk guard: the next chunk starts from scratch")
