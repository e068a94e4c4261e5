"""PK403-PK404: what goes into the codec decode and what a streaming caller cuts off its output.

PK403: special tokens clamped or mapped to code 0 right before the decode. A
codes tensor clamped from above (``codes.clamp(0, codebook_size - 1)``,
``torch.clamp(codes, max=...)``) or with its out-of-range entries mapped to 0
(``codes[codes >= codebook_size] = 0``, ``torch.where(codes >= vocab, 0, codes)``,
``codes.masked_fill(codes >= vocab, 0)``; the result under any name) and then passed to a
codec call in the same function turns EOS / pad frames into real audio frames: a click or a burst of noise at
the end of every clip. Flagged only when the function never cuts those frames off
again: its code (names and keys; not comments or docstrings) mentions no length, mask, valid count, trim, EOS or stop term
(``audio_lengths``, ``valid``, ``mask``, ``eos``, ``trim`` ...). A lower clamp alone
(``clamp(min=0)``, pad ``-1`` to 0 with lengths kept elsewhere) is left alone.

PK404 (warn): a streaming trim computed as context frames x samples per frame
(``wav[..., left_context * hop_length:]``, ``trim = context_frames * upsample``
then ``pcm[trim:]``) in a file whose code (names, keys and flags) and docstrings
(a declaration the AST holds; comments do not count) never mention the decoder's own latency
(``latency``, ``lookahead``, ``delay``, ``right_context``, ``holdback``,
``future``) nor says the decoder is ``causal``. The trim is exact for a causal
decoder only; a decoder that looks ahead (non-causal convolutions or attention,
a centred iSTFT) also needs right context and a trim shifted by its latency, or
every chunk boundary clicks.
"""

from __future__ import annotations

import ast
import re

from porting_kit.lint.astutil import dotted, keyword, names_in
from porting_kit.lint.codec_precision import is_codec

_CODES = re.compile(r"(code|token)", re.IGNORECASE)
_CUT_TERMS = re.compile(r"(length|lens\b|valid|mask|trim|eos|eoc|eoa|stop|num_frames|n_frames)", re.IGNORECASE)
_CONTEXT = re.compile(r"(context|ctx)", re.IGNORECASE)
_PER_FRAME = re.compile(r"(hop|upsampl|samples_per_)", re.IGNORECASE)
#: Lower-case words the cheap tests look for in the code words (:func:`~.astutil.code_words`; comments,
#: docstrings and messages never count): a file or function without them is skipped.
#: Text that any clamp / map-to-0 of codes contains (a necessary condition only; the AST decides).
_MAP_TEXT = ("clamp", "clip", "masked_fill", "where", "=0", "= 0")
_CODEC_WORDS = ("decode", "vocoder", "codec", "code2wav", "token2wav", "bigvgan", "hifigan", "snac", "mimi", "dac")
_CONTEXT_WORDS = ("context", "ctx")
_PER_FRAME_WORDS = ("hop", "upsampl", "samples_per_")
_LATENCY_WORDS = ("latency", "lookahead", "look_ahead", "delay", "right_context", "holdback", "future", "causal")
_WAVE = re.compile(r"(wav|audio|pcm|speech|signal|sample|out|chunk|y_hat|mel)", re.IGNORECASE)


def own_nodes(func: ast.AST):
    """Nodes of a function body in source order, nested ``def`` / ``class`` / ``lambda`` bodies left out.

    Parameters
    ----------
    func : ast.FunctionDef or ast.AsyncFunctionDef

    Yields
    ------
    ast.AST
    """
    stack = list(reversed(func.body))
    while stack:
        node = stack.pop()
        yield node
        if node.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _codes_name(node: ast.AST) -> str | None:
    """The dotted text of ``node`` when it names codes / tokens (``codes``, ``self.audio_codes``)."""
    if node.__class__ not in (ast.Name, ast.Attribute):
        return None
    text = dotted(node)
    return text if _CODES.search(text.rpartition(".")[2]) else None


def _upper_clamp(node: ast.AST) -> str | None:
    """``codes.clamp(lo, hi)`` / ``.clamp(max=...)`` / ``torch.clamp(codes, ..., hi)``: the clamped name."""
    if node.__class__ is not ast.Call or node.func.__class__ is not ast.Attribute:
        return None
    attr = node.func.attr
    if attr not in ("clamp", "clamp_", "clip", "clip_"):
        return None
    upper = keyword(node, "max")
    if dotted(node.func.value) in ("torch", "np", "numpy"):
        target = node.args[0] if node.args else None
        if upper is None and len(node.args) >= 3:
            upper = node.args[2]
    else:
        target = node.func.value
        if upper is None and len(node.args) >= 2:
            upper = node.args[1]
    if upper is None or (upper.__class__ is ast.Constant and upper.value is None) or target is None:
        return None
    return _codes_name(target)


def _above(test: ast.AST) -> str | None:
    """``codes >= n`` / ``codes > n`` (alone or in an ``|`` / ``or``): the compared codes name."""
    if test.__class__ is ast.BinOp and test.op.__class__ is ast.BitOr:
        return _above(test.left) or _above(test.right)
    if test.__class__ is ast.BoolOp:
        return next((n for n in map(_above, test.values) if n), None)
    if test.__class__ is not ast.Compare or len(test.ops) != 1 or test.ops[0].__class__ not in (ast.Gt, ast.GtE):
        return None
    return _codes_name(test.left)


def _is_zero(node: ast.AST) -> bool:
    if node.__class__ is ast.Constant:
        return node.value == 0 and not isinstance(node.value, (bool, str))
    return node.__class__ is ast.Call and dotted(node.func).endswith("zeros_like")


