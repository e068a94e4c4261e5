"""PK1xx tensor truthiness: a tensor (or a dict value that can be one) used for its truth value.

``d.get("a") or d.get("b")`` falls through to ``b`` when ``d["a"]`` is
``torch.tensor(0)`` and raises for a tensor with more than one element;
``if x:`` on a tensor does the same. The rule knows a name is a tensor when it
is a parameter annotated ``Tensor`` / ``torch.Tensor`` (optionally ``| None``)
or was assigned from a ``torch.*`` factory / op or a tensor method in the same
function. A ``.get()`` is flagged when the dict was built with tensor values in
the same function, or (in a file that uses torch) when its key names a tensor
payload (``audio``, ``codes``, ``input_ids``, ``hidden_states``, ``mask`` ...)
and not a scalar or a list (``*_id``, ``*_path``, ``*_rate``, ``text``,
``*_marks``, ``*_features`` ...). Image keys are not tensor-ish (serving code
passes PIL images and lists); a typed fallback (``d.get(k, {})``,
``d.get(k) or []``) or a preceding ``isinstance(x, list)`` says the value is
not a tensor. Receivers that hold configuration (``cfg``, ``*_config``,
``kwargs``, ``os.environ`` ...) are skipped.
"""

from __future__ import annotations

import ast
import re

from porting_kit.lint.astutil import const_str, dotted

