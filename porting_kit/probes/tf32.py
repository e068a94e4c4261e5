"""TF32 on CUDA: float32 comparisons run with IEEE float32 convs and matmuls.

On Ampere and later GPUs PyTorch lets cuDNN convolutions use TF32 by default
(``torch.backends.cudnn.allow_tf32`` is True; matmuls are IEEE unless
``torch.backends.cuda.matmul.allow_tf32`` / ``torch.set_float32_matmul_precision("high")``
allow it): the conv rounds its float32 inputs to a 10-bit mantissa (unit roundoff
``2**-11``, 8000x float32's). Two implementations whose conv inputs differ by float32
rounding (1e-7 relative) then round some inputs to different TF32 values, and their
outputs part by 1e-5..1e-3: the clean DAC pair (Descript vs transformers) failed
``assert_close``'s float32 tolerance at its second residual unit on an H200 (181 / 6400
elements, ``||a-b||/||b||`` 1.9e-5) while a planted fault in the same encoder (a conv bias
scaled by 1.0001) is 5.5e-5 there: no tolerance or noise floor of TF32 size tells them apart.

So a check in float32 on CUDA computes float32: :func:`ieee_float32` turns TF32 off for
the check and restores the user's settings afterwards (the report records both under
``extras["tf32"]``); bf16 / fp16 are untouched (TF32 applies to float32 only). See
docs/dtype.md, "float32 on CUDA: TF32".
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


def tf32_settings() -> dict[str, object]:
    """The process's TF32 switches: ``cudnn_allow_tf32`` (convs), ``matmul_allow_tf32`` and
    ``float32_matmul_precision`` (``"highest"`` is IEEE; ``"high"`` / ``"medium"`` allow TF32 / bf16)."""
    import torch

    return {"cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def tf32_allowed(settings: dict[str, object]) -> bool:
    """Whether ``settings`` (:func:`tf32_settings`) let any float32 conv or matmul round to TF32."""
    return bool(settings["cudnn_allow_tf32"] or settings["matmul_allow_tf32"]
                or settings["float32_matmul_precision"] != "highest")


@contextmanager
def ieee_float32(device: str) -> Iterator[dict[str, object] | None]:
    """Run the block with TF32 off when ``device`` is CUDA; the settings are restored after.

    Yields
    ------
    dict or None
        ``{"user": <settings before>, "during_check": <settings inside>}`` on CUDA, else ``None``
        (on CPU TF32 does not apply and nothing is changed).
    """
    if not str(device).startswith("cuda"):
        yield None
        return
    import torch

    before = tf32_settings()
    try:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        yield {"user": before, "during_check": tf32_settings()}
    finally:
        torch.set_float32_matmul_precision(str(before["float32_matmul_precision"]))
        torch.backends.cuda.matmul.allow_tf32 = bool(before["matmul_allow_tf32"])
        torch.backends.cudnn.allow_tf32 = bool(before["cudnn_allow_tf32"])