def _mapped_to_zero(node: ast.AST) -> str | None:
    """``torch.where(codes >= n, 0, codes)`` / ``codes.masked_fill(codes >= n, 0)``: the codes name."""
    if node.__class__ is not ast.Call or node.func.__class__ is not ast.Attribute:
        return None
    args = node.args
    if node.func.attr == "where" and len(args) == 3 and _is_zero(args[1]):
        return _above(args[0])
    if node.func.attr in ("masked_fill", "masked_fill_") and len(args) == 2 and _is_zero(args[1]):
        return _above(args[0])
    return None


def _special_token_maps(func: ast.AST) -> list[tuple[ast.AST, str]]:
    """(statement, codes name) for every clamp-from-above / map-to-0 of a codes tensor in ``func``."""
    found = []
    for node in own_nodes(func):
        cls = node.__class__
        if cls is ast.Assign and len(node.targets) == 1:
            target = node.targets[0]
            if target.__class__ is ast.Subscript and _is_zero(node.value):
                name = _above(target.slice)
                if name is not None and name == _codes_name(target.value):
                    found.append((node, name))
                continue
            name = _upper_clamp(node.value) or _mapped_to_zero(node.value)
            if name is not None and target.__class__ in (ast.Name, ast.Attribute):
                found.append((node, dotted(target)))  # `safe = codes.clamp(...)` decodes `safe`
        elif cls is ast.Expr:
            name = _upper_clamp(node.value)
            if name is not None and node.value.func.attr.endswith("_"):
                found.append((node, name))
    return found


def _decoded(func: ast.AST, name: str, after: int) -> ast.Call | None:
    """The first codec call after line ``after`` that takes ``name`` among its arguments."""
    short = name.rpartition(".")[2]
    for node in own_nodes(func):
        if node.__class__ is not ast.Call or getattr(node, "lineno", 0) <= after:
            continue
        if not is_codec(dotted(node.func)):
            continue
        for arg in [*node.args, *(kw.value for kw in node.keywords)]:
            if dotted(arg) == name or (name == short and short in names_in(arg)
                                       and arg.__class__ in (ast.Name, ast.Call, ast.Subscript)):
                return node
    return None


def _special_tokens(lin, func: ast.AST, words: str) -> None:
    if not any(w in words for w in _CODEC_WORDS):
        return  # cheap test first: most functions never decode
    maps = _special_token_maps(func)
    if not maps or _CUT_TERMS.search(words):
        return
    for stmt, name in maps:
        call = _decoded(func, name, stmt.lineno)
        if call is not None:
            lin.report("PK403", stmt, f"`{name}` mapped into the codebook and decoded by "
                                      f"`{dotted(call.func)}(...)`: EOS / pad frames become audio")
            return


def _product(node: ast.AST) -> bool:
    """``context * hop`` (either order, names or attributes): context frames times samples per frame."""
    if node.__class__ is not ast.BinOp or node.op.__class__ is not ast.Mult:
        return False
    left, right = " ".join(names_in(node.left)), " ".join(names_in(node.right))
    return bool((_CONTEXT.search(left) and _PER_FRAME.search(right))
                or (_CONTEXT.search(right) and _PER_FRAME.search(left)))


def _slice_lower(node: ast.Subscript) -> ast.AST | None:
    """The lower bound of ``x[a:]`` / ``x[..., a:]`` (the last index), else ``None``."""
    index = node.slice
    if index.__class__ is ast.Tuple and index.elts:
        index = index.elts[-1]
    if index.__class__ is ast.Slice and index.lower is not None and index.upper is None:
        return index.lower
    return None


def _stream_trims(lin, func: ast.AST) -> None:
    products = {}
    for node in own_nodes(func):
        if node.__class__ is ast.Assign and len(node.targets) == 1 and node.targets[0].__class__ is ast.Name \
                and _product(node.value):
            products[node.targets[0].id] = node.value
    for node in own_nodes(func):
        if node.__class__ is not ast.Subscript or node.ctx.__class__ is not ast.Load:
            continue
        lower = _slice_lower(node)
        if lower is None:
            continue
        if not (_product(lower) or (lower.__class__ is ast.Name and lower.id in products)):
            continue
        value = node.value
        if not (_WAVE.search(" ".join(names_in(value)))
                or (value.__class__ is ast.Call and is_codec(dotted(value.func)))):
            continue
        lin.report("PK404", node, "stream trim is context frames x samples per frame only: a decoder "
                                  "that looks ahead needs right context and its latency in the trim")


def on_function(lin, func: ast.AST) -> None:
    """Run PK403 and PK404 over one function body (nested functions get their own call).

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Model code only (the engine calls this for model files).
    func : ast.FunctionDef or ast.AsyncFunctionDef
    """
    # The text only rules out (a word absent from the text is absent from the code); the AST decides.
    special = "PK403" in lin.enabled and lin.text_of_may_have(func, _MAP_TEXT) \
        and lin.text_of_may_have(func, _CODEC_WORDS)
    trims = "PK404" in lin.enabled and lin.text_of_may_have(func, _CONTEXT_WORDS) \
        and lin.text_of_may_have(func, _PER_FRAME_WORDS) and lin.file_has(_CONTEXT_WORDS) \
        and lin.file_has(_PER_FRAME_WORDS) and not lin.file_has(_LATENCY_WORDS) \
        and not lin.docstrings_have(_LATENCY_WORDS)
    if not (special or trims):
        return  # most functions: ruled out by cheap substring tests
    words = lin.words_of(func)
    if special:
        _special_tokens(lin, func, words)
    if trims:
        if any(w in words for w in _CONTEXT_WORDS) and any(w in words for w in _PER_FRAME_WORDS):
            _stream_trims(lin, func)
