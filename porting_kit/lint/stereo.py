"""PK6xx stereo flattening: a (channels, samples) waveform flattened into mono samples.

``wav.T.reshape(-1)`` / ``wav.transpose(0, 1).reshape(-1)`` / ``.flatten()``
interleaves L and R into one 1-D array of twice the length: played as mono it
is half speed and an octave down (PK601). PK602: ``.flatten()`` /
``.reshape(-1)`` / ``.view(-1)`` / ``.ravel()`` on a value whose name says it
is multi-channel (``stereo``, ``channels``, ``multichannel``). Mix down with
``.mean(dim=0)`` instead. PK601 needs the expression to name a waveform
(``wav``, ``audio``, ``pcm``, ``speech``, ``signal``, ``samples``, ``out`` ...)
and no codec codes (``codes``, ``tokens``, ``ids``, ``frames``, ``latent``
...): flattening a (frames, codebooks) code grid codebook-major is the codec
convention, not a stereo bug.

PK603: ``librosa.resample(wav.T, ...)`` / ``torchaudio.functional.resample(wav.T, ...)`` on a
transposed waveform without ``axis=`` / ``dim=``: these resample the last axis, which
is then the channel axis of a (samples, channels) array (scipy's ``signal.resample``
works on axis 0 and is left alone).

PK604 (warn): the axis of a stream chunk guessed from its shape
(``if wav.shape[0] < wav.shape[1]: wav = wav.T``, ``axis = 0 if x.shape[0] <= 2 else 1``)
inside a chunk handler. A whole clip always has more samples than channels; a chunk
(or a code grid of a few frames against 8-32 codebooks) may not, and then the guess
transposes it. Whole-clip loaders that guess (reference audio of any layout) are left
alone, as are tests whose other branch raises (a declared layout, validated).
"""

from __future__ import annotations

import ast
import re

from porting_kit.lint.astutil import dotted, is_minus_one, keyword, names_in

_MULTI = re.compile(r"(stereo|multichannel|multi_channel|channels)", re.IGNORECASE)
_WAVE = re.compile(r"(wav|audio|pcm|speech|stereo|signal|sample|channel|mix|out)", re.IGNORECASE)
_CODES = re.compile(r"(code|token|ids|frame|index|indices|grid|pos|mask|logit|emb|latent)", re.IGNORECASE)
_SWAPS = ({0, 1}, {-1, -2})
_METHODS = frozenset({"transpose", "contiguous", "permute", "t", "T", "mT", "np", "numpy", "torch"})


def _int(node: ast.AST) -> int | None:
    if node.__class__ is ast.Constant and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if node.__class__ is ast.UnaryOp and isinstance(node.op, ast.USub) and node.operand.__class__ is ast.Constant:
        return -node.operand.value if isinstance(node.operand.value, int) else None
    return None


def _is_transposed(node: ast.AST) -> bool:
    """``x.T`` / ``x.mT`` / ``x.t()`` / ``x.transpose(0, 1)`` / ``x.permute(1, 0)`` / ``np.transpose(x)``."""
    while node.__class__ is ast.Call and node.func.__class__ is ast.Attribute \
            and node.func.attr == "contiguous" and not node.args:
        node = node.func.value
    if node.__class__ is ast.Attribute:
        return node.attr in ("T", "mT")
    if node.__class__ is not ast.Call:
        return False
    func = node.func
    if func.__class__ is not ast.Attribute:
        return False
    args = [_int(a) for a in node.args]
    if func.attr == "t" and not node.args:
        return True
    if func.attr == "transpose":
        if dotted(func.value) in ("np", "numpy") and len(node.args) == 1:
            return True
        if not node.args:
            return True  # numpy's x.transpose()
        return len(args) == 2 and set(args) in _SWAPS
    if func.attr == "permute":
        return args == [1, 0]
    return False


def _flatten(lin, node: ast.Call) -> None:
    func = node.func
    if func.__class__ is not ast.Attribute:
        return
    if func.attr in ("flatten", "ravel"):
        if node.args and not (len(node.args) == 1 and _int(node.args[0]) == 0):
            return
    elif not (len(node.args) == 1 and is_minus_one(node.args[0])):
        return
    receiver = func.value
    if _is_transposed(receiver):
        words = " ".join(names_in(receiver) - _METHODS)
        if _CODES.search(words) or not _WAVE.search(words):
            return  # codebook-major flattening of (frames, codebooks) codes is the codec convention
        lin.report("PK601", node, "transpose then flatten interleaves the channels: 2x the samples, "
                                  "half speed, an octave down")
        return
    name = dotted(receiver)
    if _MULTI.search(name):
        lin.report("PK602", node, f"`{name}` is multi-channel: flattening concatenates the channels")


#: Resamplers that work along the last axis by default (librosa, torchaudio, julius, soxr-style).
_RESAMPLERS = frozenset({"resample"})


def _resample(lin, node: ast.Call) -> None:
    """PK603: a resampler called on a transposed waveform without ``axis=`` / ``dim=``."""
    if not node.args or keyword(node, "axis") is not None or keyword(node, "dim") is not None:
        return
    func = node.func
    name = dotted(func)
    if name.endswith(("signal.resample", "signal.resample_poly")):
        return  # scipy resamples axis 0 by default: (samples, channels) is its convention
    x = node.args[0]
    if not _is_transposed(x):
        return
    words = " ".join(names_in(x) - _METHODS)
    if _CODES.search(words) or not _WAVE.search(words):
        return
    lin.report("PK603", node, "resampler called on a (samples, channels) array: it resamples along "
                              "the last axis, the channels")


CALLS = {"reshape": _flatten, "view": _flatten, "flatten": _flatten, "ravel": _flatten,
         "resample": _resample}


