"""What runs during one forward: the running module and chosen torch calls, at the least cost.

The probes that watch a forward from inside (:func:`porting_kit.probes.rotary.capture_qk`,
:func:`porting_kit.probes.norms.capture_functional_norms`, and the parity pass's prefill
facts, :mod:`porting_kit.probes.prefill`, which need both at once) share two instruments:

* :class:`ModuleNamer`: which module of the model is running when a call is recorded,
  read from the Python call stack when asked, instead of a pre and a post hook on every
  submodule: registering two hooks per module of a model with a codec (several hundred
  modules), and running them on every module call, cost more than the forward of a small
  model on a GPU.
* :func:`tap_ops`: one :class:`torch.overrides.TorchFunctionMode` that hands the torch
  functions a probe asked for to its handlers and runs every other call straight on. An
  active mode adds a Python call to every torch function of the forward (about 4 us on a
  CPU core), so probes share one mode, and it leaves the mode stack as soon as its
  recorders are done (rope's q/k: after layer 0's attention). Probes that must see the
  whole forward (functional norms) use wrappers on the few functions they watch instead
  (:class:`porting_kit.probes.norms.FunctionalNormRecorder`).

Facts only: handlers record what they see; no verdict is made here.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class ModuleNamer:
    """Names the innermost module of a model that is running when a probe sees a call.

    Found by walking the Python call stack from the caller outwards to the first frame
    whose ``self`` is one of the model's modules (``nn.Module._call_impl`` runs with
    ``self`` the module being called, as do the module's own methods). Nothing is hooked:
    the cost is paid only when a probe asks (once per recorded call), not on every module
    call of the forward, as per-module or global forward hooks would.

    Parameters
    ----------
    names : dict of int to str
        ``id(module) -> qualified name`` (:func:`module_names`).
    default : str, default ""
        The name when no module of the model is running (a call outside any forward).
    """

    def __init__(self, names: dict[int, str], default: str = "") -> None:
        self.names = names
        self.default = default

    def innermost(self) -> str:
        """The qualified name of the innermost running module of the model."""
        frame = sys._getframe(1)
        while frame is not None:
            obj = frame.f_locals.get("self")
            if obj is not None:
                name = self.names.get(id(obj))
                if name is not None:
                    return name
            frame = frame.f_back
        return self.default


def module_names(model, root: str = "<root>", walk=None) -> dict[int, str]:
    """``id(module) -> name`` for :class:`ModuleNamer`.

    Parameters
    ----------
    model : torch.nn.Module
        Walked once with ``named_modules()``.
    root : str, default "<root>"
        The name given to ``model`` itself (``named_modules`` calls it ``""``).
    walk : list of (str, torch.nn.Module), optional
        ``list(model.named_modules())`` when the caller has it.

    Returns
    -------
    dict of int to str
    """
    return {id(m): n or root for n, m in (model.named_modules() if walk is None else walk)}


#: A handler: ``handler(func, args, kwargs, nested)``; ``nested`` is True when the call runs
#: inside another tapped call (``F.layer_norm`` calling ``torch.layer_norm``).
Handler = Callable[[Any, tuple, dict, bool], None]


@contextmanager
def tap_ops(handlers: dict[Any, list[Handler]]) -> Iterator[None]:
    """Hand chosen torch functions to handlers while the ``with`` block runs (one mode).

    Parameters
    ----------
    handlers : dict of callable to list of Handler
        Torch function (``torch.nn.functional.scaled_dot_product_attention``,
        ``torch.matmul``, ...) -> the handlers to call, in order, before it runs. A
        recorder that has what it needs removes its entries; once the table is empty the
        mode leaves the torch-function stack at the next module call (the rest of the
        forward runs without it). Empty from the start: no mode is entered at all.

    Raises
    ------
    BaseException
        Whatever a handler raises propagates out of the tapped call (a probe's
        ``ForwardStopped`` ends the forward early).

    Notes
    -----
    Leaving early pops the mode with ``torch._C._pop_torch_function_stack`` only when it is
    the innermost mode (a model's own mode entered above it is left alone, and the mode
    then stays, doing nothing, until the block ends).
    """
    if not handlers:
        yield
        return
    import torch
    from torch.nn.modules import module as nn_module

    mode = _op_tap_class()(handlers)
    left = [False]
    _CAN_LEAVE = all(hasattr(torch._C, f) for f in (  # private API (torch >= 2.0): else it stays
        "_len_torch_function_stack", "_get_function_stack_at", "_pop_torch_function_stack"))

    def leave_when_done(module, args) -> None:
        if handlers or left[0] or not _CAN_LEAVE:
            return
        n = torch._C._len_torch_function_stack()
        if n and torch._C._get_function_stack_at(n - 1) is mode:
            torch._C._pop_torch_function_stack()
            left[0] = True
            hook.remove()  # safe here: torch iterates over a copy of the hooks

    mode.__enter__()
    hook = nn_module.register_module_forward_pre_hook(leave_when_done)
    try:
        yield
    finally:
        hook.remove()
        if not left[0]:
            mode.__exit__(None, None, None)


_OP_TAP: list[type] = []  # the mode class, built on first use (torch imported lazily)


def _op_tap_class() -> type:
    """The ``TorchFunctionMode`` subclass behind :func:`tap_ops` (built once)."""
    if _OP_TAP:
        return _OP_TAP[0]
    from torch.overrides import TorchFunctionMode

    class OpTap(TorchFunctionMode):
        """One mode for all probes of a forward: a tapped call's handlers run before it;
        every other torch call runs straight on."""

        def __init__(self, handlers: dict[Any, list[Handler]]) -> None:
            super().__init__()
            self.handlers = handlers
            self.depth = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            hs = self.handlers.get(func)
            if hs is None:
                return func(*args, **(kwargs or {}))
            kwargs = kwargs or {}
            nested = self.depth > 0
            for h in hs:
                h(func, args, kwargs, nested)
            self.depth += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.depth -= 1

    _OP_TAP.append(OpTap)
    return OpTap
