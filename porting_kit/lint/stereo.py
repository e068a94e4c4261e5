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
