"""The rule table: every lint code, what it means and how to fix it.

Codes are stable strings (never renumbered); the prefix names the family and
the module that implements it:

=========  ==========================  ===================================
prefix     family                      module
=========  ==========================  ===================================
``PK000``  file does not parse         :mod:`porting_kit.lint.engine`
``PK1xx``  tensor truthiness           :mod:`porting_kit.lint.truthiness`
``PK2xx``  per-request state           :mod:`porting_kit.lint.request_state`
``PK3xx``  host-device sync            :mod:`porting_kit.lint.host_sync`
``PK4xx``  codec precision, codec I/O  :mod:`porting_kit.lint.codec_precision`, :mod:`~.codec_io`
``PK5xx``  global RNG                  :mod:`porting_kit.lint.global_rng`
``PK6xx``  stereo flattening, axes     :mod:`porting_kit.lint.stereo`
``PK7xx``  RoPE buffers, RoPE config   :mod:`porting_kit.lint.rope_buffers`
``PK8xx``  optional-dependency patch   :mod:`porting_kit.lint.optional_deps`
``PK9xx``  adapter ``build()``         :mod:`porting_kit.lint.adapter_build`
``PKY1xx`` deploy YAML                 :mod:`porting_kit.lint.deploy_yaml`
``PKT1xx`` test markers                :mod:`porting_kit.lint.test_markers`
``PKN1xx`` normalisation layers        :mod:`porting_kit.lint.norms`
=========  ==========================  ===================================

``docs/lint_rules.md`` shows a bad and a good example for every code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One lint rule: its code, a one-line summary and the fix-it hint.

    Attributes
    ----------
    code : str
        Stable code (``PK301``); the prefix names the family (module table above).
    summary : str
        What it flags, one line (``porting-kit lint --list`` and ``docs/lint_rules.md``).
    fix : str
        What to do instead; appended to every finding as ``(fix: ...)``.
    severity : str, default "fail"
        ``"fail"`` (the lint run exits 1) or ``"warn"`` (advice: printed, marked
        ``[warn]``, exit unchanged). ``porting-kit validate`` gives the same
        deploy-YAML facts the same severity.
    """

    code: str
    summary: str
    fix: str
    severity: str = "fail"


