"""PK4xx codec precision: codecs, vocoders and audio decoders run in float32.

Under ``torch.autocast`` (or after ``.half()`` / ``.bfloat16()`` /
``.to(torch.bfloat16)``) a codec's convolutions and upsamplers run in 16-bit
and the waveform loses tens of dB of SNR: audible hiss that no shape check
catches. ``torch.autocast(..., enabled=False)`` (or ``dtype=torch.float32``) is the fix
and is not flagged.
A callee counts as a codec when its dotted name mentions codec, vocoder,
decoder, code2wav, token2wav, audio/speech tokenizer or a known codec family
(BigVGAN, HiFi-GAN, WavTokenizer, SNAC, Mimi, EnCodec, DAC), or is a
``.decode()`` whose receiver is not a text tokenizer, processor or VAE.
"""

from __future__ import annotations

import ast
import re

from porting_kit.lint.astutil import dotted, is_false, keyword

_CODEC = re.compile(r"(codec|vocoder|decoder|code2wav|token2wav|audio_tokenizer|speech_tokenizer|bigvgan|"
                    r"hifigan|hifi_gan|wavtokenizer|snac|mimi|encodec|(^|\.)dac(\.|$))", re.IGNORECASE)
_NOT_AUDIO = re.compile(r"(tokenizer|processor|vae|text|string|bytes|json)", re.IGNORECASE)
_HALF_DTYPES = frozenset({"bfloat16", "float16", "half"})


def _is_autocast_call(node: ast.AST) -> bool:
    if node.__class__ is not ast.Call:
        return False
    if not dotted(node.func).endswith("autocast"):
        return False
    dtype = keyword(node, "dtype")
    if dtype is not None and dotted(dtype).rpartition(".")[2] in ("float32", "float", "float64"):
        return False  # an fp32 autocast upcasts: that is the fix, not the fault
    return not is_false(keyword(node, "enabled"))


def with_autocast(node: ast.With) -> int:
    """Number of enabled ``autocast`` context managers in a ``with`` statement.

    Parameters
    ----------
    node : ast.With or ast.AsyncWith

    Returns
    -------
    int
        Items whose context expression is a call ending in ``autocast`` and not
        ``enabled=False`` / ``dtype=torch.float32`` (``float``, ``float64``): those upcast,
        which is the fix.
    """
    return sum(1 for item in node.items if _is_autocast_call(item.context_expr))


def decorator_autocast(node: ast.FunctionDef) -> int:
    """1 when the function is decorated with an enabled ``@torch.autocast(...)``.

    Parameters
    ----------
    node : ast.FunctionDef or ast.AsyncFunctionDef

    Returns
    -------
    int
        1 or 0 (added to the frame's autocast depth).
    """
    return 1 if any(_is_autocast_call(d) for d in node.decorator_list) else 0


def is_codec(name: str) -> bool:
    """Whether the dotted callee ``name`` is a codec / vocoder / audio decoder (module docstring).

    Parameters
    ----------
    name : str
        A dotted call name (``self.codec.decode``).

    Returns
    -------
    bool
    """
    if _CODEC.search(name):
        return True
    head, _, last = name.rpartition(".")
    return bool(head) and last.startswith("decode") and not _NOT_AUDIO.search(head)


def on_call_under_autocast(lin, node: ast.Call) -> None:
    """Report PK401 for a codec call made under an enabled autocast.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        Its current frame has ``autocast > 0`` (the engine calls this only then).
    node : ast.Call
        Flagged when its dotted callee is a codec (module docstring) and not itself an
        ``autocast`` / ``.float`` / ``.to`` call.
    """
    name = dotted(node.func)
    if is_codec(name) and not name.endswith(("autocast", ".float", ".to")):
        lin.report("PK401", node, f"`{name}(...)` runs under torch.autocast: the codec decodes in 16-bit")


def _dtype_name(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    if node.__class__ is ast.Attribute and node.value.__class__ is ast.Name and node.value.id == "torch":
        return node.attr
    return None


def _half(lin, node: ast.Call) -> None:
    func = node.func
    if func.__class__ is not ast.Attribute:
        return
    receiver = dotted(func.value)
    if not _CODEC.search(receiver):
        return
    if func.attr in ("half", "bfloat16"):
        lin.report("PK402", node, f"`{receiver}.{func.attr}()` casts the codec to 16-bit")
        return
    dtypes = [_dtype_name(a) for a in node.args] + [_dtype_name(keyword(node, "dtype"))]
    bad = [d for d in dtypes if d in _HALF_DTYPES]
    if bad:
        lin.report("PK402", node, f"`{receiver}.{func.attr}(torch.{bad[0]})` casts the codec to 16-bit")


CALLS = {"half": _half, "bfloat16": _half, "to": _half, "type": _half}
