"""PK5xx global RNG in model code.

Seeding the process-wide RNG (``torch.manual_seed``, ``torch.cuda.manual_seed
(_all)``, ``np.random.seed``, ``random.seed``) from model code makes one
request's seed change every other request's samples (PK501). The sanctioned
exception is the swap pattern: a function that also saves and restores the
state (``torch.random.fork_rng``, ``get_rng_state`` / ``set_rng_state``,
``np.random.get_state`` / ``set_state``) is not flagged. Sampling calls
(``torch.multinomial``, ``torch.randn``, ``torch.rand`` ...) without
``generator=`` in per-request functions draw from the global RNG (PK502).
Test files, examples, benchmarks and scripts are not model code; sampling
inside ``if self.training:`` (dropout, codebook expiry) is not per-request.
Module-level helper functions count as per-request only when named like a hot
path (``forward``, ``*decode*``); methods also when named ``sample*``,
``*generate*``, ``*stream*`` or ``step``.
"""

from __future__ import annotations

import ast

from porting_kit.lint.astutil import dotted, keyword

SEED_CALLS = frozenset({
    "torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
    "torch.xpu.manual_seed", "torch.xpu.manual_seed_all", "torch.npu.manual_seed",
    "torch.npu.manual_seed_all", "torch.mps.manual_seed", "np.random.seed", "numpy.random.seed",
    "random.seed",
})
_STATE_CALLS = ("fork_rng", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
                "get_state", "set_state", "getstate", "setstate")
_SAMPLING = ("multinomial", "randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
             "normal", "bernoulli", "randperm", "poisson")
_INPLACE = ("uniform_", "normal_", "exponential_", "bernoulli_", "random_", "geometric_", "log_normal_",
            "cauchy_")


def _seed(lin, node: ast.Call) -> None:
    name = dotted(node.func)
    if name not in SEED_CALLS:
        return
    frame = lin.frame
    if frame.pending_seed is None:
        frame.pending_seed = []
    frame.pending_seed.append((node, name))


def _state(lin, node: ast.Call) -> None:
    lin.frame.restores_rng = True


def _sampling(lin, node: ast.Call) -> None:
    frame = lin.frame
    if not frame.per_request or frame.training or keyword(node, "generator") is not None:
        return
    func = node.func
    if func.__class__ is not ast.Attribute:
        return
    if func.attr in _INPLACE:
        target = dotted(func.value)
        lin.report("PK502", node, f"`{target}.{func.attr}()` in {frame.name}() samples from the global RNG")
        return
    name = dotted(func)
    if name.startswith("torch."):
        lin.report("PK502", node, f"`{name}(...)` in {frame.name}() without generator= samples from the "
                                  "global RNG")


CALLS: dict = {"manual_seed": _seed, "manual_seed_all": _seed, "seed": _seed}
CALLS.update({name: _state for name in _STATE_CALLS})
CALLS.update({name: _sampling for name in _SAMPLING + _INPLACE})


def on_scope_exit(lin, frame) -> None:
    """Report the seeds of a function / module that does not restore the RNG state (PK501).

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
    frame : porting_kit.lint.engine.Frame
        The scope being left; its ``pending_seed`` calls are reported unless it or an
        enclosing function calls a state save/restore (``fork_rng``, ``get_rng_state`` /
        ``set_rng_state``, ``np.random.get_state`` / ``set_state``...).
    """
    if not frame.pending_seed:
        return
    f = frame
    while f is not None:
        if f.restores_rng:
            return
        f = f.parent if f.kind == "func" else None
    for node, name in frame.pending_seed:
        lin.report("PK501", node, f"`{name}(...)` seeds the process-wide RNG: every concurrent request "
                                  "shares it")