RULES: dict[str, Rule] = {r.code: r for r in (
    Rule("PK000", "file cannot be parsed (syntax error, bad encoding, too deeply nested)",
         "make the file valid Python (python -m py_compile FILE shows the error)"),
    Rule("PKY000", "deploy YAML cannot be parsed or its top level is not a mapping",
         "make the file valid YAML with a mapping at the top level"),
    # PK1xx tensor truthiness
    Rule("PK101", "dict .get() result used for its truth value where the value can be a tensor",
         "test presence explicitly: `v = d.get(a)` then `if v is None: v = d.get(b)`"),
    Rule("PK102", "a tensor used for its truth value (`x or y`, `if x:`, `not x`)",
         "compare explicitly: `x is not None`, `x.numel() > 0` or `bool(x.any())`"),
    # PK2xx per-request state
    Rule("PK201", "per-request state on self indexed by a constant inside forward()",
         "key the state by the request's `global_request_id` from runtime_additional_information"),
    Rule("PK202", "legacy request key `_omni_req_id` (the engine never sets it)",
         "read `info['global_request_id']`"),
    Rule("PK203", "request-key fallback chain ends in id(...) (a recycled object id collapses requests)",
         "require `global_request_id`; raise if it is missing instead of falling back to id()"),
    Rule("PK204", "per-request generator/stream state not keyed by the request id",
         "key the dict by `info['global_request_id']` and pop it in on_requests_finished()"),
    Rule("PK205", "per-request streaming state popped in a chunk handler without a finished / last-chunk guard",
         "pop it only when the request finishes (`if is_last:` / on_requests_finished()); read it with .get() "
         "per chunk"),
    # PK3xx host-device sync
    Rule("PK301", "host-device sync (.item()/.cpu()/.tolist()/.numpy()) inside a loop of a hot path",
         "keep values on the device (torch.where, dst.copy_(src)); move one tensor to the host after the loop"),
    Rule("PK302", "explicit synchronize() inside a loop of a hot path",
         "drop the synchronize (or use events outside the loop when timing)"),
    # PK4xx codec precision
    Rule("PK401", "codec / vocoder / decoder call under torch.autocast",
         "run the codec in float32: wrap it in `torch.autocast(device_type, enabled=False)`"),
    Rule("PK402", "codec / vocoder / decoder cast to half precision",
         "keep the codec in float32 (`.float()`); cast its input, not the module"),
    Rule("PK403", "codes clamped or mapped to code 0 and decoded, with no length / EOS cut (special tokens "
                  "become audio frames)",
         "cut the codes at EOS (or keep per-request lengths) before the decode; clamp only what is left",
         "warn"),
    Rule("PK404", "stream trim = context frames x samples per frame, in a file that never names the decoder's "
                  "latency or causality",
         "for a decoder that looks ahead, decode with right context and trim its latency too; if it is "
         "causal, say so in code or a docstring (a `causal` flag, 'the decoder is causal'; a comment does not "
         "count) or suppress with `# noqa: PK404`", "warn"),
    # PK5xx global RNG
    Rule("PK501", "global RNG seeded in model code",
         "draw from a per-request `torch.Generator`; if upstream needs the global RNG, save and restore "
         "it around the step (torch.random.fork_rng / get_rng_state + set_rng_state)"),
    Rule("PK502", "sampling without generator= in per-request code (draws from the global RNG)",
         "pass `generator=` (one torch.Generator per request, seeded from the request's seed)"),
    # PK6xx stereo flattening
    Rule("PK601", "(channels, samples) transposed then flattened: interleaves channels into mono samples",
         "mix down instead: `wav.mean(dim=0)` (or keep channels and write a 2-D array)"),
    Rule("PK602", "multi-channel waveform flattened to 1-D",
         "mix down with `.mean(dim=0)` or select a channel; do not concatenate channels"),
    Rule("PK603", "resampler called on a transposed (samples, channels) waveform without axis=",
         "resample the (channels, samples) array along its last axis, or pass axis=0 / dim=0 for "
         "(samples, channels)"),
    Rule("PK604", "channel axis guessed from the array's shape (`if wav.shape[0] < wav.shape[1]: wav = wav.T`)",
         "take the layout from where the array comes from (the decoder's output, soundfile's "
         "(samples, channels)) and convert once", "warn"),
    # PK7xx RoPE buffers
    Rule("PK701", "non-persistent inv_freq buffer in a module built on the meta device, never re-initialised",
         "recompute inv_freq after loading (in load_weights / _init_weights) or name the class "
         "*RotaryEmbedding and keep `original_inv_freq` so transformers re-initialises it"),
    Rule("PK702", "rope_theta / rope_scaling read with a fallback, and rope_parameters never read",
         "read config.rope_parameters['rope_theta'] (transformers 5), falling back to the attribute "
         "only for old configs", "warn"),
    # PK8xx optional-dependency fallback
    Rule("PK801", "optional-dependency fallback patch applied at module import time",
         "move the try/except ImportError patch into load_weights() (or the first call that needs it)"),
    # PK9xx adapter build()
    Rule("PK901", "adapter build() extracts a request value it never forwards",
         "forward it into the prompt / tts_params (and test that it reaches the model), or drop it"),
    # PKY1xx deploy YAML
    Rule("PKY101", "topology key in a deploy file (topology belongs in pipeline.py)",
         "move it to the StagePipelineConfig in pipeline.py; deploy YAML holds placement only"),
    Rule("PKY102", "key unknown to the vLLM-Omni deploy schema (silently ignored or sent to engine_extras)",
         "fix the spelling or remove the key (put engine-specific extras under engine_extras:)"),
    Rule("PKY103", "max_num_seqs below 4 without a comment giving the reason",
         "raise it to >= 4, or add a comment on that line or above it saying why serial generation is required",
         "warn"),
    Rule("PKY104", "pipeline-only field or legacy stage metadata in a deploy stage (scheduler_cls, final_output ...)",
         "remove it; the StagePipelineConfig in pipeline.py decides it", "warn"),
    # PKN1xx normalisation layers
    Rule("PKN101", "norm epsilon written as a literal where the configured one is at hand (the module's eps "
                   "parameter, or the config's eps used for the function's other norms)",
         "pass the configured epsilon: `eps=self.variance_epsilon` / `eps=config.rms_norm_eps`"),
    Rule("PKN102", "(1 + w) gain on a plain-gain norm weight (initialised to ones, as the checkpoint stores it)",
         "multiply by w; (1 + w) is for zero-centred gains (Gemma: weight initialised to zeros)"),
    Rule("PKN103", "RMSNorm forward takes the mean of squares in the input's dtype (no fp32 upcast)",
         "upcast first: `x = hidden_states.to(torch.float32)`, normalise, then cast back to the input dtype "
         "(unless the reference itself never upcasts)", "warn"),
    # PKT1xx test markers
    Rule("PKT101", "test file has no CI tier marker (core_model / advanced_model / full_model / local_model)",
         "add e.g. `pytestmark = [pytest.mark.core_model, pytest.mark.cpu]`"),
    Rule("PKT102", "test file has no hardware marker (cpu / gpu / cuda / ... or hardware_test(...))",
         "add `pytest.mark.cpu` or decorate with `@hardware_test(res={...})`"),
)}


