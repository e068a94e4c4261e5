"""Comparison tolerances, chosen by dtype.

fp32 / fp64 follow ``torch.testing.assert_close``'s defaults and are elementwise:
``|a - b| <= atol + rtol * |b|`` (fp32: rtol 1.3e-6, atol 1e-5; fp64: rtol 1e-7,
atol 1e-7). Two independent implementations of the same fp32 model differ by
op order only, which stays well inside these bounds (measured: the Meta-vs-HF
Llama pair's logits max |diff| 5e-7; the embedded example's 1e-6 or less).

bf16 / fp16 cannot use elementwise bounds across implementations: a fused
qkv matmul, a different reduction order or an fp32 accumulate change single
elements by several ulps. They use a tensor-level relative error
``||a - b||_2 / ||b||_2 <= rel``, set from a measurement of clean independent
pairs (``python benchmarks/check_overhead.py --measure-tolerance``): the
Meta-vs-HF Llama pair (REAL_PAIRS.md) gives a largest per-module relative error
of 1.1e-2 in bf16 and 1.2e-3 in fp16 (its logits 6.5e-3 and 8.2e-4); the
embedded example's port is bit-exact in both. The defaults are ``rel = 2e-2``
(bf16, 1.8x the measured worst module) and ``5e-3`` (fp16, 4x). Faults that
matter exceed them: a missing q/k permutation gives 7e-2 in bf16, a wrong
rope_theta 3e-1 on the embedded example. Weaker faults sit inside bf16 noise
at the whole-module level; the rope/norm diagnoses probe those directly.

A spec may override them with ``tolerances = {"float32": {"rtol": 1e-5, "atol": 1e-4},
"bfloat16": {"rel": 0.05}}`` (keys: dtype names; values: the fields of
:class:`Tolerance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from porting_kit.errors import InputError


@dataclass(frozen=True)
class Tolerance:
    """Tolerance for one dtype.

    Attributes
    ----------
    dtype : str
        ``float32``, ``float64``, ``bfloat16`` or ``float16``.
    rtol, atol : float
        Elementwise bounds (fp32/fp64), as ``torch.testing.assert_close``.
    rel : float or None
        Tensor-level relative error bound ``||a-b|| / ||b||`` (bf16/fp16);
        ``None`` for the elementwise dtypes.
    """

    dtype: str
    rtol: float
    atol: float
    rel: float | None = None

    @property
    def elementwise(self) -> bool:
        """True for the elementwise dtypes (fp32 / fp64: ``rel`` is ``None``)."""
        return self.rel is None

    def tensor_bound(self, numel: int, ref_norm: float) -> float:
        """Upper bound on ``||a - b||_2`` implied by the tolerance.

        Parameters
        ----------
        numel : int
            Elements in the tensor (``n``); values below 1 count as 1.
        ref_norm : float
            2-norm of the reference tensor, ``||b||``, in the tensor's units.

        Returns
        -------
        float
            Elementwise: ``atol * sqrt(n) + rtol * ||b||``. Tensor-level: ``rel * ||b||``.

        Notes
        -----
        If every element satisfies ``|a-b| <= atol + rtol|b|`` then
        ``||a-b|| <= atol*sqrt(n) + rtol*||b||`` (triangle inequality), so a larger
        (sketched) norm proves a violation without the full tensors.
        """
        if self.rel is not None:
            return self.rel * ref_norm
        return self.atol * math.sqrt(max(numel, 1)) + self.rtol * ref_norm

    def describe(self) -> str:
        """The tolerance in words, for messages and evidence.

        Returns
        -------
        str
            ``"float32: |a-b| <= 1e-05 + 1.3e-06*|b|"`` or ``"bfloat16: ||a-b||/||b|| <= 0.02"``.
        """
        if self.rel is not None:
            return f"{self.dtype}: ||a-b||/||b|| <= {self.rel:g}"
        return f"{self.dtype}: |a-b| <= {self.atol:g} + {self.rtol:g}*|b|"


DEFAULTS: dict[str, Tolerance] = {
    "float64": Tolerance("float64", rtol=1e-7, atol=1e-7),
    "float32": Tolerance("float32", rtol=1.3e-6, atol=1e-5),
    "bfloat16": Tolerance("bfloat16", rtol=1.6e-2, atol=1e-5, rel=2e-2),
    "float16": Tolerance("float16", rtol=1e-3, atol=1e-5, rel=5e-3),
}


#: RoPE fingerprint tolerances by the dtype of the captured q/k (``checks/rope.py``):
#: ``gate`` -- relative norm spread under which the q/k map is a rotation at all;
#: ``structure`` -- residual of the best rotation structure (layout, rotary dims);
#: ``angle`` -- max angle error in radians between the candidate's and the reference's angles.
#: ``angle`` for bf16/fp16 is set from ``benchmarks/dtype_matrix.py`` (see the module docstring).
ROPE_TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"gate": 1e-2, "structure": 1e-3, "angle": 2e-3},
    "float64": {"gate": 1e-2, "structure": 1e-3, "angle": 2e-3},
    "float16": {"gate": 2e-2, "structure": 5e-3, "angle": 1e-2},
    "bfloat16": {"gate": 5e-2, "structure": 3e-2, "angle": 5e-2},
}


def dtype_name(dtype: Any) -> str:
    """The dtype's name without the ``torch.`` prefix: ``torch.float32`` -> ``"float32"``.

    Parameters
    ----------
    dtype : torch.dtype or str
        A dtype or its name (a name passes through unchanged).

    Returns
    -------
    str
    """
    return str(dtype).replace("torch.", "")


def tolerance_for(dtype: Any, overrides: dict[str, dict[str, float]] | None = None) -> Tolerance:
    """The tolerance for ``dtype`` (a torch dtype or its name), with the spec's overrides.

    Parameters
    ----------
    dtype : torch.dtype or str
        The compared tensors' dtype. A dtype with no default (integers, complex) gets
        the float32 tolerance.
    overrides : dict of str to dict of str to float, optional
        The spec's ``tolerances``: dtype name -> any of ``rtol``, ``atol``, ``rel``
        (giving ``rel`` makes that dtype's check tensor-level). Every key is validated,
        not only ``dtype``'s.

    Returns
    -------
    Tolerance
        :data:`DEFAULTS` (``torch.testing.assert_close``'s fp32/fp64 defaults; measured
        bf16/fp16 ``rel``, see the module docstring) with the override's fields replaced.

    Raises
    ------
    InputError
        When the overrides are not a dict of dicts, or name an unknown dtype or field,
        or give a value that is not a finite number >= 0 (exit 2).
    """
    name = dtype_name(dtype)
    tol = DEFAULTS.get(name, DEFAULTS["float32"])
    checked = _checked_overrides(overrides)
    if checked.get(name):
        tol = replace(tol, **checked[name])
    return tol


_FIELDS = ("rtol", "atol", "rel")


def _checked_overrides(overrides: Any) -> dict[str, dict[str, float]]:
    """The spec's ``tolerances`` validated whole (every dtype, not only the compared one),
    values as floats. Raises InputError on anything :func:`tolerance_for` cannot use."""
    if not overrides:
        return {}
    if not isinstance(overrides, dict):
        raise InputError(f"tolerances: must be a dict of dtype name -> {{field: value}}, "
                         f"got {type(overrides).__name__}")
    out: dict[str, dict[str, float]] = {}
    for key, over in overrides.items():
        if key not in DEFAULTS:
            raise InputError(f"tolerances: unknown dtype {key!r}; use {', '.join(DEFAULTS)}")
        if not isinstance(over, dict):
            raise InputError(f"tolerances[{key!r}]: must be a dict of {', '.join(_FIELDS)}, "
                             f"got {type(over).__name__}")
        bad = set(over) - set(_FIELDS)
        if bad:
            raise InputError(f"tolerances[{key!r}]: unknown field(s) {', '.join(sorted(map(str, bad)))}; "
                             "use rtol, atol, rel")
        for field_name, value in over.items():
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise InputError(f"tolerances[{key!r}][{field_name!r}]: must be a finite number >= 0, "
                                 f"got {value!r}")
        out[key] = {k: float(v) for k, v in over.items()}
    return out
