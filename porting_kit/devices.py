"""Whether this machine has the CUDA device a run asks for: one answer for ``check --device``
(:meth:`porting_kit.context.CheckContext.check_device`, exit 2) and validate's GPU tier
(:func:`porting_kit.scaffold.validate.gpu_tier`, ``gpu.skipped``).

torch is imported inside the function, so that ``import porting_kit`` stays light.
"""

from __future__ import annotations


def cuda_missing(index: int | None = None) -> str | None:
    """Why CUDA device ``index`` cannot be used here, or ``None`` when it can.

    Parameters
    ----------
    index : int or None
        The device index (``cuda:1`` -> 1); ``None`` for plain ``cuda`` (the current device).

    Returns
    -------
    str or None
        One clause, no trailing period: torch is not installed, no CUDA device (a CPU build, or
        ``torch.cuda.is_available()`` False), or ``index`` at or past
        ``torch.cuda.device_count()``; ``None`` when the device exists.
    """
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install 'porting-kit[torch]')"
    if not torch.cuda.is_available():
        return f"no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is False)"
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        return f"this machine has {count} CUDA device(s) (cuda:0 to cuda:{count - 1})"
    return None
