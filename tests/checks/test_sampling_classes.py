"""Property tests (issue 29, B2): sampling diagnoses hold for their class.

The candidate processor is the embedded TTS sampler's own code (``_penalize``, ``_filters``,
independent of transformers' processors), run row by row with the parameters of a drawn
source codebook. Drawn: codebook counts, per-codebook temperatures / top-k / top-p /
penalties, and the routing - any non-identity permutation of the codebooks, or the lists
expanded over the flattened (batch x codebook) rows with ``repeat_interleave`` where
``repeat`` is meant; and a repetition penalty applied twice under top-k / top-p. Each must
give its code with the routing identified; the clean twin passes.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.embedded.tts_sampling import _filters, _penalize, _value  # noqa: E402
from porting_kit.probes.sampling import BATCH  # noqa: E402
from porting_kit.spec import Spec  # noqa: E402

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def processor(source, penalty_times: int = 1):
    """``source(b, k, batch, n) -> codebook`` whose parameters row (b, k) uses."""
    def proc(logits, input_ids, params):
        flat = logits.dim() == 2
        x, ids = (logits.unsqueeze(1), input_ids.unsqueeze(1)) if flat else (logits, input_ids)
        out = x.clone()
        B, n = x.shape[:2]
        for b in range(B):
            for k in range(n):
                j = source(b, k, B, n)
                row = out[b:b + 1, k]
                rp = _value(params, "repetition_penalty", j)
                for _ in range(penalty_times if rp not in (None, 1.0) else 0):
                    row = _penalize(row, ids[b:b + 1, k], float(rp), False)
                row = _filters(row / (_value(params, "temperature", j) or 1.0), _value(params, "top_k", j),
                               _value(params, "top_p", j), None)
                out[b:b + 1, k] = row
        return out[:, 0] if flat else out
    return proc


def spec_of(proc, params) -> Spec:
    return Spec(module=types.SimpleNamespace(candidate_logits_processor=proc, sampling_params=lambda: [params],
                                             sampling_vocab_size=64), name="sampling_class")


@st.composite
def per_codebook(draw):
    n = draw(st.integers(2, 5))
    temps = draw(st.lists(st.sampled_from([0.5, 0.7, 0.9, 1.2, 1.5, 2.0]), min_size=n, max_size=n, unique=True))
    params = {"temperature": temps}
    if draw(st.booleans()):
        params["top_k"] = draw(st.lists(st.integers(8, 40), min_size=n, max_size=n))
    if draw(st.booleans()):
        params["repetition_penalty"] = draw(st.lists(st.sampled_from([1.0, 1.2, 1.5]), min_size=n, max_size=n))
    return n, params


@st.composite
def routings(draw):
    n, params = draw(per_codebook())
    if draw(st.booleans()):
        return params, "repeat_interleave", (lambda b, k, B, n: (b * n + k) // B)
    perm = draw(st.permutations(range(n)).filter(lambda p: list(p) != list(range(n))))
    return params, list(perm), (lambda b, k, B, n: perm[k])


@pytest.mark.slow
@PROPERTY
@given(routings())
def test_codebook_routing_class_is_identified(case):
    params, expected, source = case
    by = {f.code: f for f in run_check(spec_of(processor(source), params), only="sampling").findings}
    assert list(by) == ["sampling.codebook_routing"], (params, expected, list(by))
    routing = by["sampling.codebook_routing"].evidence["routing"]
    if expected == "repeat_interleave":
        assert routing == "repeat_interleave"
    else:
        named = {"roll+1": [(k + 1) % len(expected) for k in range(len(expected))],
                 "roll-1": [(k - 1) % len(expected) for k in range(len(expected))],
                 "reversed": list(range(len(expected)))[::-1]}
        assert named.get(routing, routing) in (expected, f"permutation {expected}")


@PROPERTY
@given(per_codebook())
def test_clean_per_codebook_processor_passes(case):
    _, params = case
    assert run_check(spec_of(processor(lambda b, k, B, n: k), params), only="sampling").codes() == ["sampling.ok"]


@pytest.mark.slow
@PROPERTY
@given(st.sampled_from([1.1, 1.3, 1.5, 2.0]), st.sampled_from([None, 5, 10, 20, 40]),
       st.sampled_from([None, 0.5, 0.7, 0.9]), st.sampled_from([0.7, 1.0, 1.3]))
def test_penalty_twice_under_filters_is_named(rp, top_k, top_p, temperature):
    params = {"temperature": temperature, "repetition_penalty": rp}
    params.update({k: v for k, v in (("top_k", top_k), ("top_p", top_p)) if v is not None})
    by = {f.code: f for f in run_check(spec_of(processor(lambda b, k, B, n: k, 2), params),
                                       only="sampling").findings}
    assert list(by) == ["sampling.repetition_penalty"], (params, list(by))
    assert by["sampling.repetition_penalty"].evidence["how"] == "twice"


def test_repeat_interleave_message_names_the_expansion():
    params = {"temperature": [0.6, 0.9, 1.2, 1.5]}
    f = run_check(spec_of(processor(lambda b, k, B, n: (b * n + k) // B), params), only="sampling").findings[0]
    assert f.code == "sampling.codebook_routing" and f.evidence["routing"] == "repeat_interleave"
    assert "repeat_interleave where repeat is meant" in f.message and BATCH == 2
