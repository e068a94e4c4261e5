"""PK3xx host-device sync inside the loops of hot paths.

Each ``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()`` blocks the host
until the device catches up; inside the per-step loops of ``forward``,
``*decode*``, ``compute_logits`` or a ``*stream*`` generator, that is one
stall per iteration (10 steps x 60 frames x 4 scalars is 2,400 syncs per
request); a generator counts when it is a method of a module-like class (it
defines ``forward`` or derives from ``*Module`` / ``*Model*``), so the serving
layer's generators over host tensors are not flagged.
``torch.cuda.synchronize()`` (and ``.synchronize()`` on streams /
events) in such a loop is PK302. A call in the ``iter`` of a ``for`` runs once
and is not flagged; the test of a ``while`` runs every iteration and is.
"""

from __future__ import annotations

import ast

from porting_kit.lint.astutil import dotted

_SYNC_METHODS = ("item", "cpu", "tolist", "numpy")


def _stream_generator(frame) -> bool:
    """A ``*stream*`` / ``*chunk*`` / ``*generate*`` generator method of a module-like class
    (one that defines ``forward`` or derives from ``*Module`` / ``*Model*``)."""
    name = frame.name
    if not (frame.is_generator and ("stream" in name or "chunk" in name or "generate" in name)):
        return False
    cls = frame.enclosing_class()
    if cls is None:
        return False
    node = cls.node
    if any(s.__class__ is ast.FunctionDef and s.name == "forward" for s in node.body):
        return True
    return any("Module" in dotted(b) or "Model" in dotted(b) for b in node.bases)


def _report_or_defer(lin, code: str, node: ast.AST, message: str) -> None:
    frame = lin.frame
    if frame.kind != "func" or not frame.loops or frame.training:
        return
    if frame.hot:
        lin.report(code, node, message)
    elif "stream" in frame.name or "chunk" in frame.name or "generate" in frame.name:
        if frame.pending_sync is None:
            frame.pending_sync = []
        frame.pending_sync.append((code, node, message))


def _sync(lin, node: ast.Call) -> None:
    func = node.func
    if func.__class__ is not ast.Attribute or node.args:
        return
    _report_or_defer(lin, "PK301", node, f"`.{func.attr}()` in a loop of {lin.frame.name}(): one "
                                         "host-device sync per iteration")


def _synchronize(lin, node: ast.Call) -> None:
    if node.func.__class__ is ast.Attribute:
        _report_or_defer(lin, "PK302", node, f"synchronize() in a loop of {lin.frame.name}(): the host "
                                             "waits for the device every iteration")


CALLS = {name: _sync for name in _SYNC_METHODS}
CALLS["synchronize"] = _synchronize


def on_scope_exit(lin, frame) -> None:
    """A ``*stream*`` function turned out to be a generator: report its deferred syncs.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The function being left. Its ``pending_sync`` entries (PK301 / PK302 found in
        loops of a ``*stream*`` / ``*chunk*`` / ``*generate*`` function) are reported only
        when it is a generator method of a module-like class (it defines ``forward`` or
        a base's name contains ``Module`` / ``Model``).
    """
    if frame.pending_sync and _stream_generator(frame):
        for code, node, message in frame.pending_sync:
            lin.report(code, node, message)