# ---- PK604: the channel axis guessed from the array's shape ---------------------------------

_ORDER_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_NOT_AUDIO_ARRAY = re.compile(r"(mask|attn|attention|hidden|emb|logit|pos|weight|image|video|pixel|latent|kv|cache)",
                              re.IGNORECASE)
_REDUCTIONS = frozenset({"mean", "sum", "select", "unbind", "split", "chunk", "squeeze", "unsqueeze", "index_select",
                         "take", "flip", "amax", "max", "min", "std"})


def _shape_dim(node: ast.AST) -> str | None:
    """``x.shape[i]`` / ``x.size(i)`` -> the dotted array name, else ``None``."""
    if node.__class__ is ast.Subscript and node.value.__class__ is ast.Attribute and node.value.attr == "shape" \
            and _int(node.slice) is not None:
        return dotted(node.value.value)
    if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr == "size" \
            and len(node.args) == 1 and _int(node.args[0]) is not None:
        return dotted(node.func.value)
    return None


def _guessed_array(test: ast.AST) -> str | None:
    """The waveform whose layout ``test`` guesses: ``x.shape[0] < x.shape[1]`` or ``x.shape[0] <= 2``
    (a dim against a small channel count, ``in (1, 2)`` too), alone or in an ``and``."""
    if test.__class__ is ast.BoolOp and isinstance(test.op, ast.And):
        return next((n for n in map(_guessed_array, test.values) if n), None)
    if test.__class__ is not ast.Compare or len(test.ops) != 1:
        return None
    name, op, right = _shape_dim(test.left), test.ops[0], test.comparators[0]
    if name is None:
        return None
    if op.__class__ in _ORDER_OPS:
        small = _int(right)
        if _shape_dim(right) != name and not (small is not None and (
                (op.__class__ is ast.LtE and 2 <= small <= 8) or (op.__class__ is ast.Lt and 3 <= small <= 9))):
            return None  # `x.shape[0] > 1` asks whether a known channel axis holds several channels
    elif op.__class__ is ast.In and right.__class__ in (ast.Tuple, ast.List, ast.Set):
        if not right.elts or not all((_int(e) or 0) in range(1, 9) for e in right.elts):
            return None
    else:
        return None
    words = " ".join(names_in(test.left) - {"shape", "size"})
    return None if _NOT_AUDIO_ARRAY.search(words) else name


def _in_chunk_handler(lin, name: str) -> bool:
    """Whether the guess runs on a stream chunk: a ``*chunk*`` / ``*stream*`` function or parameter,
    or an array named ``*chunk*``."""
    if "chunk" in name.lower():
        return True
    frame = lin.frame
    while frame is not None and frame.kind != "func":
        frame = frame.parent
    if frame is None:
        return False
    args = frame.node.args
    params = [a.arg.lower() for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    fname = frame.name.lower()
    return "chunk" in fname or "stream" in fname or any("chunk" in p for p in params)


def _picks_axis(nodes: list, name: str) -> bool:
    """Whether a branch transposes ``name``, binds an axis constant or reduces ``name`` over an axis."""
    for stmt in nodes:
        for node in ast.walk(stmt):
            if node.__class__ is ast.Assign and len(node.targets) == 1 and node.targets[0].__class__ is ast.Name \
                    and re.search(r"(axis|dim)", node.targets[0].id) and _int(node.value) is not None:
                return True
            if _is_transposed(node) and name in dotted(_receiver(node)):
                return True
            if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute \
                    and node.func.attr in _REDUCTIONS and dotted(node.func.value) == name \
                    and (node.args or keyword(node, "dim") is not None or keyword(node, "axis") is not None):
                return True
    return False


def _receiver(node: ast.AST) -> ast.AST:
    if node.__class__ is ast.Attribute:
        return node.value
    if node.__class__ is ast.Call and node.func.__class__ is ast.Attribute:
        if dotted(node.func.value) in ("np", "numpy") and node.args:
            return node.args[0]
        return node.func.value
    return node


def _raises(nodes: list) -> bool:
    return bool(nodes) and nodes[-1].__class__ is ast.Raise


def on_if(lin, node: ast.AST) -> None:
    """PK604: ``if wav.shape[0] < wav.shape[1]: wav = wav.T`` / ``axis = 0 if x.shape[0] <= 2 else 1``.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    node : ast.If or ast.IfExp
        Flagged when the test compares two dims of one array (a waveform or code grid: not a
        mask, hidden state, image, latent or cache), or asks whether one dim is at most a
        channel count of 2..8, and a branch transposes it, binds an axis constant or reduces
        it over an axis, inside a stream-chunk handler (a ``*chunk*`` /
        ``*stream*`` function or parameter, or a ``*chunk*`` array): a whole clip always has
        more samples than channels, a chunk may not. A test whose other branch raises
        validates a declared layout and is left alone.
    """
    if "PK604" not in lin.enabled:
        return
    name = _guessed_array(node.test)
    if name is None or not _in_chunk_handler(lin, name):
        return
    if node.__class__ is ast.IfExp:
        body, orelse = [node.body], [node.orelse]
        ints = (_int(node.body), _int(node.orelse))
        guess = (None not in ints and ints[0] != ints[1]) or _picks_axis(body, name) or _picks_axis(orelse, name)
    else:
        body, orelse = node.body, node.orelse
        if _raises(body) or _raises(orelse):
            return
        guess = _picks_axis(body, name) or _picks_axis(orelse, name)
    if not guess:
        return
    lin.report("PK604", node, f"axis of `{name}` guessed from its shape in a stream chunk: a chunk with fewer "
                              "samples (frames) than channels (codebooks) takes the wrong axis")
