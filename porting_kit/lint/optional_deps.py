"""PK8xx optional-dependency fallback patched at module import time.

``try: import torchaudio`` / ``except ImportError: <patch>`` at module level
runs when the module is imported (often by the model registry, for every
model), and the patch only shows its effect in an environment without the
package, usually after deployment. The fallback belongs at the top of
``load_weights()`` (or the first call that needs it). A *patch* is what the
handler changes outside itself: an attribute or item assignment
(``torchaudio.load = ...``, ``sys.modules["x"] = stub``), ``setattr(...)``, or a
call whose name says patch / monkeypatch / install. A handler that only binds
a name (``flash_attn = None``), logs, or raises is not a patch.
"""

from __future__ import annotations

import ast

from porting_kit.lint.astutil import dotted

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"})


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    t = handler.type
    if t is None:
        return True
    names = t.elts if t.__class__ is ast.Tuple else [t]
    return any(dotted(n).rpartition(".")[2] in _IMPORT_ERRORS for n in names)


def _patch_in(body: list[ast.stmt]) -> ast.AST | None:
    for stmt in body:
        for node in ast.walk(stmt):
            cls = node.__class__
            if cls in (ast.Assign, ast.AugAssign, ast.AnnAssign):
                targets = node.targets if cls is ast.Assign else [node.target]
                for target in targets:
                    if target.__class__ in (ast.Attribute, ast.Subscript):
                        return node
            elif cls is ast.Call:
                name = dotted(node.func).lower()
                last = name.rpartition(".")[2]
                if last == "setattr" or "patch" in last or last.startswith("install"):
                    return node
    return None


def on_try(lin, node: ast.Try) -> None:
    """Report PK801 for a module- or class-level ``try`` whose import fallback patches.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Called only outside function bodies (the engine skips those).
    node : ast.Try
        Considered when its body imports something; the first handler that catches an
        import error (``ImportError``, ``ModuleNotFoundError``, ``Exception``,
        ``BaseException``, ``OSError`` or a bare ``except``) and patches (module
        docstring) is reported at the patching statement, once per ``try``.
    """
    if not any(s.__class__ in (ast.Import, ast.ImportFrom) for s in node.body):
        return
    for handler in node.handlers:
        if not _catches_import_error(handler):
            continue
        patch = _patch_in(handler.body)
        if patch is not None:
            lin.report("PK801", patch, "fallback patch for a missing optional dependency runs at import "
                                       "time")
            return