#: torch functions that return one tensor (not tuples, not dtypes or devices).
TENSOR_FACTORIES = frozenset(["tensor", "as_tensor", "from_numpy", "zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like", "full", "full_like", "arange", "linspace", "logspace", "eye", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "multinomial", "where", "matmul", "mm", "bmm", "einsum", "softmax", "log_softmax", "sigmoid", "tanh", "argmax", "argmin", "clamp", "clip", "abs", "exp", "log", "sqrt", "cumsum", "cumprod", "flatten", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "gather", "index_select", "masked_fill", "repeat_interleave", "tile", "roll", "flip", "diff", "outer", "polar", "complex", "view_as_real", "view_as_complex", "nonzero", "isin"])
#: tensor methods that return a tensor.
TENSOR_METHODS = frozenset(["to", "float", "half", "bfloat16", "double", "long", "int", "bool", "cuda", "clone", "detach", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "flatten", "expand", "expand_as", "repeat", "sum", "mean", "abs", "exp", "log", "sqrt", "softmax", "argmax", "masked_fill", "index_select", "gather", "narrow", "type_as", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"])

_TENSORISH_KEY = re.compile(
    r"(audio|wav|waveform|speech|codes?$|codec|codebook|token|ids$|embed|hidden|latent|logit|mask|"
    r"tensor|feat|mel|spk|speaker_emb|array|prompt_audio|ref_code|states?$|cache)",
    re.IGNORECASE)
_SCALAR_KEY = re.compile(
    r"(_id|_path|_url|_uri|_name|_format|_type|_ms|_hz|_sec|_s|rate|_len|length|_size|_mode|_dir|"
    r"_file|_key|_str|text|voice|lang|language|_count|_num|_shape|_dim|_fps|_kwargs|_config|_cfg|"
    r"frames|_steps|_seconds|_tokens|_chunk|_flag|_enabled|marks|features|_list)$|"
    r"^(max_|min_|num_|n_|use_|enable_|is_|has_)",
    re.IGNORECASE)
#: receivers that hold configuration or strings, never tensors
_CONFIG_RECEIVER = re.compile(r"(^|\.)(os\.environ|environ|cfg|config|\w*_config|\w*_cfg|args|kwargs|params|"
                              r"options|opts|settings|headers|metadata|metrics|hf_overrides|\w*counts\(\))$", re.IGNORECASE)


def _is_tensor_annotation(node: ast.AST | None) -> bool:
    if node is None:
        return False
    cls = node.__class__
    if cls is ast.Name:
        return node.id == "Tensor"
    if cls is ast.Attribute:
        return node.attr == "Tensor"
    if cls is ast.BinOp and isinstance(node.op, ast.BitOr):
        left, right = node.left, node.right
        none_left = left.__class__ is ast.Constant and left.value is None
        none_right = right.__class__ is ast.Constant and right.value is None
        return (_is_tensor_annotation(left) and none_right) or (_is_tensor_annotation(right) and none_left)
    if cls is ast.Subscript and dotted(node.value).endswith("Optional"):
        return _is_tensor_annotation(node.slice)
    if cls is ast.Constant and isinstance(node.value, str):
        return node.value.replace(" ", "") in ("Tensor", "torch.Tensor", "torch.Tensor|None",
                                               "Optional[torch.Tensor]", "Tensor|None")
    return False


def is_tensor_expr(frame, node: ast.AST) -> bool:
    """True when ``node`` certainly evaluates to a tensor in ``frame``.

    Parameters
    ----------
    frame : porting_kit.lint.engine.Frame
        Supplies the local names known to be tensors (``frame.tensors``).
    node : ast.AST
        A name in ``frame.tensors``, a ``torch.<factory>(...)`` call
        (:data:`TENSOR_FACTORIES`), a tensor method (:data:`TENSOR_METHODS`) called on a
        tensor expression, or a binary operation with a tensor operand.

    Returns
    -------
    bool
        False whenever it is not certain (a false alarm is worse than a miss).
    """
    cls = node.__class__
    if cls is ast.Name:
        return node.id in frame.tensors
    if cls is ast.Call:
        func = node.func
        if func.__class__ is ast.Attribute:
            base = func.value
            if base.__class__ is ast.Name and base.id == "torch":
                return func.attr in TENSOR_FACTORIES
            if func.attr in TENSOR_METHODS:
                return is_tensor_expr(frame, base)
        return False
    if cls is ast.BinOp:
        return is_tensor_expr(frame, node.left) or is_tensor_expr(frame, node.right)
    return False


def on_function_enter(lin, frame, node: ast.FunctionDef) -> None:
    """Seed ``frame.tensors`` with the parameters annotated ``Tensor``.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The new function frame.
    node : ast.FunctionDef or ast.AsyncFunctionDef
        Parameters annotated ``Tensor`` / ``torch.Tensor`` (optionally ``| None`` /
        ``Optional[...]``, also as strings) count, unless their default is a non-``None``
        constant (``flag: Tensor | None = False``: the annotation is wrong).
    """
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    for arg in positional + args.kwonlyargs:
        default = defaults.get(arg.arg)
        if default is not None and default.__class__ is ast.Constant and default.value is not None:
            continue  # `flag: torch.Tensor | None = False`: the annotation is wrong, the default is not a tensor
        if arg.annotation is not None and _is_tensor_annotation(arg.annotation):
            frame.tensors.add(arg.arg)


def on_assign(lin, node: ast.AST) -> None:
    """Track which local names hold a tensor / a dict with tensor values.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Only function frames are tracked.
    node : ast.Assign or ast.AnnAssign
        Plain-name targets: added to ``frame.tensors`` when annotated ``Tensor`` or the
        value is a tensor expression (:func:`is_tensor_expr`), removed otherwise; added to
        ``frame.tensor_dicts`` when the value is a dict display with a tensor value.
    """
    frame = lin.frame
    if frame.kind != "func":
        return
    if node.__class__ is ast.Assign:
        targets = node.targets
        annotated = False
    else:
        targets = [node.target]
        annotated = _is_tensor_annotation(node.annotation)
    value = node.value
    for target in targets:
        if target.__class__ is not ast.Name:
            continue
        name = target.id
        if annotated or (value is not None and is_tensor_expr(frame, value)):
            frame.tensors.add(name)
        else:
            frame.tensors.discard(name)
        if value is not None and value.__class__ is ast.Dict and \
                any(v is not None and is_tensor_expr(frame, v) for v in value.values):
            frame.tensor_dicts.add(name)
        else:
            frame.tensor_dicts.discard(name)


def _typed_default(node: ast.AST | None) -> bool:
    """A default / fallback that reveals a non-tensor type: ``{}``, ``[]``, ``False``, ``""``, ``0``."""
    if node is None:
        return False
    cls = node.__class__
    if cls is ast.Constant:
        return node.value is not None
    if cls in (ast.Dict, ast.List, ast.Tuple, ast.Set):
        return True
    return cls is ast.Call and node.func.__class__ is ast.Name and node.func.id in ("dict", "list", "tuple", "set")


def _check(lin, node: ast.AST) -> None:
    cls = node.__class__
    frame = lin.frame
    if cls is ast.Name:
        if node.id in frame.tensors:
            lin.report("PK102", node, f"`{node.id}` is a tensor; its truth value is False for 0 and "
                                      "raises for more than one element")
        return
    if cls is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr == "get" and node.args:
        if len(node.args) > 1 and _typed_default(node.args[1]):
            return
        key = const_str(node.args[0])
        if key is not None and key.startswith("__"):
            return
        receiver = node.func.value
        if receiver.__class__ is ast.Name and receiver.id in frame.tensor_dicts:
            lin.report("PK101", node, f"`{receiver.id}` holds tensors: `{receiver.id}.get(...)` is tested "
                                      "for truth, so a tensor value 0 falls through")
        elif key is not None and lin.imports_torch and _TENSORISH_KEY.search(key) \
                and not _SCALAR_KEY.search(key) and not _CONFIG_RECEIVER.search(dotted(receiver)):
            lin.report("PK101", node, f"`{dotted(receiver)}.get({key!r})` is tested for truth; a tensor "
                                      "value falls through (tensor(0)) or raises")


def _narrowed(node: ast.AST) -> str | None:
    """``x`` for ``isinstance(x, list)`` (any non-tensor type): ``x`` is not a tensor after it."""
    if node.__class__ is ast.Call and node.func.__class__ is ast.Name and node.func.id == "isinstance" \
            and len(node.args) == 2 and node.args[0].__class__ is ast.Name \
            and "Tensor" not in dotted(node.args[1]):
        return node.args[0].id
    return None


def isinstance_split(test: ast.AST, frame) -> tuple[set[str], set[str]]:
    """Tensor names that are *not* tensors in the body / the else branch of an isinstance test.

    For ``if isinstance(x, T):`` with ``x`` a known tensor name.

    Parameters
    ----------
    test : ast.AST
        The ``if`` statement's test.
    frame : porting_kit.lint.engine.Frame
        ``x`` must be in ``frame.tensors`` for anything to be dropped.

    Returns
    -------
    body_drop : set of str
        ``{x}`` when ``T`` does not mention ``Tensor`` (``x`` is a list, str... in the body).
    else_drop : set of str
        ``{x}`` when ``T`` mentions ``Tensor`` (``x`` is not a tensor in the else branch).
    """
    if test.__class__ is ast.Call and test.func.__class__ is ast.Name and test.func.id == "isinstance" \
            and len(test.args) == 2 and test.args[0].__class__ is ast.Name and test.args[0].id in frame.tensors:
        name = {test.args[0].id}
        return (set(), name) if "Tensor" in dotted(test.args[1]) else (name, set())
    return set(), set()


def on_boolop(lin, node: ast.BoolOp) -> None:
    """``a or b`` / ``a and b``: every operand but the last is tested for truth.

    ``d.get(k) or {}`` (a container or scalar literal last) says the value is
    not a tensor; only names known to be tensors are checked then. In
    ``isinstance(x, list) and x`` the name is narrowed and not checked.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.BoolOp
        Each operand but the last may be reported as PK101 (a ``.get()`` that can return a
        tensor) or PK102 (a tensor name).
    """
    typed = _typed_default(node.values[-1])
    narrowed: set[str] = set()
    for value in node.values[:-1]:
        name = _narrowed(value)
        if name is not None:
            narrowed.add(name)
            continue
        if (typed and value.__class__ is not ast.Name) or (value.__class__ is ast.Name and value.id in narrowed):
            continue
        _check(lin, value)


def on_test(lin, node: ast.AST) -> None:
    """Check a condition for tensor truthiness (PK101 / PK102).

    ``node`` is the test of an ``if`` / ``while`` / ternary / ``assert``, or a ``not`` operand.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.AST
        The condition. For a ``BoolOp`` only its last operand is checked here (the others
        by :func:`on_boolop`), unless an earlier ``isinstance`` narrowed that name.
    """
    while node.__class__ is ast.BoolOp:
        narrowed = {_narrowed(v) for v in node.values[:-1]}
        node = node.values[-1]  # the others are checked by on_boolop
        if node.__class__ is ast.Name and node.id in narrowed:
            return
    _check(lin, node)
