"""float32 parity on CUDA with TF32 on vs off: the clean DAC pair's error against the reference's
own float64 floor, and a planted fault's (``bias_scale``) at its module (docs/dtype.md, TF32).

Usage (a CUDA machine, descript-audio-codec installed): ``python benchmarks/tf32_parity.py``.
Prints one line per (variant, TF32 setting, module): the candidate's ``||a-b||/||b||``, the
reference's own ``||ref - ref64|| / ||ref64||``, their ratio, and the elements beyond the float32
``assert_close`` tolerance; then the check's verdict with TF32 as PyTorch defaults it (convs on).
"""

from __future__ import annotations

import copy
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from porting_kit.context import CheckContext  # noqa: E402
from porting_kit.load import load_pair, run_side  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

DAC = str(ROOT / "examples" / "dac_pair.py")
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"
SITES = [("encoder.block.1.res_unit1", "encoder.block.2.block.0"),   # the clean pair's TF32 false alarm
         ("encoder.block.0.conv1", "encoder.block.1.block.4")]        # bias_scale's fault


def _outputs(model, names, spec, side, inputs):
    got, hooks = {}, []
    for n in names:
        mod = model.get_submodule(n)
        hooks.append(mod.register_forward_hook(lambda m, a, o, n=n: got.__setitem__(n, o.detach().clone())))
    with torch.no_grad():
        out = run_side(spec, side, model, inputs)
    for h in hooks:
        h.remove()
    got[""] = out.detach().clone()
    return got


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@contextmanager
def _tf32(on: bool):
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


def measure(variant):
    spec = load_spec(DAC, variant=variant)
    ctx = CheckContext(spec=spec, device=DEVICE, dtype="float32")
    pair = load_pair(ctx)
    ref64 = copy.deepcopy(pair.reference).double()
    inputs64 = {k: v.double() if v.is_floating_point() else v for k, v in pair.inputs.items()}
    r64 = _outputs(ref64, [r for r, _ in SITES], spec, "reference", inputs64)
    for on in (True, False):
        with _tf32(on):
            r = _outputs(pair.reference, [r for r, _ in SITES], spec, "reference", pair.inputs)
            c = _outputs(pair.candidate, [c for _, c in SITES], spec, "candidate", pair.inputs)
        for rn, cn in SITES + [("", "")]:
            err, floor = _rel(c[cn], r[rn]), _rel(r[rn], r64[rn])
            beyond = int((~torch.isclose(c[cn], r[rn], rtol=1.3e-6, atol=1e-5)).sum())
            print(f"{variant or 'clean':10s} tf32={'on ' if on else 'off'} {rn or '<output>':28s} "
                  f"cand_rel={err:.3g} floor64={floor:.3g} ratio={err / floor if floor else float('nan'):.3g} "
                  f"beyond_fp32_tol={beyond}/{r[rn].numel()}")


def verdict_with_tf32_on(variant):
    import porting_kit.probes.tf32 as tf32
    from porting_kit.runner import run_check

    @contextmanager
    def keep(device):  # the check as it ran before: TF32 as PyTorch defaults it
        yield None

    orig, tf32.ieee_float32 = tf32.ieee_float32, keep
    try:
        rep = run_check(DAC, variant=variant, only="parity", device=DEVICE, dtype="float32")
    finally:
        tf32.ieee_float32 = orig
    fd = rep.by_code("parity.first_divergence")
    print(f"{variant or 'clean':10s} tf32=on (PyTorch default) check: {rep.codes()} "
          f"{fd[0].where.reference if fd else ''}")


if __name__ == "__main__":
    print(torch.__version__, DEVICE, "cudnn.allow_tf32 default:", torch.backends.cudnn.allow_tf32)
    for v in (None, "bias_scale"):
        measure(v)
        verdict_with_tf32_on(v)
