"""The reference's own rounding noise: the floor a clean port's error is judged against.

Two independent implementations of one model compute the same sums in another
order, so in float32 they part by rounding noise, and that noise grows through a
deep stack: each convolution or projection adds about ``u * sqrt(K)`` relative
error (``u`` the dtype's unit roundoff, ``K`` the op's reduction length: in
channels times kernel taps), and a later module that divides by a small norm or
subtracts nearly equal values carries it past ``assert_close``'s ``rtol``
(measured on the Mimi pair, transformers vs moshi with the candidate's convs as
unfold + matmul: 0 elements beyond tolerance at the first encoder conv, relative
error 1.7e-7, growing to an elementwise failure further down). A fixed tolerance
cannot tell that growth from a fault; the reference's own noise can.

:func:`measure_floor` runs the reference once more in float64 (a cast copy; float
inputs cast; the default dtype float64 during the run) and records, per captured
module, the relative error of the reference's native-dtype output against its
float64 output: ``floor = ||ref - ref64|| / ||ref64||``, the rounding the
reference itself carries to that point. A candidate whose error against the
reference is within :data:`NOISE_FACTOR` times the floor (or, where the floor
is not measurable, :func:`op_floor`'s ``u * sqrt(K)``) is at the noise level
(:func:`within_noise`): the parity probe neither flags it nor blames it for
creating an error a later module carries (:mod:`porting_kit.probes.layers`). This applies
to the elementwise tolerances (float32 / float64) only: bf16 / fp16 compare tensor-level
against a bound measured on clean pairs, and their own rounding (~1e-2) times
``NOISE_FACTOR`` would hide real faults (a missing q/k permutation is 7e-2 in bf16).

Calibration (float32, CPU, ``benchmarks/noise_floor.py``; ratio = candidate error / floor,
the largest over the aligned modules; the output's floor in brackets):

=======================================  ======  =========================================
clean pair                               ratio   output rel err (floor)
=======================================  ======  =========================================
Llama, Meta vs HF                        0.89    3.6e-7 (4.1e-7)
EnCodec, Meta vs HF                      0       bit-exact (5.1e-7)
Mimi decode, moshi vs HF                 0.59    3.2e-7 (5.3e-7)
Mimi roundtrip, moshi vs HF              0.34    3.5e-7 (1.0e-6)
Mimi roundtrip, convs as unfold+matmul   1.34    1.1e-6 (1.0e-6; max |diff| 3.1e-5: over rtol)
DAC roundtrip / codes, Descript vs HF    1.20    2.2e-7 (1.8e-7) / 2.1e-7 (1.7e-7)
=======================================  ======  =========================================

On CUDA the float32 floor is IEEE float32's: a check runs with TF32 off (:mod:`porting_kit.probes.tf32`;
with TF32 convs the reference's own error is 1e2..1e3x a clean candidate's and a planted fault
sits inside it, docs/dtype.md). ``NOISE_FACTOR`` = 8 leaves 6x over the worst clean ratio; the planted conversion faults
of ``tests/checks/test_real_pairs.py`` (one conv's weight scaled by 1 + 2e-5 in the op-order
roundtrip, a bias by 1.0001) stay located.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

#: Unit roundoff ``u`` (half the machine epsilon) by dtype name.
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
#: A candidate error up to this many times the reference's own floor is noise: the candidate
#: rounds as much as the reference does, in another order (their errors add; a different
#: kernel, e.g. a conv as unfold + matmul, rounds up to a few times more). Calibrated on the
#: clean real pairs (largest measured ratio 1.34; see the module docstring).
NOISE_FACTOR = 8.0


@dataclass
class NoiseFloor:
    """The reference's own rounding noise per captured module.

    Attributes
    ----------
    dtype : str
        The reference's dtype name (the floor is that dtype's rounding).
    rel : dict of str to float
        Reference record key -> ``||ref - ref64|| / ||ref64||`` of that module's output.
    output_rel : float or None
        The same for the compared output (``run_reference``'s result).
    """

    dtype: str
    rel: dict[str, float] = field(default_factory=dict)
    output_rel: float | None = None

    def bound(self, key: str | None, module: Any = None) -> float:
        """The largest relative error that is noise at ``key`` (``None``: the output).

        ``NOISE_FACTOR`` times the larger of the measured floor and the op's own
        :func:`op_floor` (the floor of a single op the float64 run saw exact).
        """
        measured = self.output_rel if key is None else self.rel.get(key)
        return NOISE_FACTOR * max(measured or 0.0, op_floor(module, self.dtype))


def op_floor(module: Any, dtype: str) -> float:
    """Expected relative rounding of one op: ``u * sqrt(K)``, ``K`` its reduction length.

    Parameters
    ----------
    module : torch.nn.Module or None
        ``K`` is the fan-in of its ``weight`` (``weight[0].numel()``: in channels times
        kernel taps for a conv, in features for a linear; a transposed conv's
        ``weight.shape[0] * taps / stride`` is bounded by the same); 1 without one.
    dtype : str
        Dtype name (:data:`UNIT_ROUNDOFF`; unknown names count as float32).
    """
    u = UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["float32"])
    w = getattr(module, "weight", None) if module is not None else None
    k = 1
    if w is not None and getattr(w, "dim", lambda: 0)() >= 2:
        taps = int(w[0, 0].numel())  # kernel taps (1 for a linear)
        # a conv's weight is (out, in, taps); a transposed conv's (in, out, taps): the sum runs over in
        k = int(w.shape[0] if "Transpose" in type(module).__name__ else w.shape[1]) * taps
    return u * math.sqrt(max(k, 1))


def within_noise(rel_err: float, bound: float) -> bool:
    """Whether a relative error (unitless) is at the noise level ``bound`` (:meth:`NoiseFloor.bound`)."""
    return math.isfinite(rel_err) and rel_err <= bound


def _to64(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to64(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to64(v) for v in x)
    return x


def _rel(a, b) -> float | None:
    """``||a - b|| / ||b||`` in float64, or ``None`` when the shapes differ or ``b`` is zero."""
    if a is None or b is None or tuple(a.shape) != tuple(b.shape) or not a.is_floating_point():
        return None
    a64, b64 = a.double(), b.to(a.device).double()
    den = float(b64.norm())
    if not math.isfinite(den):
        return None
    num = float((a64 - b64).norm())
    return num / den if den > 0 else (0.0 if num == 0 else None)


def measure_floor(reference: Any, inputs: Any, run: Callable[[Any, Any], Any], keys: set[str],
                  native: dict[str, tuple[Any, Any]], native_output: Any = None) -> NoiseFloor | None:
    """Run the reference in float64 and measure its own rounding at ``keys`` and the output.

    Parameters
    ----------
    reference : torch.nn.Module
        The reference model (not modified: a cast copy runs).
    inputs : Any
        The spec's inputs; floating tensors (in dicts, lists, tuples) are cast to float64.
    run : callable
        ``run(model, inputs) -> output tensor`` (the spec's ``run_reference``).
    keys : set of str
        Record keys to capture (:func:`porting_kit.probes.capture.capture_full`).
    native : dict
        ``key -> (input, output)`` captured from the reference in its own dtype.
    native_output : torch.Tensor, optional
        The reference's output in its own dtype.

    Returns
    -------
    NoiseFloor or None
        ``None`` when the reference is already float64, or cannot run in float64 (a
        forward that builds float32 tensors of its own and mixes them, complex buffers):
        then no floor is measured and the caller uses :func:`op_floor` alone.
    """
    import torch

    from porting_kit.probes.capture import capture_full
    from porting_kit.probes.norms import cast_copy
    from porting_kit.probes.tolerance import dtype_name

    p = next((t for t in [*reference.parameters(), *reference.buffers()] if t.is_floating_point()), None)
    if p is None or p.dtype == torch.float64:
        return None
    dtype = dtype_name(p.dtype)
    old = torch.get_default_dtype()
    try:
        m64 = cast_copy(reference, torch.float64)
        for mod in m64.modules():  # tensors cached as plain attributes (a codebook's embed) too
            for k, v in list(vars(mod).items()):
                if isinstance(v, torch.Tensor) and v.is_floating_point():
                    mod.__dict__[k] = v.double()
        torch.set_default_dtype(torch.float64)
        with capture_full(m64, keys) as got, torch.no_grad():
            out64 = run(m64, _to64(inputs))
    except Exception:  # noqa: BLE001 - a best-effort measurement: no floor, op_floor alone
        return None
    finally:
        torch.set_default_dtype(old)
    floor = NoiseFloor(dtype)
    for key, (_, out) in got.items():
        r = _rel(native.get(key, (None, None))[1], out)
        if r is not None:
            floor.rel[key] = r
    if native_output is not None and isinstance(out64, torch.Tensor):
        floor.output_rel = _rel(native_output, out64)
    return floor
