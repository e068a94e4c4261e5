"""RNG isolation checks (family ``rng``): every planted fault names its code, clean passes."""

import functools
import random
import textwrap

import numpy as np
import pytest
import torch

from porting_kit.embedded.generator import VARIANTS
from porting_kit.errors import InputError
from porting_kit.runner import run_check
from porting_kit.spec import load_spec

RNG_VARIANTS = {
    "key_constant": "rng.request_key_collapse",
    "key_legacy_fallback": "rng.request_key_collapse",
    "key_list_repr": "rng.generator_leak",
    "global_manual_seed": "rng.global_state_mutated",
    "sampling_global_rng": "rng.global_state_mutated",
    "unseeded_generator": "rng.nondeterministic",
    "no_on_requests_finished": "rng.generator_leak",
}


@functools.cache
def _check(example: str):
    """One check run per example (reports are only read by the tests)."""
    return run_check(example=example, only="rng,lifecycle")


def test_clean_generator_passes_rng_and_lifecycle():
    report = _check("generator")
    assert report.codes() == ["rng.ok", "lifecycle.ok"]
    assert report.status == "pass" and report.exit_code == 0


@pytest.mark.parametrize("variant,code", sorted(RNG_VARIANTS.items()))
def test_rng_variant_names_its_code(variant, code):
    report = _check(f"generator:{variant}")
    assert code in report.codes("fail"), report.codes()
    assert report.exit_code == 1
    assert "rng.ok" not in report.codes()


def test_every_variant_declares_the_code_it_must_produce():
    # the spec's one-line descriptions end with the code(s) the tests assert
    for variant, code in RNG_VARIANTS.items():
        assert code in VARIANTS[variant]


def test_sampling_without_generator_shows_crosstalk_and_process_rng():
    report = _check("generator:sampling_global_rng")
    assert {"rng.global_state_mutated", "rng.crosstalk"} <= set(report.codes("fail"))
    (mut,) = report.by_code("rng.global_state_mutated")
    assert mut.evidence["rngs"] == "torch_cpu"
    (nd,) = report.by_code("rng.nondeterministic")
    assert nd.evidence["through_process_rng"] == "yes"  # reproducible from a reset process RNG
    (ct,) = report.by_code("rng.crosstalk")
    assert ct.evidence["first_sample"] == ct.where.samples[0] and ct.evidence["max_abs_diff"] > 0.01


def test_unseeded_generator_is_intrinsically_nondeterministic():
    (nd,) = _check("generator:unseeded_generator").by_code("rng.nondeterministic")
    assert nd.evidence["through_process_rng"] == "no"
    assert nd.evidence["seed"] == 11


def test_key_collapse_evidence_from_behaviour():
    (f,) = _check("generator:key_constant").by_code("rng.request_key_collapse")
    ev = f.evidence
    assert ev["requests_in_flight"] == 4 and ev["live_generators"] == 1
    # serial requests: B alone receives A's remaining chunks after A's abort (A ran 2 steps)
    assert ev["serial_request"] == "req-b" and ev["serial_received_from"] == "req-a"
    assert ev["serial_their_chunk"] == 2


def test_legacy_key_fallback_collapses_too():
    (f,) = _check("generator:key_legacy_fallback").by_code("rng.request_key_collapse")
    assert f.evidence["live_generators"] == 1


def test_generator_leak_evidence():
    (f,) = _check("generator:no_on_requests_finished").by_code("rng.generator_leak")
    assert f.evidence["has_on_requests_finished"] is False
    assert f.evidence["generators_after"] == 3 and f.evidence["survivors_running"] == 2
    assert f.evidence["temp_files_before"] == 3 and f.evidence["temp_files_after"] == 3
    (f,) = _check("generator:key_list_repr").by_code("rng.generator_leak")
    assert f.evidence["has_on_requests_finished"] is True and f.evidence["generators_after"] == 3


def test_global_manual_seed_reports_process_rng():
    report = _check("generator:global_manual_seed")
    (f,) = report.by_code("rng.global_state_mutated")
    assert f.evidence["first_step"] == 0 and "torch_cpu" in f.evidence["rngs"]
    assert "nondeterministic" not in " ".join(report.codes())  # manual_seed(seed) is reproducible


