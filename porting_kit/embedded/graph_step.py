"""The embedded generator's AR decode step and a port-style CUDA-graph runner, with fault knobs.

The step is the generator model's codec LM (:class:`~porting_kit.embedded.generator_model.TinyCodecLM`,
a GRU cell over codec tokens) batched over ``BATCH`` rows: ``(h, prev_code, bias) -> (logits, h')``,
the next code chosen greedily. :class:`GraphRunner` captures it once in a
``torch.cuda.CUDAGraph`` over static input/output tensors and replays it per step, copying
each step's inputs into the static ones, as vLLM's ``CUDAGraphRunner`` does.

Faults (:data:`FAULTS`), each the real mistake behind one ``cudagraph.*`` code:

* ``stale_output``: the runner returns its static output tensor itself, not a copy; a caller
  that keeps step ``t``'s output reads the values of the last replay;
* ``shape_changed``: the step attends over the whole code history (``torch.cat`` grows it by
  one per step): the shapes captured at step 0 are not the shapes of step 1;
* ``capture_generator``: the step samples the next code with ``torch.multinomial`` from a
  per-request ``torch.Generator`` that is not registered with the graph
  (``CUDAGraph.register_generator_state``).
"""

from __future__ import annotations

from typing import Any

BATCH = 4
STEPS = 4
FAULTS = {
    "stale_output": "the graph runner returns its static output buffer (no clone) -> "
                    "cudagraph.stale_output",
    "shape_changed": "the decode step concatenates the growing code history -> cudagraph.shape_changed",
    "capture_generator": "sampling in the captured step uses a per-request torch.Generator not "
                         "registered with the graph -> cudagraph.capture_failed",
}


def build_step(fault: str | None = None, device: str = "cpu"):
    """The :class:`~porting_kit.probes.cudagraph.DecodeStep` of the generator's codec LM.

    Parameters
    ----------
    fault : str, optional
        One of :data:`FAULTS`; ``None`` for the clean runner.
    device : str
        Where the model lives (the check passes its CUDA device to ``inputs`` / the runner).

    Returns
    -------
    porting_kit.probes.cudagraph.DecodeStep
    """
    import torch

    from porting_kit.embedded.generator_model import CODEBOOK, HIDDEN, TinyCodecLM
    from porting_kit.probes.cudagraph import DecodeStep

    with torch.device("cpu"), torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(0)  # the CPU generator only: CUDA's untouched
        lm = TinyCodecLM().eval()
    state: dict[str, Any] = {"device": None}

    def model_on(device):
        if state["device"] != device:
            lm.to(device)
            state["device"] = device
        return lm

    def step_fn(h, prev, bias, history=None, gen=None):
        m = model_on(h.device)
        x = m.code_emb(prev)
        if fault == "shape_changed" and history is not None:
            # attends over the whole history: its length grows by one every step
            x = x + m.code_emb(history).mean(dim=1)
        h2 = m.cell(x, h)
        logits = m.head(h2) + bias
        if fault == "capture_generator":
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
        else:
            nxt = logits.argmax(-1)
        return torch.cat([logits, h2, nxt[:, None].to(logits.dtype)], dim=-1)

    def inputs(t: int, device: str) -> dict:
        g = torch.Generator().manual_seed(100 + t)
        out = {"h": torch.randn(BATCH, HIDDEN, generator=g).to(device),
               "prev": torch.randint(0, CODEBOOK + 1, (BATCH,), generator=g).to(device),
               "bias": torch.randn(BATCH, CODEBOOK, generator=g).to(device)}
        if fault == "shape_changed":
            out["history"] = torch.randint(0, CODEBOOK + 1, (BATCH, t + 1), generator=g).to(device)
        return out

    def gen_for(device):
        return torch.Generator(device=device).manual_seed(1234) if fault == "capture_generator" else None

    def eager(inp):
        return step_fn(**inp, gen=gen_for(inp["h"].device))

    def graph_runner(device: str):
        return GraphRunner(step_fn, inputs(0, device), clone_output=fault != "stale_output",
                           gen=gen_for(device))

    model_on(device)
    return DecodeStep(eager=eager, inputs=inputs, graph_runner=graph_runner, module=lm, steps=STEPS)


class GraphRunner:
    """A port-style CUDA-graph runner: capture once over static tensors, replay per step.

    Parameters
    ----------
    fn : callable
        ``fn(**static_inputs, gen=...) -> torch.Tensor``: the decode step.
    example : dict of str to torch.Tensor
        Step 0's inputs (on the CUDA device): copied into the static inputs, then captured.
    clone_output : bool
        Return a copy of the static output (right) or the static tensor itself (the
        ``stale_output`` fault).
    gen : torch.Generator, optional
        Passed to ``fn`` (the ``capture_generator`` fault: never registered with the graph).

    Notes
    -----
    Capture follows the PyTorch CUDA-graphs recipe: three warm-up runs on a side stream,
    then ``torch.cuda.graph(g)``. ``__call__`` copies the step's inputs into the static
    tensors (``copy_`` raises when a shape differs from the captured one) and replays.
    """

    def __init__(self, fn, example: dict, *, clone_output: bool = True, gen=None):
        import torch

        self.clone_output = clone_output
        self.static = {k: v.clone() for k, v in example.items()}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(**self.static, gen=gen)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = fn(**self.static, gen=gen)

    def __call__(self, inputs: dict):
        for k, v in inputs.items():
            self.static[k].copy_(v)
        self.graph.replay()
        return self.out.clone() if self.clone_output else self.out
