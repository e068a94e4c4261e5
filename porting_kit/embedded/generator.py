"""Generator-style TTS in one AR worker (MOSS-TTS-Nano shape): RNG isolation and request lifecycle.

A port spec with only ``engine_model()``: the ``rng`` and ``lifecycle`` families
drive the model through vLLM-Omni 0.30.0's AR-runner contract
(:mod:`porting_kit.adapters.vllm_omni.engine`); it defines no parity trio, so
``parity`` reports ``skip``. The model is
:class:`porting_kit.embedded.generator_model.GeneratorTTS` (tiny, seeded; on the check's
device: ``--device cuda`` drives it on the GPU).

Run: ``porting-kit check --example generator`` (clean) or
``porting-kit check --example generator:<variant>``; each variant plants one
fault and names the code it must produce.
"""

#: variant -> one-line description ending with the code it must produce.
VARIANTS = {
    "key_constant": "per-request generator keyed by a constant -> rng.request_key_collapse",
    "key_legacy_fallback": "keyed by the legacy _omni_req_id the engine never sets, falling back to "
                           "a shared key -> rng.request_key_collapse",
    "key_list_repr": "keyed by str() of the list-wrapped global_request_id (as upstream "
                     "MOSS-TTS-Nano), so aborts never find it -> rng.generator_leak",
    "global_manual_seed": "torch.manual_seed(seed) inside a request -> rng.global_state_mutated",
    "sampling_global_rng": "torch.multinomial without generator= -> rng.global_state_mutated, "
                           "rng.crosstalk",
    "unseeded_generator": "the request seed is ignored (OS-entropy generator) -> rng.nondeterministic",
    "no_on_requests_finished": "no on_requests_finished(): aborted generators stay live -> "
                               "rng.generator_leak",
    "cumulative_output": "each step returns the whole waveform so far -> lifecycle.cumulative_output",
    "dummy_leaves_rows_running": "dummy call leaves its rows running -> lifecycle.dummy_not_finished",
    "dummy_missing_model_outputs": "dummy return path without 'model_outputs' -> "
                                   "lifecycle.missing_model_outputs",
    "eos_flags_creation_order": "EOS flags in request-creation order, not row order -> "
                                "lifecycle.eos_mask_misaligned",
    "stereo_not_mixed": "stereo codec chunk served without mono mixdown -> channel.shape_contract",
    "graph_stale_output": "the CUDA-graph runner returns its static output buffer -> "
                          "cudagraph.stale_output",
    "graph_shape_changed": "the decode step concatenates the growing code history -> "
                           "cudagraph.shape_changed",
    "graph_capture_generator": "captured sampling uses an unregistered per-request torch.Generator "
                               "-> cudagraph.capture_failed",
}
VARIANT = None


def engine_model():
    """The generator-style model, with the planted fault of :data:`VARIANT` (if any).

    Returns
    -------
    porting_kit.embedded.generator_model.GeneratorTTSNoFinishHook
        A fresh, seeded model on ``torch.get_default_device()`` (the CPU, or the check's
        device: the engine-contract suite builds it under ``with torch.device(...)``;
        ``GeneratorTTS`` except for the
        ``no_on_requests_finished`` variant); the engine driver calls this once per scenario.
    """
    from porting_kit.embedded.generator_model import FAULTS, build_model  # torch only when used

    return build_model(VARIANT if VARIANT in FAULTS else None)


def decode_step():
    """The codec LM's AR decode step and its CUDA-graph runner (the ``cudagraph`` family).

    Returns
    -------
    porting_kit.probes.cudagraph.DecodeStep
        From :func:`porting_kit.embedded.graph_step.build_step`, with the ``graph_*``
        variant's fault planted.
    """
    from porting_kit.embedded.graph_step import build_step

    fault = VARIANT[len("graph_"):] if VARIANT and VARIANT.startswith("graph_") else None
    return build_step(fault)