def test_check_leaves_the_callers_process_rng_alone():
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    # uncached: a model that consumes the process RNG must not disturb the caller's
    report = run_check(example="generator:sampling_global_rng", only="rng")
    assert "rng.global_state_mutated" in report.codes()
    assert torch.equal(before[0], torch.get_rng_state())
    assert np.array_equal(before[1], np.random.get_state()[1])
    assert before[2] == random.getstate()


# -- the synthesize_candidate form ---------------------------------------------

SYNTH_CLEAN = '''
import torch

def synthesize_candidate(text, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(800, generator=g) * 2 - 1, 16000
'''

SYNTH_GLOBAL = '''
import torch

def synthesize_candidate(text, seed):
    torch.manual_seed(seed)            # the HF-style global seed
    return torch.rand(800) * 2 - 1, 16000
'''

SYNTH_DRAWS_GLOBAL = '''
import numpy as np

def synthesize_candidate(text, seed):
    return np.random.uniform(-1, 1, 800).astype("float32"), 16000

def synthesize_reference(text, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, 800).astype("float32"), 16000
'''


def _spec(tmp_path, body, name="spec.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_synthesize_only_spec_clean(tmp_path):
    report = run_check(_spec(tmp_path, SYNTH_CLEAN), only="rng,lifecycle")
    assert report.codes() == ["rng.ok", "lifecycle.skipped"]
    assert report.exit_code == 0


def test_synthesize_only_spec_global_seed(tmp_path):
    report = run_check(_spec(tmp_path, SYNTH_GLOBAL), only="rng")
    assert report.codes() == ["rng.global_state_mutated"]  # deterministic, but mutates
    # torch.manual_seed also reseeds CUDA when CUDA is initialised (seen on an H200)
    assert report.by_code("rng.global_state_mutated")[0].evidence["rngs"].startswith("torch_cpu")


def test_synthesize_spec_drawing_from_numpy_global(tmp_path):
    report = run_check(_spec(tmp_path, SYNTH_DRAWS_GLOBAL), only="rng")
    assert set(report.codes("fail")) == {"rng.nondeterministic", "rng.global_state_mutated"}
    (nd,) = report.by_code("rng.nondeterministic")
    assert nd.evidence["reference_deterministic"] == "yes"
    assert report.by_code("rng.global_state_mutated")[0].evidence["rngs"] == "numpy"


def test_spec_with_neither_form_skips(tmp_path):
    from porting_kit.checks import rng

    spec = load_spec(_spec(tmp_path, SYNTH_CLEAN))
    spec.module.synthesize_candidate = None  # the spec no longer serves either form
    from porting_kit.context import CheckContext

    (f,) = rng.run(CheckContext(spec=spec))
    assert f.status == "skip" and f.code == "rng.skipped"


def test_bad_synthesize_return_is_input_error(tmp_path):
    bad = "def synthesize_candidate(text, seed):\n    return [0.0] * 10\n"
    with pytest.raises(InputError, match=r"must return \(waveform, sample_rate\)"):
        run_check(_spec(tmp_path, bad), only="rng")


_COLLECTING_SPEC = '''
import gc
from porting_kit.embedded.generator_model import GeneratorTTS


class CollectingTTS(GeneratorTTS):
    """The clean generator model, with the cyclic GC run inside its first engine call."""

    collected = False

    def forward(self, *args, **kwargs):
        if not self.collected:
            self.collected = True
            gc.collect()
        return super().forward(*args, **kwargs)


def engine_model():
    return CollectingTTS(None)
'''


@pytest.mark.slow
def test_an_earlier_suites_garbage_never_mutates_a_later_models_rng(tmp_path):
    # The order-dependent false alarm: global_manual_seed's unfinished stream generators
    # (model <-> generator cycles) restore a saved torch RNG in their ``finally`` when the
    # cyclic GC reaches them; before the fix that happened inside a later check's tracked
    # model call (e.g. on generator:dummy_leaves_rows_running) -> rng.global_state_mutated.
    import gc

    spec = tmp_path / "collecting.py"
    spec.write_text(_COLLECTING_SPEC)
    was_enabled = gc.isenabled()
    gc.disable()  # the earlier suite's garbage waits, as it did between tests
    try:
        first = run_check(example="generator:global_manual_seed", only="rng")
        assert "rng.global_state_mutated" in first.codes("fail")
        later = run_check(str(spec), only="rng")
    finally:
        if was_enabled:
            gc.enable()
    assert later.codes() == ["rng.ok"]