def fix_for(code: str) -> str:
    """Return the fix-it hint of ``code``.

    Parameters
    ----------
    code : str
        A key of :data:`RULES`.

    Returns
    -------
    str

    Raises
    ------
    KeyError
        ``code`` is not a known rule.
    """
    return RULES[code].fix


def severity_of(code: str) -> str:
    """``"fail"`` or ``"warn"``: the severity of ``code`` (a key of :data:`RULES`; KeyError otherwise)."""
    return RULES[code].severity


def select_codes(select: list[str] | None, ignore: list[str] | None) -> frozenset[str]:
    """Resolve ``--select`` / ``--ignore`` into the set of enabled codes.

    Parameters
    ----------
    select : list of str or None
        Codes or code prefixes to enable (``PK3`` enables ``PK301`` and ``PK302``;
        ``PKY`` all deploy-YAML rules); case-insensitive, blanks ignored. ``None`` or
        empty enables every rule.
    ignore : list of str or None
        Codes or prefixes removed afterwards (ignore wins over select).

    Returns
    -------
    frozenset of str
        ``PK000`` / ``PKY000`` (the file does not parse) are added whenever any code of
        the same language (Python ``PK<digit>`` / ``PKT`` / ``PKN``; YAML ``PKY``) is enabled and
        they are not ignored explicitly.

    Raises
    ------
    ValueError
        An entry matches no code (the CLI turns it into exit 2).
    """
    def expand(entries: list[str]) -> set[str]:
        out: set[str] = set()
        for entry in entries:
            entry = entry.strip().upper()
            if not entry:
                continue
            hits = {c for c in RULES if c.startswith(entry)}
            if not hits:
                raise ValueError(f"unknown rule code {entry!r} (codes: {', '.join(sorted(RULES))})")
            out |= hits
        return out

    enabled = expand(select) if select else set(RULES)
    ignored = expand(ignore) if ignore else set()
    enabled -= ignored
    python_rules = any((c.startswith("PK") and c[2:3].isdigit() and c != "PK000") or c.startswith(("PKT", "PKN"))
                       for c in enabled)
    if python_rules and "PK000" not in ignored:
        enabled.add("PK000")
    if any(c.startswith("PKY") and c != "PKY000" for c in enabled) and "PKY000" not in ignored:
        enabled.add("PKY000")
    return frozenset(enabled)
