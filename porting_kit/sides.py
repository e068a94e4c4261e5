"""Run one side of a loaded pair the way the spec says (shared by the diagnosis checks)."""

from __future__ import annotations

from typing import Any

from porting_kit.errors import InputError


def run_side(spec, side: str, model, inputs: dict) -> Any:
    """Forward ``model`` with the spec's ``run_<side>(model, inputs)`` or ``model(**inputs)``.

    Parameters
    ----------
    spec : porting_kit.spec.Spec
    side : {"reference", "candidate"}
    model : torch.nn.Module
    inputs : dict
        The spec's inputs, already on the device.

    Returns
    -------
    Whatever the forward returns (no gradient is recorded).

    Raises
    ------
    InputError
        The forward raised (the spec cannot be run as written).
    """
    import torch

    with torch.no_grad():
        if spec.has(f"run_{side}"):
            return spec.call(f"run_{side}", model, inputs)
        try:
            return model(**inputs)
        except Exception as exc:
            raise InputError(f"{spec.name}: {side} forward model(**inputs) raised "
                             f"{type(exc).__name__}: {exc}; define run_{side}(model, inputs)") from exc
