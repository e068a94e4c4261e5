"""The single-pass Python engine: one ``ast.parse`` and one traversal per file.

The traversal keeps a stack of :class:`Frame` objects (module, class,
function) with the context the rules need (is this ``forward``? how many loops
deep? under ``torch.autocast``?) and dispatches each node to the rule families
that care about its type. Calls are dispatched by their final name
(``.item()`` -> the host-sync family), so a node costs one dict lookup.

Comments are not tokenized: ``# noqa`` is read by a text scan of the few lines
that have findings (:func:`porting_kit.lint.finding.apply_noqa`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import PurePath

from porting_kit.lint import (
    adapter_build,
    codec_io,
    codec_precision,
    global_rng,
    host_sync,
    norms,
    optional_deps,
    request_state,
    rope_buffers,
    stereo,
    test_markers,
    truthiness,
)
from porting_kit.lint.astutil import code_words, code_words_by_scope, dotted
from porting_kit.lint.finding import LintFinding, apply_noqa

_HOST_SIDE_PREFIXES = ("tokenization_", "processing_", "feature_extraction_", "image_processing_",
                       "video_processing_")
_NON_MODEL_DIRS = frozenset({"tests", "test", "examples", "example", "benchmarks", "benchmark",
                             "scripts", "docs", "tools"})


class Frame:
    """Context of one module, class or function body during the traversal.

    Parameters
    ----------
    kind : {"module", "class", "func"}
    name : str
        The class or function name (``"<module>"`` for the file).
    node : ast.AST or None
        The ``Module`` / ``ClassDef`` / ``FunctionDef`` node.
    parent : Frame or None
        The enclosing frame (``None`` for the module).

    Attributes
    ----------
    hot : bool
        Functions whose loops run per step (``forward``, ``forward_*``, ``_forward*``,
        ``*decode*``, ``compute_logits``, and functions nested in a hot one).
    per_request : bool
        Functions that serve a request: hot ones plus functions below module level
        (methods, nested functions) named ``sample*``, ``*generate*``, ``*stream*``, ``step``.
    loops : int
        Loop / comprehension nesting depth at the current node.
    autocast : int
        ``torch.autocast`` contexts (``with`` or decorator) enclosing the current node.
    training : int
        > 0 inside code that only runs in training (``if self.training:``).
    tensors, tensor_dicts : set of str
        Local names known to hold a tensor / a dict of tensors (PK1xx).

    Notes
    -----
    The other slots (``assigned``, ``pending_sync``, ``pending_seed``, ``rope``,
    ``build``...) are family-specific state created lazily by the family modules.
    """

    __slots__ = (
        "assigned",
        "autocast",
        "build",
        "hot",
        "is_generator",
        "kind",
        "loops",
        "name",
        "node",
        "parent",
        "pending_seed",
        "pending_sync",
        "per_request",
        "restores_rng",
        "rope",
        "tensor_dicts",
        "tensors",
        "training",
    )

    def __init__(self, kind: str, name: str, node: ast.AST | None, parent: Frame | None):
        self.kind = kind
        self.name = name
        self.node = node
        self.parent = parent
        self.hot = False
        self.per_request = False
        self.loops = 0
        self.autocast = 0
        self.is_generator = False
        self.tensors: set[str] = set()
        self.tensor_dicts: set[str] = set()
        self.assigned: dict[str, ast.AST] | None = None
        self.pending_sync: list | None = None
        self.pending_seed: list | None = None
        self.restores_rng = False
        self.rope = None
        self.build = None
        self.training = 0

    def enclosing_class(self) -> Frame | None:
        """The nearest class frame at or above this one (``None`` at module level)."""
        f = self
        while f is not None and f.kind != "class":
            f = f.parent
        return f


def _child_fields(cls: type) -> tuple[str, ...]:
    skip = {"ctx", "id", "attr", "arg", "name", "asname", "module", "level", "kind", "conversion",
            "is_async", "type_comment", "names", "kwd_attrs", "n", "s", "type_ignores"}
    if cls is ast.Constant:
        return ()
    return tuple(f for f in cls._fields if f not in skip)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_RECURSION_LIMIT = 20000
_LEAVES = frozenset({ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del, ast.Pass, ast.Break,
                     ast.Continue, ast.alias, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom})


def _is_training(node: ast.AST) -> bool:
    return node.__class__ is ast.Attribute and node.attr == "training"


def _not_training_guard(node: ast.If) -> bool:
    """``if not self.training: return ...`` (alone or in an ``or``) with a body that returns or raises."""
    if not node.body or node.body[-1].__class__ not in (ast.Return, ast.Raise) or node.orelse:
        return False
    test = node.test
    values = test.values if test.__class__ is ast.BoolOp and isinstance(test.op, ast.Or) else [test]
    return any(v.__class__ is ast.UnaryOp and v.op.__class__ is ast.Not and _is_training(v.operand)
               for v in values)


def _merge_calls(*tables: dict) -> dict:
    merged: dict[str, tuple] = {}
    for table in tables:
        for name, handler in table.items():
            merged[name] = merged.get(name, ()) + (handler,)
    return merged


#: Call handlers by the call's final name, for model code and for test files.
MODEL_CALLS = _merge_calls(request_state.CALLS, host_sync.CALLS, codec_precision.CALLS,
                           global_rng.CALLS, stereo.CALLS, rope_buffers.CALLS)
TEST_CALLS = _merge_calls(test_markers.CALLS)


def is_model_path(path: str) -> bool:
    """Whether ``path`` holds model code (where the model-code rule families apply).

    Parameters
    ----------
    path : str
        The file's path as given on the command line (relative or absolute).

    Returns
    -------
    bool
        False for test files (``test_*.py``, ``*_test.py``, ``conftest.py``), files under
        a ``tests/``, ``test/``, ``examples/``, ``example/``, ``benchmarks/``,
        ``benchmark/``, ``scripts/``, ``docs/`` or ``tools/`` folder, and transformers-style
        host-side preprocessing modules (``tokenization_*``, ``processing_*``,
        ``feature_extraction_*``, ``image_processing_*``, ``video_processing_*``); True
        otherwise.
    """
    p = PurePath(path)
    name = p.name
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return False
    if name.startswith(_HOST_SIDE_PREFIXES):
        return False
    return not any(part in _NON_MODEL_DIRS for part in p.parts[:-1])


class Linter:
    """Lint one parsed Python file; :meth:`run` returns its findings (before noqa).

    Parameters
    ----------
    path : str
        Reported in the findings; decides model code vs test file
        (:func:`is_model_path`, :func:`porting_kit.lint.test_markers.is_test_path`).
    text : str
        The file's source (kept for ``# noqa``; the rules read ``tree`` only: comments,
        docstrings and message strings never decide a finding, :meth:`words_of`).
    tree : ast.Module
        ``ast.parse(text)``.
    enabled : frozenset of str
        Codes to report (:func:`porting_kit.lint.rules.select_codes`).

    Attributes
    ----------
    findings : list of LintFinding
        Filled by :meth:`run`, at most one per (line, code).
    frame : Frame
        The innermost scope at the node being visited.
    model_code, is_test : bool
        Which rule families apply to this file.
    """

    def __init__(self, path: str, text: str, tree: ast.Module, enabled: frozenset[str]):
        self.path = path
        self.text = text
        self.tree = tree
        self.enabled = enabled
        self.findings: list[LintFinding] = []
        self._seen: set[tuple] = set()
        self.model_code = is_model_path(path)
        self.is_test = test_markers.is_test_path(path)
        self._meta_hint: bool | None = None
        self._words: dict[int, str] = {}
        self._file_has: dict = {}
        self.marks = test_markers.MarkState() if self.is_test else None
        self.build_stack: list = []
        self.frame = Frame("module", "<module>", tree, None)
        self.calls = MODEL_CALLS if self.model_code else ({} if not self.is_test else TEST_CALLS)
        dispatch = {
            ast.FunctionDef: Linter._function, ast.AsyncFunctionDef: Linter._function,
            ast.ClassDef: Linter._class, ast.For: Linter._for, ast.AsyncFor: Linter._for,
            ast.While: Linter._while, ast.With: Linter._with, ast.AsyncWith: Linter._with,
            ast.ListComp: Linter._comp, ast.SetComp: Linter._comp, ast.DictComp: Linter._comp,
            ast.GeneratorExp: Linter._comp, ast.Call: Linter._call, ast.BoolOp: Linter._boolop,
            ast.If: Linter._if, ast.IfExp: Linter._ifexp, ast.Assert: Linter._test_stmt,
            ast.UnaryOp: Linter._unary, ast.Assign: Linter._assign, ast.AnnAssign: Linter._assign,
            ast.Yield: Linter._yield, ast.YieldFrom: Linter._yield,
        }
        if self.model_code:
            dispatch[ast.Subscript] = Linter._subscript
            dispatch[ast.Try] = Linter._try
            if hasattr(ast, "TryStar"):
                dispatch[ast.TryStar] = Linter._try
        if self.is_test:
            dispatch[ast.Attribute] = Linter._attribute
        self.dispatch = self._dispatch_base = dispatch
        self._dispatch_names = dict(dispatch)
        self._dispatch_names[ast.Name] = Linter._name

    # ---- reporting -------------------------------------------------------
    def report(self, code: str, node: ast.AST | None, message: str, *, file_level: bool = False) -> None:
        """Record a finding at ``node`` when ``code`` is enabled; one per line and code.

        Parameters
        ----------
        code : str
            A code of :data:`porting_kit.lint.rules.RULES`.
        node : ast.AST or None
            Where: its ``lineno`` and ``col_offset + 1`` (1-based, as flake8 / ruff print);
            ``None`` gives line 1, column 1.
        message : str
            What was found, naming the construct.
        file_level : bool, default False
            A finding about the whole file (missing test markers): never suppressed by
            ``# noqa``, matched by path and code alone in the baseline.
        """
        if code not in self.enabled:
            return
        line = getattr(node, "lineno", 1) if node is not None else 1
        col = getattr(node, "col_offset", 0) + 1 if node is not None else 1
        key = (line, code)
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(LintFinding(self.path, line, col, code, message, file_level))

    @property
    def imports_torch(self) -> bool:
        """Whether the file imports ``torch`` (or a ``torch*`` package) at module level, inside a
        top-level ``try`` / ``if`` included; a comment naming torch does not count."""
        hit = self._file_has.get("<torch>")
        if hit is None:
            hit = False
            stack = list(self.tree.body)
            while stack and not hit:
                stmt = stack.pop()
                cls = stmt.__class__
                if cls is ast.Import:
                    hit = any(a.name.startswith("torch") for a in stmt.names)
                elif cls is ast.ImportFrom:
                    hit = (stmt.module or "").startswith("torch")
                elif cls in (ast.Try, ast.If) or cls.__name__ == "TryStar":
                    stack += [*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
                              *(s for h in getattr(stmt, "handlers", []) for s in h.body)]
            self._file_has["<torch>"] = hit
        return hit

    def meta_hint(self) -> bool:
        """Whether this file builds models the transformers way (meta device / remote code): a class
        deriving from ``*PreTrainedModel``, a use of ``init_empty_weights`` or the ``"meta"`` device."""
        if self._meta_hint is None:
            hint = False
            for node in ast.walk(self.tree):
                cls = node.__class__
                if cls is ast.ClassDef:
                    hint = any(dotted(b).endswith("PreTrainedModel") for b in node.bases)
                elif cls is ast.Name or cls is ast.Attribute:
                    hint = (node.id if cls is ast.Name else node.attr) == "init_empty_weights"
                elif cls is ast.Constant:
                    hint = node.value == "meta"
                if hint:
                    break
            self._meta_hint = hint
        return self._meta_hint

    def words_of(self, node: ast.AST) -> str:
        """The lower-cased code words of ``node`` (:func:`porting_kit.lint.astutil.code_words`), cached.

        Parameters
        ----------
        node : ast.AST
            A function, class or the module.

        Returns
        -------
        str
            Identifiers and identifier-like string constants, space-joined; never comments,
            docstrings or message strings.
        """
        if node is self.tree and id(node) not in self._words:
            self._words.update(code_words_by_scope(self.tree))  # one walk for the file and every scope
        words = self._words.get(id(node))
        if words is None:
            words = self._words[id(node)] = code_words(node)
        return words

    def docstrings_have(self, words: tuple[str, ...]) -> bool:
        """Whether a docstring of the file (module, class or function; AST nodes, unlike comments)
        contains any of the lower-case ``words``: where a rule lets the author *declare* a fact
        (PK404: the decoder is causal), never where it needs the code to do something."""
        key = ("<doc>", *words)
        hit = self._file_has.get(key)
        if hit is None:
            docs = self._file_has.get("<doc>")
            if docs is None:
                docs = self._file_has["<doc>"] = " ".join(
                    (ast.get_docstring(n, clean=False) or "") for n in ast.walk(self.tree)
                    if n.__class__ in (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)).lower()
            hit = self._file_has[key] = any(w in docs for w in words)
        return hit

    def file_has(self, words: tuple[str, ...]) -> bool:
        """Whether the file's code words (:meth:`words_of` the module) contain any of ``words``;
        cached per tuple.

        Parameters
        ----------
        words : tuple of str
            Lower-case substrings (``("latency", "lookahead")``).

        Returns
        -------
        bool
        """
        hit = self._file_has.get(words)
        if hit is None:
            # A word the source text lacks is not in the code either: the text only rules out
            # (fast), the AST decides.
            hit = self.text_may_have(words) and any(w in self.words_of(self.tree) for w in words)
            self._file_has[words] = hit
        return hit

    def text_of_may_have(self, node: ast.AST, words: tuple[str, ...]) -> bool:
        """:meth:`text_may_have` for the lines of one function or class (a necessary condition
        only: a word missing from them is missing from its code)."""
        lines = self._file_has.get("<lines>")
        if lines is None:
            lines = self._file_has["<lines>"] = self.text.lower().splitlines()
        chunk = "\n".join(lines[node.lineno - 1:getattr(node, "end_lineno", None) or node.lineno])
        return any(w in chunk for w in words)

    def text_may_have(self, words: tuple[str, ...]) -> bool:
        """False when the lower-cased source text contains none of ``words``: then the code (a
        part of the text) cannot either. A necessary condition only, never a finding's reason."""
        lower = self._file_has.get("")
        if lower is None:
            lower = self._file_has[""] = self.text.lower()
        return any(w in lower for w in words)

    # ---- traversal -------------------------------------------------------
    def run(self) -> list[LintFinding]:
        """Traverse the file once and return its findings (unsorted, before ``# noqa``).

        Returns
        -------
        list of LintFinding
            Module-level PK501 seeds and the test-marker checks (PKT1xx) are settled at the end.
        """
        self.generic(self.tree)
        global_rng.on_scope_exit(self, self.frame)
        if self.model_code and "PK702" in self.enabled:
            rope_buffers.on_module(self)
        if self.marks is not None:
            test_markers.on_file_end(self)
        return self.findings

    def visit(self, node: ast.AST) -> None:
        """Dispatch one node to its handler, or walk its children when it has none.

        Parameters
        ----------
        node : ast.AST
            Leaf nodes (names, constants, imports...) without a handler are skipped.
        """
        handler = self.dispatch.get(node.__class__)
        if handler is not None:
            handler(self, node)
        elif node.__class__ not in _LEAVES:
            self.generic(node)

    def generic(self, node: ast.AST) -> None:
        """Visit the child nodes of ``node`` in field order (the fields worth visiting only).

        Parameters
        ----------
        node : ast.AST
            Any node; identifier/string fields (``id``, ``attr``, ``names``...) are not walked.
        """
        cls = node.__class__
        fields = _CHILD_FIELDS.get(cls)
        if fields is None:
            fields = _CHILD_FIELDS[cls] = _child_fields(cls)
        dispatch = self.dispatch
        for field in fields:
            value = getattr(node, field, None)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    if item is None:
                        continue
                    handler = dispatch.get(item.__class__)
                    if handler is not None:
                        handler(self, item)
                    elif item.__class__ not in _LEAVES:
                        self.generic(item)
            else:
                handler = dispatch.get(value.__class__)
                if handler is not None:
                    handler(self, value)
                elif value.__class__ not in _LEAVES:
                    self.generic(value)

    def visit_list(self, nodes: list) -> None:
        """:meth:`visit` each node of ``nodes`` in order, skipping ``None`` entries.

        Parameters
        ----------
        nodes : list of ast.AST or None
            E.g. a body, decorator list or ``kw_defaults`` (which holds ``None``).
        """
        for item in nodes:
            if item is not None:
                self.visit(item)

    # ---- scopes ----------------------------------------------------------
    def _function(self, node: ast.FunctionDef) -> None:
        parent = self.frame
        self.visit_list(node.decorator_list)
        args = node.args
        self.visit_list(args.defaults)
        self.visit_list(args.kw_defaults)
        frame = Frame("func", node.name, node, parent)
        name = node.name
        frame.hot = (name == "forward" or name.startswith(("forward_", "_forward")) or "decode" in name
                     or name == "compute_logits" or (parent.kind == "func" and parent.hot))
        frame.per_request = frame.hot or (parent.kind != "module" and (
            name.startswith(("sample", "_sample")) or "generate" in name or "stream" in name or name == "step"))
        frame.autocast = codec_precision.decorator_autocast(node)
        if self.model_code:
            codec_io.on_function(self, node)
            request_state.on_function(self, node)
            norms.on_function(self, node)
        truthiness.on_function_enter(self, frame, node)
        build = adapter_build.on_function_enter(self, frame, node) if self.model_code else None
        self.frame = frame
        if build is not None:
            self.build_stack.append(build)
            self.dispatch = self._dispatch_names
        self.visit_list(node.body)
        self.frame = parent
        if build is not None:
            self.build_stack.pop()
            if not self.build_stack:
                self.dispatch = self._dispatch_base
            adapter_build.on_function_exit(self, frame)
        if self.model_code:
            host_sync.on_scope_exit(self, frame)
            global_rng.on_scope_exit(self, frame)

    def _class(self, node: ast.ClassDef) -> None:
        parent = self.frame
        self.visit_list(node.decorator_list)
        self.visit_list(node.bases)
        self.visit_list(node.keywords)
        frame = Frame("class", node.name, node, parent)
        self.frame = frame
        self.visit_list(node.body)
        self.frame = parent
        if self.model_code:
            rope_buffers.on_class_exit(self, frame)
            norms.on_class(self, node)

    def _for(self, node: ast.For) -> None:
        frame = self.frame
        self.visit(node.iter)
        frame.loops += 1
        self.visit(node.target)
        self.visit_list(node.body)
        frame.loops -= 1
        self.visit_list(node.orelse)

    def _while(self, node: ast.While) -> None:
        frame = self.frame
        frame.loops += 1
        truthiness.on_test(self, node.test)
        self.visit(node.test)
        self.visit_list(node.body)
        frame.loops -= 1
        self.visit_list(node.orelse)

    def _comp(self, node: ast.AST) -> None:
        frame = self.frame
        frame.loops += 1
        self.generic(node)
        frame.loops -= 1

    def _with(self, node: ast.With) -> None:
        frame = self.frame
        self.visit_list(node.items)
        n = codec_precision.with_autocast(node) if self.model_code else 0
        frame.autocast += n
        self.visit_list(node.body)
        frame.autocast -= n

    # ---- expressions and statements --------------------------------------
    def _call(self, node: ast.Call) -> None:
        func = node.func
        cls = func.__class__
        name = func.attr if cls is ast.Attribute else (func.id if cls is ast.Name else None)
        if name is not None:
            handlers = self.calls.get(name)
            if handlers:
                for handler in handlers:
                    handler(self, node)
        if self.frame.autocast and self.model_code:
            codec_precision.on_call_under_autocast(self, node)
        self.generic(node)

    def _boolop(self, node: ast.BoolOp) -> None:
        truthiness.on_boolop(self, node)
        if self.model_code:
            request_state.on_boolop(self, node)
        if isinstance(node.op, ast.And) and any(_is_training(v) for v in node.values[:-1]):
            # `self.training and torch.rand(1) < p`: the operands after it only run in training
            frame = self.frame
            first = next(i for i, v in enumerate(node.values) if _is_training(v))
            self.visit_list(node.values[:first + 1])
            frame.training += 1
            self.visit_list(node.values[first + 1:])
            frame.training -= 1
            return
        self.generic(node)

    def _test_stmt(self, node: ast.AST) -> None:
        truthiness.on_test(self, node.test)
        self.generic(node)

    def _if(self, node: ast.If) -> None:
        """``if self.training:`` bodies run only in training: the sampling / sync rules skip them."""
        truthiness.on_test(self, node.test)
        self.visit(node.test)
        test = node.test
        training = test.__class__ is ast.Attribute and test.attr == "training" or (
            test.__class__ is ast.BoolOp and isinstance(test.op, ast.And)
            and any(v.__class__ is ast.Attribute and v.attr == "training" for v in test.values))
        if self.model_code:
            stereo.on_if(self, node)
        frame = self.frame
        body_drop, else_drop = truthiness.isinstance_split(test, frame)
        frame.training += training
        frame.tensors -= body_drop
        self.visit_list(node.body)
        frame.tensors |= body_drop
        frame.training -= training
        frame.tensors -= else_drop
        self.visit_list(node.orelse)
        frame.tensors |= else_drop
        if _not_training_guard(node):
            frame.training += 1  # `if not self.training: return x` - the rest of the function is training-only

    def _ifexp(self, node: ast.IfExp) -> None:
        if self.model_code:
            stereo.on_if(self, node)
        self._test_stmt(node)

    def _unary(self, node: ast.UnaryOp) -> None:
        if node.op.__class__ is ast.Not:
            truthiness.on_test(self, node.operand)
        self.generic(node)

    def _assign(self, node: ast.AST) -> None:
        if node.value is not None:
            self.visit(node.value)
        truthiness.on_assign(self, node)
        if self.model_code:
            request_state.on_assign(self, node)
            rope_buffers.on_assign(self, node)
            if self.build_stack:
                adapter_build.on_assign(self, node)
        if node.__class__ is ast.Assign:
            self.visit_list(node.targets)
        else:
            self.visit(node.target)
            self.visit(node.annotation)

    def _subscript(self, node: ast.Subscript) -> None:
        request_state.on_subscript(self, node)
        self.generic(node)

    def _try(self, node: ast.Try) -> None:
        if self.frame.kind != "func":
            optional_deps.on_try(self, node)
        self.generic(node)

    def _yield(self, node: ast.AST) -> None:
        self.frame.is_generator = True
        self.generic(node)

    def _attribute(self, node: ast.Attribute) -> None:
        test_markers.on_attribute(self, node)
        self.generic(node)

    def _name(self, node: ast.Name) -> None:
        if node.ctx.__class__ is ast.Load and self.build_stack:
            self.build_stack[-1].loads.add(node.id)


