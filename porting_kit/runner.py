"""Run the check families of a spec and collect one :class:`~porting_kit.report.findings.Report`.

This is the one library call behind ``porting-kit check``, the notebooks and
the tests: :func:`run_check`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Report, skip
from porting_kit.spec import Spec, load_spec

#: Family prefix -> module under porting_kit.checks, in run order (static config first,
#: then parity, the diagnoses that explain its divergence, tensor-parallel parity, decode steps and
#: sampling, audio and reference-audio features, then the engine contract, last the end-to-end
#: quality of synthesised takes).
FAMILIES: dict[str, str] = {
    "config": "config",
    "parity": "parity",
    "rope": "rope",
    "norm": "norm",
    "tp": "tp",
    "decode": "decode",
    "sampling": "sampling",
    "hop": "hop",
    "channel": "channel",
    "features": "features",
    "dtype": "dtype",
    "batch": "batch",
    "rng": "rng",
    "lifecycle": "lifecycle",
    "cudagraph": "cudagraph",
    "quality": "quality",
}


def _log_progress(text: str) -> None:
    """Default progress: one INFO record on the ``porting_kit.progress`` logger."""
    import logging

    logging.getLogger("porting_kit.progress").info("check: %s", text)


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """``"rope,norm"`` -> ``["rope", "norm"]`` in run order.

    Parameters
    ----------
    only : str, iterable of str, or None
        Family names, comma-separated or as a list; None selects every family.

    Returns
    -------
    list of str
        The selected families, in :data:`FAMILIES` order.

    Raises
    ------
    InputError
        An unknown family name, or none given.
    """
    if only is None:
        return list(FAMILIES)
    names = [s.strip() for s in (only.split(",") if isinstance(only, str) else only) if s.strip()]
    if not names:
        raise InputError(f"--only: no check family given; known: {', '.join(FAMILIES)}")
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise InputError(f"--only: unknown check family {', '.join(unknown)}; "
                         f"known: {', '.join(FAMILIES)}")
    return [f for f in FAMILIES if f in names]


def run_check(spec: Spec | str | None = None, *, example: str | None = None,
              variant: str | None = None, only: str | Iterable[str] | None = None,
              device: str = "cpu", dtype: str | None = None, trust_remote_code: bool = False,
              progress: Callable[[str], None] | None = None, tp: int = 1) -> Report:
    """Run every check family that the spec can serve and return the report.

    Parameters
    ----------
    spec : Spec or str or None
        A loaded spec, a path to a spec file, or ``None`` for the embedded
        default example (or ``example``).
    example, variant : str, optional
        See :func:`porting_kit.spec.load_spec`.
    only : str or list of str, optional
        Restrict to these families (``"parity,rope"``).
    device : str
        Torch device for the models and inputs (``"cpu"``, ``"cuda"``).
    dtype : str, optional
        Serving dtype (``float32``, ``bfloat16``, ``float16``); default keeps the
        models' dtype. Tolerances follow the dtype.
    trust_remote_code : bool, default False
        Allow a local reference directory whose config needs remote code
        (``--trust-remote-code``); never implicit.
    progress : callable, optional
        Called with a short text as each family (and each long stage) starts; by default the
        text goes to the ``porting_kit.progress`` logger at INFO (``logging.basicConfig(level=
        logging.INFO)`` shows it in a notebook or a log).
    tp : int, default 1
        Tensor-parallel size for the ``tp`` family (``--tp N``): N ranks run the spec's
        ``candidate_tp``; 1 skips the family.

    Returns
    -------
    Report
        ``report.status`` is ``fail`` iff a finding failed; ``report.exit_code``
        is 0 or 1.

    Raises
    ------
    InputError
        The tool could not run (exit 2): bad spec, weights that cannot be
        loaded, unknown family or dtype, a CUDA device this machine lacks, ``tp``
        below 1, a tensor-parallel rank that failed or timed out.
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"--tp {tp!r}: give a tensor-parallel size of 1 or more")
    if not isinstance(spec, Spec):
        spec = load_spec(spec, example=example, variant=variant, trust_remote_code=trust_remote_code)
    families = parse_only(only)
    ctx = CheckContext(spec=spec, device=device, dtype=dtype, progress=progress or _log_progress, tp=tp,
                       families=tuple(families))
    ctx.torch_dtype()  # validate the dtype name before any work
    ctx.check_device()
    report = Report(command="check")
    t_all = time.perf_counter()
    from porting_kit.probes.tf32 import ieee_float32, tf32_allowed

    # float32 on CUDA compares IEEE float32: TF32 convs part two clean ports by 1e-5..1e-3
    # (docs/dtype.md); the user's settings come back after the check
    with ieee_float32(device) as tf32:
        if tf32 is not None:
            ctx.extras["tf32"] = tf32
            if tf32_allowed(tf32["user"]):
                ctx.progress("float32 on CUDA: TF32 off for the check, restored after (docs/dtype.md)")
        _run_families(ctx, families, report)
    report.timing["total"] = time.perf_counter() - t_all
    report.first_divergence = ctx.first_divergence
    report.extras = ctx.extras
    report.alignment = ctx.extras.get("alignment_report")
    report.quality = ctx.extras.get("quality_summary")
    return report


def _run_families(ctx: CheckContext, families: list[str], report: Report) -> None:
    for fam in families:
        ctx.progress(fam)
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(f"porting_kit.checks.{FAMILIES[fam]}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("porting_kit.checks"):
                report.findings.append(skip(fam, f"check family {fam!r} is not available"))
                continue
            raise InputError(f"check family {fam!r} needs the package {exc.name!r}; "
                             "install porting-kit[torch,audio]") from exc
        findings: list[Finding] = module.run(ctx)
        report.findings.extend(findings)
        report.timing[fam] = time.perf_counter() - t0
