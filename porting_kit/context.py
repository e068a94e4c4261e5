"""The state one check run shares between families.

Data flows one way (STYLE.md): the runner builds a :class:`CheckContext` from a
spec; the parity family loads weights and captures; later families (rope,
norm, audio) read what earlier ones left in ``ctx.state`` through the helper
functions of the module that produced it (e.g. ``probes.layers.get_result``),
never by reaching back up the chain themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from porting_kit.spec import Spec


@dataclass
class CheckContext:
    """Inputs and shared state of one ``porting-kit check`` run.

    Attributes
    ----------
    spec : Spec
        The loaded port spec.
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; models and inputs are moved there.
    dtype : str | None
        Serving dtype override (``"float32"``, ``"bfloat16"``, ``"float16"``);
        ``None`` keeps the models' own dtype.
    state : dict
        Results computed once and shared (the loaded pair, the parity result).
        Keys are owned by the module that writes them.
    first_divergence : dict | None
        Set by the parity family; copied into the report.
    extras : dict
        Data for notebooks/plots (aligned-module table, per-layer errors...).
    progress : callable
        ``progress(text)`` to report a stage; a no-op by default.
    tp : int
        Tensor-parallel size for the ``tp`` family (``--tp N``); 1 (the default) skips it.
    families : tuple of str
        The families this run will run (set by the runner). The parity pass reads it to
        record, in its own forward, the facts the prefill families (rope, norm) need
        (:mod:`porting_kit.probes.prefill`), so they run no forward of their own; empty:
        nothing extra is recorded.
    """

    spec: Spec
    device: str = "cpu"
    dtype: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    first_divergence: dict[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    progress: Callable[[str], None] = lambda text: None
    tp: int = 1
    families: tuple[str, ...] = ()

    def torch_dtype(self):
        """The ``torch.dtype`` for :attr:`dtype`, or ``None`` when no override was given.

        Returns
        -------
        torch.dtype or None
            ``float32`` / ``fp32``, ``bfloat16`` / ``bf16``, ``float16`` / ``fp16``.

        Raises
        ------
        InputError
            An unknown dtype name (``--dtype``): exit 2.
        """
        if self.dtype is None:
            return None
        import torch

        from porting_kit.errors import InputError

        table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
        if self.dtype not in table:
            raise InputError(f"--dtype {self.dtype!r}: use float32, bfloat16 or float16")
        return table[self.dtype]

    def check_device(self) -> None:
        """Refuse a CUDA device this machine does not have, before any model is built.

        Raises
        ------
        InputError
            ``--device cuda[:N]`` with no CUDA build or device, or an index at or past
            ``torch.cuda.device_count()`` (one line, exit 2; torch's own error is several lines
            and poisons the CUDA context). Other device names are left to torch (``.to``).
        """
        import torch

        from porting_kit.devices import cuda_missing
        from porting_kit.errors import InputError

        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError) as exc:
            raise InputError(f"--device {self.device!r}: {str(exc).splitlines()[0]}") from exc
        if dev.type != "cuda":
            return
        why = cuda_missing(dev.index)
        if why is not None:
            raise InputError(f"--device {self.device}: {why}")
