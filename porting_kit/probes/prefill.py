"""Facts the prefill families take from the parity pass's forward (one forward per side).

The rope and norm families need facts from a forward of each model: the first attention
call's q/k and the reference's cos/sin (rope), the norm modules' calls and the functional
norm calls with their eps (norm). Each used to run its own forward of both models for them.
When the run includes those families (``ctx.families``), the layer-parity pass
(:func:`porting_kit.probes.layers.get_result`) records them in its own first forward
through :func:`capture_prefill_facts` and leaves them in ``ctx.state["prefill_facts"]``;
the families read them with :func:`get_facts` and run a forward of their own only when
the facts are absent (the parity pass did not run, or ran before they were wanted).

Facts only: no verdict is made here (the checks decide).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from porting_kit.locate import NormSite, RotarySite, find_norms, find_rotary
from porting_kit.probes.intercept import ModuleNamer, module_names, tap_ops
from porting_kit.probes.norms import FunctionalNormRecorder, capture_norm_calls
from porting_kit.probes.rotary import QKRecorder, capture_cos_sin

#: The families whose forward facts the parity pass records (``ctx.families``).
PREFILL_FAMILIES = ("rope", "norm")


@dataclass
class PrefillFacts:
    """What one side's instrumented forward recorded for the prefill families.

    Attributes
    ----------
    side : str
        ``"reference"`` or ``"candidate"``.
    rotary_sites : list of RotarySite or None
        :func:`porting_kit.locate.find_rotary` on the model; None when rope was not wanted.
    qk : list of QKCapture or None
        The first attention call's q [shape=(batch, heads, seq, head_dim)] and k
        [shape=(batch, kv_heads, seq, head_dim)] after RoPE (detached clones, on the model's
        device); None when rope was not wanted.
    cos_sin : list of (cos, sin, position_ids) or None
        The first rotary module's returns (:func:`porting_kit.probes.rotary.capture_cos_sin`);
        None when rope was not wanted or the side has no rotary module.
    norm_sites : list of NormSite or None
        :func:`porting_kit.locate.find_norms` on the model; None when norm was not wanted.
    norm_calls : list of NormCall or None
        The norm modules' calls in order (:func:`porting_kit.probes.norms.capture_norm_calls`).
    functional_norms : list of FunctionalNormCall or None
        The functional norm calls with their eps
        (:func:`porting_kit.probes.norms.capture_functional_norms`).
    """

    side: str
    rotary_sites: list[RotarySite] | None = None
    qk: list[Any] | None = field(default=None, repr=False)
    cos_sin: list[Any] | None = field(default=None, repr=False)
    norm_sites: list[NormSite] | None = None
    norm_calls: list[Any] | None = None
    functional_norms: list[Any] | None = None


def wanted(families) -> tuple[bool, bool]:
    """``(rope, norm)``: which prefill families' facts a run with these families needs.

    Parameters
    ----------
    families : iterable of str
        ``ctx.families``.

    Returns
    -------
    tuple of bool
    """
    fams = set(families or ())
    return "rope" in fams, "norm" in fams


@contextmanager
def capture_prefill_facts(model, side: str, *, rope: bool, norm: bool,
                          walk=None) -> Iterator[PrefillFacts | None]:
    """Record the prefill families' facts during the forward run inside the ``with`` block.

    Parameters
    ----------
    model : torch.nn.Module
        Hooked for the duration of the block (hooks removed on exit, also on error).
    side : str
        ``"reference"`` (its first rotary module's cos/sin are recorded too) or
        ``"candidate"``.
    rope, norm : bool
        Which families' facts to record (:func:`wanted`); neither: yields None and
        hooks nothing.
    walk : list of (str, torch.nn.Module), optional
        ``list(model.named_modules())`` when the caller has it; else the model is walked
        here, once for all the probes of the block.

    Yields
    ------
    PrefillFacts or None
        Filled by the forward (the lists fill as the model runs).
    """
    if not (rope or norm):
        yield None
        return
    facts = PrefillFacts(side)
    walk = list(model.named_modules()) if walk is None else walk
    names = module_names(model, walk=walk)  # one map for both recorders (the root: "<root>")
    with ExitStack() as stack:
        table: dict = {}  # the TorchFunctionMode's handlers (rope's q/k; it leaves once done)
        if rope:
            facts.rotary_sites = find_rotary(model, walk)
            qk = QKRecorder(ModuleNamer(names), 1)
            qk.register(table)
            facts.qk = qk.got
            if side == "reference" and facts.rotary_sites:
                facts.cos_sin = stack.enter_context(capture_cos_sin(facts.rotary_sites[0].module))
        if norm:
            facts.norm_sites = find_norms(model, walk)
            facts.norm_calls = stack.enter_context(capture_norm_calls(model, facts.norm_sites, walk))
            facts.functional_norms = stack.enter_context(
                FunctionalNormRecorder(ModuleNamer(names, "<root>")).patched())
        stack.enter_context(tap_ops(table))
        yield facts


def get_facts(ctx, family: str) -> tuple[PrefillFacts, PrefillFacts] | None:
    """The parity pass's recorded facts for ``family``, or None when it recorded none.

    Parameters
    ----------
    ctx : CheckContext
    family : str
        ``"rope"`` or ``"norm"``.

    Returns
    -------
    (PrefillFacts, PrefillFacts) or None
        ``(reference, candidate)`` when both sides recorded that family's facts (the
        parity pass ran in this context with the family in ``ctx.families``); None
        otherwise (the family runs its own forward).
    """
    got = ctx.state.get("prefill_facts")
    if not got:
        return None
    ref, cand = got.get("reference"), got.get("candidate")
    if ref is None or cand is None:
        return None
    attr = "qk" if family == "rope" else "norm_calls"
    if getattr(ref, attr) is None or getattr(cand, attr) is None:
        return None
    return ref, cand
