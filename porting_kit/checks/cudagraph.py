"""CUDA-graph family: the port's captured AR decode step must replay what eager computes.

Runs when the spec defines ``decode_step()`` (a :class:`porting_kit.probes.cudagraph.DecodeStep`)
and ``--device`` is CUDA; the facts come from :func:`porting_kit.probes.cudagraph.measure`.

Codes
-----
``cudagraph.capture_failed``
    The port's runner raised while capturing (or on its first replay); the exception is in
    the message. The known cause: sampling inside the captured region draws from a
    per-request ``torch.Generator`` the graph was not told about
    (``CUDAGraph.register_generator_state``), or a host sync (``.item()``) in the step.
``cudagraph.shape_changed``
    A module's output shape at a later step differs from the capture step's (a growing
    history, a batch size that changed), or the replayed output's shape differs from
    eager's: a graph replays the shapes it captured.
``cudagraph.stale_output``
    A kept output of an earlier step equals the *last* step's eager output (or all kept
    outputs share one storage and some differ from eager): the runner returns its static
    output buffer and the caller reads it after the next replay overwrote it.
``cudagraph.unexplained``
    Replayed outputs differ from eager and none of the above explains it (numbers shown).
``cudagraph.ok``
    Every step's replayed output equals eager (``torch.equal`` or within 1e-5).

``skip``: the spec has no ``decode_step()``; no CUDA device (:func:`porting_kit.devices.cuda_missing`
says why); ``--device`` is not CUDA.
"""

from __future__ import annotations

from porting_kit.report.findings import Finding, Where, ok, skip

P = "cudagraph"


def _fail(code: str, message: str, evidence: dict, hint: str, where: Where | None = None) -> Finding:
    return Finding(P, code, "fail", message, evidence, where or Where(), hint)


def run(ctx) -> list[Finding]:
    """The family's one finding (see the module docstring for the codes)."""
    if not callable(ctx.spec.get("decode_step")):
        return [skip(P, "the spec defines no decode_step() (the port's AR decode step and its "
                        "CUDA-graph runner)")]
    from porting_kit.devices import cuda_missing

    missing = cuda_missing()
    if missing is not None:
        return [skip(P, f"CUDA graphs need a CUDA device: {missing}")]
    if not str(ctx.device).startswith("cuda"):
        return [skip(P, f"CUDA graphs run with --device cuda (this run: --device {ctx.device})")]
    from porting_kit.probes.cudagraph import measure

    r = measure(ctx.spec.call("decode_step"), ctx.device)
    ev = {"steps": r.steps, "eager_shapes": "; ".join(str(s) for s in r.eager_shapes)}
    if r.capture_error is not None:
        return [_fail("cudagraph.capture_failed",
                      f"Capturing the port's decode step failed: {r.capture_error}.",
                      {**ev, "error": r.capture_error},
                      "Keep sampling out of the captured region, or register each per-request "
                      "torch.Generator with graph.register_generator_state(gen) before capture; "
                      "no .item()/.cpu() inside the step.")]
    found = _shape_changed(r, ev)
    if found is not None:
        return [found]
    if r.replay_error:
        return [_fail("cudagraph.unexplained", f"Replaying the captured step raised: {r.replay_error}.",
                      {**ev, "replay_error": r.replay_error},
                      "Replay with the captured shapes and devices; copy new inputs into the "
                      "static input tensors.")]
    return [_replay_finding(r, ev)]


def _shape_changed(r, ev: dict) -> Finding | None:
    """``cudagraph.shape_changed`` when a module's output shape moves between capture and a
    later step, or the replayed output's shape differs from eager's; None otherwise."""
    sc = r.shape_change
    shape_diff = [t for t, (g, e) in enumerate(zip(r.graph_shapes, r.eager_shapes)) if g != e]
    if sc is None and not shape_diff:
        return None
    if sc is not None:
        msg = (f"{sc.module}'s output shape changes between capture and replay: "
               f"{sc.capture_shape} at the capture step, {sc.step_shape} at step {sc.step}.")
        ev.update({"module": sc.module, "capture_shape": str(sc.capture_shape),
                   "replay_shape": str(sc.step_shape), "step": sc.step})
        where = Where(candidate=sc.module)
    else:
        t = shape_diff[0]
        msg = (f"The replayed output has shape {r.graph_shapes[t]} at step {t}, eager "
               f"{r.eager_shapes[t]}: the graph replays the batch it captured.")
        ev.update({"graph_shape": str(r.graph_shapes[t]), "eager_shape": str(r.eager_shapes[t]),
                   "step": t})
        where = None
    if r.replay_error:
        ev["replay_error"] = r.replay_error
    return _fail("cudagraph.shape_changed", msg, ev,
                 "Capture one graph per (batch size, length) bucket and pad the inputs to the "
                 "bucket; keep every tensor in the step a fixed shape (a preallocated KV "
                 "cache indexed by position, not a growing torch.cat).", where)


def _replay_finding(r, ev: dict) -> Finding:
    """Replayed vs eager outputs: ``cudagraph.ok``, ``stale_output`` (kept outputs hold the
    last step's values, or share one storage) or ``unexplained``."""
    bad = [t for t, e in enumerate(r.equal) if not e]
    if not bad:
        return ok(P, f"The captured decode step replays {r.steps} steps equal to eager "
                     f"(max |diff| {max(r.max_abs_diff, default=0.0):.3g}).",
                  {**ev, "max_abs_diff": max(r.max_abs_diff, default=0.0)})
    ev.update({"mismatched_steps": ", ".join(map(str, bad)),
               "max_abs_diff": max(r.max_abs_diff[t] for t in bad), "aliased_outputs": int(r.aliased)})
    stale = [t for t in bad if t < r.steps - 1 and r.equals_last[t]]
    if stale or r.aliased:
        return _fail("cudagraph.stale_output",
                     f"The outputs kept from steps {', '.join(map(str, stale or bad))} hold the last "
                     f"step's values: the runner returns its static output buffer, which the next "
                     f"replay overwrites.", ev,
                     "Return static_output.clone() (or copy it into a per-step tensor) before "
                     "the next replay.")
    return _fail("cudagraph.unexplained",
                 f"Replayed outputs differ from eager at steps {ev['mismatched_steps']} "
                 f"(max |diff| {ev['max_abs_diff']:.3g}) and no known cause explains it.", ev,
                 "Compare the captured region with the eager step: inputs copied into the static "
                 "tensors, RNG use, host-side values frozen at capture.")