def lint_source(path: str, text: str, enabled: frozenset[str]) -> list[LintFinding]:
    """Lint Python source ``text`` (reported as ``path``); findings sorted, ``# noqa`` applied.

    Parameters
    ----------
    path : str
        Reported in every finding; decides which families apply (:func:`is_model_path`).
    text : str
        The file's source.
    enabled : frozenset of str
        Codes to report (:func:`porting_kit.lint.rules.select_codes`).

    Returns
    -------
    list of LintFinding
        Sorted by (path, line, col, code), ``# noqa`` lines removed
        (:func:`porting_kit.lint.finding.apply_noqa`).

    Notes
    -----
    A file that does not parse (syntax error, null bytes, too deeply nested) yields one
    ``PK000`` finding at the error's position (when ``PK000`` is enabled), as pre-commit's
    ``check-ast`` does; it never raises. The recursion limit is raised to 20000 for the
    traversal and restored afterwards.
    """
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        line = exc.lineno or 1
        col = exc.offset or 1
        return [LintFinding(path, line, max(col, 1), "PK000", f"syntax error: {exc.msg}")] \
            if "PK000" in enabled else []
    except (ValueError, RecursionError, MemoryError) as exc:
        return [LintFinding(path, 1, 1, "PK000", f"cannot parse: {type(exc).__name__}: {exc}")] \
            if "PK000" in enabled else []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))  # long `a + b + ...` chains nest deeply
    try:
        findings = Linter(path, text, tree, enabled).run()
    except RecursionError:
        return [LintFinding(path, 1, 1, "PK000", "file is nested too deeply to lint")] \
            if "PK000" in enabled else []
    finally:
        sys.setrecursionlimit(limit)
    if not findings:
        return findings
    findings = apply_noqa(findings, text.splitlines())
    findings.sort(key=LintFinding.sort_key)
    return findings
