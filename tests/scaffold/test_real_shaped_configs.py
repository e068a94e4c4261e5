"""Facts the scaffold reads from real-shaped TTS configs (issue 31 point 8, issue 26 point 7).

The config dicts follow the key structure of the real checkpoints' config files as vLLM-Omni 0.30.0's
in-tree ports read them (Qwen3-TTS with its codec's own ``speech_tokenizer/config.json``, VoxCPM2's
``lm_config`` / ``audio_vae_config``, MOSS-TTS-Nano's remote-code config naming a separate codec
checkpoint); the values the in-tree ports use are the answer key: hop 1920 and left context 72 for
Qwen3-TTS, 48000 Hz and stop id [1] for VoxCPM2, trust_remote_code and the codec checkpoint for MOSS.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porting_kit.scaffold.facts import read_model_facts
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold
from porting_kit.scaffold.validate import consistency_tier, load_manifests, run_tier

QWEN3_TTS = {
    "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
    "tokenizer_type": "qwen3_tts_tokenizer_12hz", "tts_model_type": "base",
    "im_start_token_id": 151644, "im_end_token_id": 151645, "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
    "speaker_encoder_config": {"enc_dim": 1024, "sample_rate": 24000},
    "talker_config": {
        "vocab_size": 3072, "text_vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 32768, "rope_theta": 1000000, "sliding_window": 4096, "num_code_groups": 16,
        "text_hidden_size": 2048, "codec_eos_token_id": 2150, "codec_pad_id": 2148, "codec_bos_id": 2149,
        "code_predictor_config": {"vocab_size": 2048, "hidden_size": 1024, "intermediate_size": 3072,
                                  "num_hidden_layers": 5, "num_attention_heads": 16, "num_key_value_heads": 8,
                                  "max_position_embeddings": 65536, "rope_theta": 1000000, "num_code_groups": 16},
    },
}
#: ``speech_tokenizer/config.json`` of the 12 Hz codec (Qwen3TTSTokenizerV2Config's keys).
QWEN3_TTS_CODEC = {
    "architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
    "encoder_valid_num_quantizers": 16, "input_sample_rate": 24000, "output_sample_rate": 24000,
    "decode_upsample_rate": 1920, "encode_downsample_rate": 1920,
    "decoder_config": {"codebook_size": 2048, "hidden_size": 1024, "latent_dim": 1024,
                       "max_position_embeddings": 8000, "rope_theta": 10000, "num_attention_heads": 16,
                       "num_hidden_layers": 8, "num_key_value_heads": 16, "sliding_window": 72,
                       "num_quantizers": 16, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
                       "decoder_dim": 1536},
    "encoder_config": {"model_type": "mimi", "codebook_size": 2048, "sampling_rate": 24000, "frame_rate": 12.5,
                       "upsampling_ratios": [8, 6, 5, 4], "num_quantizers": 32, "sliding_window": 250},
}
VOXCPM2 = {
    "architecture": "voxcpm2",
    "lm_config": {"bos_token_id": 1, "eos_token_id": 2, "hidden_size": 2048, "intermediate_size": 6144,
                  "max_position_embeddings": 32768, "num_attention_heads": 16, "num_hidden_layers": 28,
                  "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000, "vocab_size": 73448,
                  "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4, "use_mup": False},
    "patch_size": 4, "feat_dim": 64, "residual_lm_num_layers": 8,
    "encoder_config": {"hidden_dim": 1024, "ffn_dim": 4096, "num_heads": 16, "num_layers": 4},
    "dit_config": {"hidden_dim": 1024, "ffn_dim": 4096, "num_heads": 16, "num_layers": 4},
    "audio_vae_config": {"encoder_dim": 128, "encoder_rates": [2, 5, 8, 8], "latent_dim": 64, "decoder_dim": 2048,
                         "decoder_rates": [8, 6, 5, 2, 2, 2], "sample_rate": 16000, "out_sample_rate": 48000},
    "max_length": 8192,
}
MOSS_TTS_NANO = {
    "architectures": ["MossTTSNanoForCausalLM"], "model_type": "moss_tts_nano",
    "auto_map": {"AutoConfig": "configuration_moss_tts_nano.MossTTSNanoConfig",
                 "AutoModelForCausalLM": "modeling_moss_tts_nano.MossTTSNanoForCausalLM"},
    "audio_tokenizer_pretrained_name_or_path": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
    "audio_tokenizer_sample_rate": 48000, "n_vq": 16, "vocab_size": 16384, "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 4096,
    "rope_theta": 10000.0, "eos_token_id": 2,
}


def _folder(tmp_path: Path, name: str, config: dict, codec: dict | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if codec is not None:
        (folder / "speech_tokenizer").mkdir()
        (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(codec), encoding="utf-8")
    return folder / "config.json"


def _scaffold(cfg: Path, out: Path, shape: str, model_type: str, **kw) -> Path:
    scaffold(ScaffoldOptions("vllm-omni", shape, model_type, cfg, out=out, **kw))
    return out


def _text(out: Path, rel: str) -> str:
    return (out / rel).read_text(encoding="utf-8")


# -- Qwen3-TTS -------------------------------------------------------------------------------
def test_qwen3_tts_reads_the_codec_own_config(tmp_path):
    facts = read_model_facts(_folder(tmp_path, "q", QWEN3_TTS, QWEN3_TTS_CODEC))
    assert facts.hop_length.value == 1920 and "speech_tokenizer/config.json decode_upsample_rate" in facts.hop_length.source
    assert facts.sample_rate.value == 24000 and "output_sample_rate" in facts.sample_rate.source
    assert facts.codebook_size.value == 2048 and "decoder_config.codebook_size" in facts.codebook_size.source
    # the decoder's window, not the encoder's 250 or the talker LM's 4096
    assert facts.codec_left_context.value == 72
    assert facts.codec_left_context.source == "speech_tokenizer/config.json decoder_config.sliding_window"
    assert facts.num_codebooks.value == 16 and facts.stop_token_ids.value == [2150]
    assert facts.lm_subconfig == "talker_config" and facts.hidden_size.source == "talker_config.hidden_size"


def test_qwen3_tts_hop_from_chained_decoder_ratios(tmp_path):
    codec = copy.deepcopy(QWEN3_TTS_CODEC)
    del codec["decode_upsample_rate"], codec["encode_downsample_rate"]
    facts = read_model_facts(_folder(tmp_path, "q", QWEN3_TTS, codec))
    assert facts.hop_length.value == 8 * 5 * 4 * 3 * 2 * 2
    assert "decoder_config.upsample_rates [8, 5, 4, 3] x decoder_config.upsampling_ratios [2, 2]" in \
        facts.hop_length.source


def test_qwen3_tts_scaffold_writes_hop_and_left_context(tmp_path):
    out = _scaffold(_folder(tmp_path, "q", QWEN3_TTS, QWEN3_TTS_CODEC), tmp_path / "o", "two-stage", "qwen3_tts")
    m = "qwen3_tts"
    assert re.search(r"^HOP_LENGTH = 1920$", _text(out, f"vllm_omni/model_executor/models/{m}/{m}_code2wav.py"), re.M)
    proc = _text(out, f"vllm_omni/model_executor/stage_input_processors/{m}.py")
    assert re.search(r"^LEFT_CONTEXT_FRAMES = 72$", proc, re.M) and "codec_left_context_frames" in proc
    deploy = yaml.safe_load(_text(out, f"vllm_omni/deploy/{m}.yaml"))
    assert deploy["connectors"]["connector_of_shared_memory"]["extra"]["codec_left_context_frames"] == 72
    man = load_manifests(out)[0]
    assert man["facts"]["hop_length"] == 1920 and man["facts"]["codec_left_context"] == 72
    findings = consistency_tier(out, man)
    assert [f.code for f in findings] == ["consistency.ok"], [(f.code, f.message) for f in findings]


def test_without_the_codec_folder_hop_is_a_reported_placeholder(tmp_path):
    cfg = _folder(tmp_path, "q", QWEN3_TTS)
    result = scaffold(ScaffoldOptions("vllm-omni", "two-stage", "qwen3_tts", cfg, out=tmp_path / "o"))
    assert any(n.startswith("hop_length not found") for n in result.notes)
    assert read_model_facts(cfg).codec_left_context is None  # the talker's sliding_window 4096 is not it


def test_broken_codec_config_is_an_input_error(tmp_path):
    from porting_kit.errors import InputError

    cfg = _folder(tmp_path, "q", QWEN3_TTS, {**QWEN3_TTS_CODEC, "decode_upsample_rate": "1920"})
    with pytest.raises(InputError, match=r"speech_tokenizer/config.json: decode_upsample_rate"):
        read_model_facts(cfg)


# -- VoxCPM2 ---------------------------------------------------------------------------------
def test_voxcpm2_output_rate_lm_config_and_ambiguity(tmp_path):
    facts = read_model_facts(_folder(tmp_path, "v", VOXCPM2))
    assert facts.sample_rate.value == 48000 and facts.sample_rate.source == "audio_vae_config.out_sample_rate"
    assert any("audio_vae_config.sample_rate = 16000" in a for a in facts.ambiguities)
    assert facts.lm_subconfig == "lm_config"
    assert (facts.hidden_size.value, facts.hidden_size.source) == (2048, "lm_config.hidden_size")
    assert facts.vocab_size.source == "lm_config.vocab_size" and facts.num_hidden_layers.value == 28


def test_lm_subconfig_wins_over_a_sibling_sub_config(tmp_path):
    """A codec sub-config listed before the LM's at the same depth must not size the LM."""
    cfg = {"codec_config": {"hidden_size": 512, "vocab_size": 1024, "num_hidden_layers": 4},
           "lm_config": {"hidden_size": 2048, "vocab_size": 73448, "num_hidden_layers": 28}}
    facts = read_model_facts(_folder(tmp_path, "c", cfg))
    assert (facts.hidden_size.value, facts.vocab_size.value, facts.num_hidden_layers.value) == (2048, 73448, 28)


def test_voxcpm2_scaffold_stops_on_the_stop_flag(tmp_path):
    out = _scaffold(_folder(tmp_path, "v", VOXCPM2), tmp_path / "o", "native-ar", "voxcpm2")
    m = "voxcpm2"
    assert '"stop_token_ids": [1]' in _text(out, f"vllm_omni/model_executor/models/{m}/pipeline.py")
    model = _text(out, f"vllm_omni/model_executor/models/{m}/modeling_{m}.py")
    assert re.search(r"^STOP_TOKEN_IDS = \[1\]$", model, re.M) and re.search(r"^SAMPLE_RATE = 48000$", model, re.M)
    assert '"lm_config"' in model  # _lm_config() finds the LM sub-config at run time too
    man = load_manifests(out)[0]
    assert man["facts"]["stop_token_ids"] == [1] and "lm_config.eos_token_id" in man["fact_sources"]["stop_token_ids"]
    assert [f.code for f in consistency_tier(out, man)] == ["consistency.ok"]


def test_native_ar_keeps_a_codec_eos(tmp_path):
    """An audio EOS in the config is the stop id of every shape (the stop flag is only for a text EOS)."""
    cfg = {**VOXCPM2, "audio_eos_token_id": 5}
    out = _scaffold(_folder(tmp_path, "v", cfg), tmp_path / "o", "native-ar", "voxcpm2")
    assert '"stop_token_ids": [5]' in _text(out, "vllm_omni/model_executor/models/voxcpm2/pipeline.py")


# -- issue 26 point 7: text vocabulary taken for the codec's -------------------------------------
NESTED_TEXT_VOCAB = {"talker_config": {"vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 4,
                                       "num_attention_heads": 16, "num_code_groups": 7, "codec_eos_token_id": 2050},
                     "codec_config": {"codebook_size": 2048, "sampling_rate": 24000, "hop_length": 1920}}


def test_text_vocab_is_reported_and_heads_use_the_codebook_size(tmp_path):
    cfg = _folder(tmp_path, "n", NESTED_TEXT_VOCAB)
    result = scaffold(ScaffoldOptions("vllm-omni", "two-stage", "nested", cfg, out=tmp_path / "o"))
    amb = [n for n in result.notes if n.startswith("ambiguous config field")]
    assert any("talker_config.vocab_size" in n and "codec_config.codebook_size" in n for n in amb), result.notes
    model = _text(tmp_path / "o", "vllm_omni/model_executor/models/nested/modeling_nested.py")
    assert re.search(r"^CODEBOOK_SIZE = 2048$", model, re.M)
    assert re.search(r"^VOCAB_SIZE = 2051$", model, re.M)  # codes + the codec EOS 2050, not 151936
    man = load_manifests(tmp_path / "o")[0]
    assert man["ambiguities"] and [f.code for f in consistency_tier(tmp_path / "o", man)] == ["consistency.ok"]


@pytest.mark.parametrize("old,new,width", [
    ("nn.Linear(hidden, CODEBOOK_SIZE, bias=False) for _", "nn.Linear(hidden, 151936, bias=False) for _", 151936),
    ("nn.Linear(hidden, CODEBOOK_SIZE, bias=False) for _", "nn.Linear(hidden, CODEBOOK_SIZE - 1, bias=False) for _",
     2047),
])
def test_planted_head_width_is_named(tmp_path, old, new, width):
    out = _scaffold(_folder(tmp_path, "n", NESTED_TEXT_VOCAB), tmp_path / "o", "two-stage", "nested")
    path = out / "vllm_omni/model_executor/models/nested/modeling_nested.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    findings = consistency_tier(out, load_manifests(out)[0])
    (f,) = [f for f in findings if f.code == "consistency.head_width"]
    assert f.status == "fail" and f.evidence["head_width"] == width and f.evidence["codebook_size"] == 2048
    assert "codec_config.codebook_size" in f.message and "modeling_nested.py" in f.message


# -- MOSS-TTS-Nano (single-stage generator) -----------------------------------------------------
class MossShapedUpstream:
    """An upstream whose ``inference_stream`` has the parameters vLLM-Omni's MOSS-TTS-Nano port passes
    (no ``**kwargs``): a reference clip goes to ``prompt_audio_path``, its transcript to ``prompt_text``."""

    def __init__(self, voice: bool = True) -> None:
        self.calls: list[dict] = []
        if not voice:
            self.inference_stream = self._no_voice  # type: ignore[method-assign]

    def inference_stream(self, text, output_audio_path=None, mode="voice_clone", prompt_text=None,
                         prompt_audio_path=None, text_tokenizer_path=None, audio_tokenizer=None, device=None,
                         nq=None, max_new_frames=375, do_sample=True, use_kv_cache=True, voice=None,
                         instructions=None, language=None):
        import torch

        self.calls.append({"prompt_text": prompt_text, "prompt_audio_path": prompt_audio_path,
                           "max_new_frames": max_new_frames, "audio_tokenizer": audio_tokenizer})
        for i in range(2 + len(text) % 3):
            yield {"type": "audio", "waveform": torch.full((32,), 0.01 * (i + 1))}
        yield {"type": "result", "waveform": torch.zeros(32)}

    def _no_voice(self, text, prompt_text=None, prompt_audio_path=None, audio_tokenizer=None, max_new_frames=375,
                  text_tokenizer_path=None):
        yield from ()


def test_moss_trust_remote_code_and_codec_checkpoint(tmp_path):
    cfg = _folder(tmp_path, "m", MOSS_TTS_NANO)
    m = "moss_tts_nano"
    rel = f"vllm_omni/model_executor/models/{m}/modeling_{m}.py"
    trusted = _text(_scaffold(cfg, tmp_path / "t", "single-stage-ar", m, trust_remote_code=True), rel)
    assert re.search(r"^TRUST_REMOTE_CODE = True$", trusted, re.M)
    assert "AutoModelForCausalLM.from_pretrained(self.model_path" in trusted
    assert "trust_remote_code=TRUST_REMOTE_CODE" in trusted
    assert re.search(r'^CODEC_CHECKPOINT = "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"$', trusted, re.M)
    plain = _text(_scaffold(cfg, tmp_path / "p", "single-stage-ar", m), rel)
    assert re.search(r"^TRUST_REMOTE_CODE = False$", plain, re.M)  # never turned on implicitly


def test_run_tier_fails_when_the_real_upstream_does_not_fit(tmp_path):
    out = _scaffold(_folder(tmp_path, "m", MOSS_TTS_NANO), tmp_path / "o", "single-stage-ar", "moss_tts_nano",
                    trust_remote_code=True)
    man = load_manifests(out)[0]
    (f,) = run_tier(out, man, upstream=MossShapedUpstream(voice=False))
    assert f.code == "run.upstream_mismatch" and f.status == "fail"
    assert "'voice'" in f.message and "'instructions'" in f.message and "'language'" in f.message
    # the fields upstream has parameters for under its own names are not reported
    assert "'ref_audio'" not in f.message and "'ref_text'" not in f.message and "'max_new_tokens'" not in f.message

    class NoStream:
        pass

    (f,) = run_tier(out, man, upstream=NoStream())
    assert f.code == "run.upstream_mismatch" and "has no attribute 'inference_stream'" in f.message

    class NeedsMode(MossShapedUpstream):
        def inference_stream(self, text, mode, prompt_text=None):  # a required parameter never passed
            yield from ()

    (f,) = run_tier(out, man, upstream=NeedsMode())
    assert f.code == "run.upstream_mismatch" and "requires mode" in f.message


def test_run_tier_drives_a_fitting_upstream_with_its_own_parameter_names(tmp_path):
    out = _scaffold(_folder(tmp_path, "m", MOSS_TTS_NANO), tmp_path / "o", "single-stage-ar", "moss_tts_nano",
                    trust_remote_code=True)
    upstream = MossShapedUpstream()
    findings = run_tier(out, load_manifests(out)[0], upstream=upstream)
    assert [f.code for f in findings] == ["run.ok"], [(f.code, f.message) for f in findings]
    assert findings[0].evidence["upstream"] == "MossShapedUpstream"
    assert upstream.calls and all(c["audio_tokenizer"] is not None for c in upstream.calls)  # the codec passed


def test_request_fields_reach_upstream_under_its_own_names(tmp_path):
    """ref_text -> prompt_text, a [waveform, rate] ref_audio -> a WAV path, max_new_tokens -> max_new_frames."""
    import importlib.util
    import sys
    import types

    sf = pytest.importorskip("soundfile")
    out = _scaffold(_folder(tmp_path, "m", MOSS_TTS_NANO), tmp_path / "o", "single-stage-ar", "moss_tts_nano")
    path = out / "vllm_omni/model_executor/models/moss_tts_nano/modeling_moss_tts_nano.py"
    # the model file imports its seam relatively: load it under a throwaway package
    pkg = "_pk_t_moss"
    sys.modules[pkg] = types.ModuleType(pkg)
    sys.modules[pkg].__path__ = [str(path.parent)]
    try:
        spec = importlib.util.spec_from_file_location(f"{pkg}.model", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        kwargs = mod.stream_kwargs(MossShapedUpstream().inference_stream,
                                   {"ref_text": "hi", "ref_audio": [[0.0, 0.1, 0.2], 16000], "max_new_tokens": 7,
                                    "codec": object(), "voice": None})
    finally:
        for name in [n for n in sys.modules if n.startswith(pkg)]:
            del sys.modules[name]
    assert kwargs["prompt_text"] == "hi" and kwargs["max_new_frames"] == 7
    assert "audio_tokenizer" in kwargs and "voice" not in kwargs
    wav, rate = sf.read(kwargs["prompt_audio_path"])
    assert rate == 16000 and len(wav) == 3
    Path(kwargs["prompt_audio_path"]).unlink()


# -- voice cloning / speaker conditioning (issue 31 point 6) ----------------------------------
def _adapter(out: Path, m: str) -> Path:
    return out / f"vllm_omni/entrypoints/openai/tts_adapters/{m}.py"


@pytest.mark.parametrize("config,codec,shape,kind", [
    (QWEN3_TTS, QWEN3_TTS_CODEC, "two-stage", "speaker encoder"),
    (VOXCPM2, None, "native-ar", "prompt codes"),
])
def test_declared_conditioning_reaches_the_model(tmp_path, config, codec, shape, kind):
    m = "cloned"
    out = _scaffold(_folder(tmp_path, "c", config, codec), tmp_path / "o", shape, m)
    man = load_manifests(out)[0]
    assert man["conditioning"]["kind"] == kind and {"ref_audio", "ref_text"} <= set(man["stage_fields"])
    adapter = _adapter(out, m).read_text()
    assert 'info["ref_audio"] = [[wav, sample_rate]]' in adapter and "not supported by this model" not in adapter
    model = _text(out, f"vllm_omni/model_executor/models/{m}/modeling_{m}.py")
    assert "self.speaker_encoder(reference" in model and 'info.get("ref_text")' in model
    assert [f.code for f in consistency_tier(out, man)] == ["consistency.ok"]


@pytest.mark.slow
@pytest.mark.parametrize("config,codec,shape", [(QWEN3_TTS, QWEN3_TTS_CODEC, "two-stage"), (VOXCPM2, None, "native-ar")])
def test_run_tier_sends_reference_audio_through_the_model(tmp_path, config, codec, shape):
    """Every run-tier request carries a reference clip and transcript; the model conditions on them and
    the requests stay isolated (no rng.crosstalk)."""
    out = _scaffold(_folder(tmp_path, "c", config, codec), tmp_path / "o", shape, "cloned")
    findings = run_tier(out, load_manifests(out)[0])
    assert [f.code for f in findings] == ["run.ok"], [(f.code, f.message) for f in findings]


def test_no_conditioning_keeps_refusing_reference_audio(tmp_path):
    out = _scaffold(_folder(tmp_path, "c", MOSS_TTS_NANO | {"n_vq": 8}), tmp_path / "o", "two-stage", "plain")
    man = load_manifests(out)[0]
    assert man["conditioning"] is None and "ref_audio" not in man["stage_fields"]
    assert "ref_audio / ref_text are not supported by this model yet" in _adapter(out, "plain").read_text()


@pytest.mark.parametrize("config,codec,shape,status", [
    (QWEN3_TTS, QWEN3_TTS_CODEC, "two-stage", "fail"),  # a declared speaker encoder needs the clip
    (VOXCPM2, None, "native-ar", "warn"),  # a codec encoder makes cloning possible, not required
])
def test_adapter_that_refuses_reference_audio_is_named(tmp_path, config, codec, shape, status):
    """Plant today's refusing adapter (scaffolded from the config without the conditioning keys)."""
    m = "cloned"
    out = _scaffold(_folder(tmp_path, "c", config, codec), tmp_path / "o", shape, m)
    bare = {k: v for k, v in config.items() if k not in ("speaker_encoder_config", "audio_vae_config")}
    plain = _scaffold(_folder(tmp_path, "p", bare), tmp_path / "p_out", shape, m)
    _adapter(out, m).write_text(_adapter(plain, m).read_text())
    findings = [f for f in consistency_tier(out, load_manifests(out)[0]) if f.code == "consistency.field_dropped"]
    (f,) = [f for f in findings if f.evidence.get("conditioning")]
    assert f.status == status and f.evidence["field"] == "ref_audio"
    assert f"tts_adapters/{m}.py" in f.message and ("speaker_encoder_config" in f.message or "audio_vae_config"
                                                     in f.message)


def test_model_that_ignores_reference_audio_is_named(tmp_path):
    m = "cloned"
    out = _scaffold(_folder(tmp_path, "c", QWEN3_TTS, QWEN3_TTS_CODEC), tmp_path / "o", "two-stage", m)
    path = out / f"vllm_omni/model_executor/models/{m}/modeling_{m}.py"
    path.write_text(path.read_text().replace('info.get("ref_audio")', 'info.get("reference_clip")'))
    findings = consistency_tier(out, load_manifests(out)[0])
    (f,) = [f for f in findings if f.code == "consistency.field_dropped"]
    assert f.status == "fail" and f.evidence == {**f.evidence, "field": "ref_audio", "key": "ref_audio"}


# -- property: the codec's own config decides, whatever its layout -------------------------------

_ratios = st.lists(st.integers(2, 8), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(up=_ratios, extra=_ratios, enc=_ratios, window=st.integers(1, 400), enc_window=st.integers(1, 400),
       lm_window=st.integers(1, 8192), rate=st.sampled_from([16000, 22050, 24000, 44100, 48000]),
       in_rate=st.sampled_from([8000, 16000]), size=st.integers(16, 4096), encoder_first=st.booleans())
def test_codec_config_facts_hold_for_any_layout(tmp_path_factory, up, extra, enc, window, enc_window, lm_window,
                                               rate, in_rate, size, encoder_first):
    """Hop = the product of every up-sampling list of the codec decoder (never the encoder's), the left
    context = the decoder's window (never the encoder's or the LM's), the output rate over the input."""
    codec = {"input_sample_rate": in_rate, "output_sample_rate": rate,
             "encoder_config": {"upsampling_ratios": enc, "sliding_window": enc_window, "codebook_size": size},
             "decoder_config": {"codebook_size": size, "sliding_window": window, "upsample_rates": up,
                                "upsampling_ratios": extra}}
    if encoder_first:  # key order must not decide
        codec = {"encoder_config": codec.pop("encoder_config"), **codec}
    config = {"talker_config": {"vocab_size": size + 8, "hidden_size": 64, "num_hidden_layers": 2,
                                "sliding_window": lm_window, "num_code_groups": 4, "codec_eos_token_id": size + 1}}
    facts = read_model_facts(_folder(tmp_path_factory.mktemp("p"), "c", config, codec))
    prod = 1
    for r in (*up, *extra):
        prod *= r
    assert facts.hop_length.value == prod and "decoder_config" in facts.hop_length.source
    assert facts.codec_left_context.value == window and "decoder_config" in facts.codec_left_context.source
    assert facts.sample_rate.value == rate and facts.codebook_size.value == size


MOSS_REMOTE_CODE = '''
class MossTTSNanoForCausalLM(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.lm = None

    def inference_stream(self, text, output_audio_path=None, mode="voice_clone", prompt_text=None,
                         prompt_audio_path=None, text_tokenizer_path=None, audio_tokenizer=None, device=None,
                         nq=None, max_new_frames=375, do_sample=True, use_kv_cache=True{extra}):
        raise RuntimeError("never run by porting-kit")
'''


@pytest.mark.parametrize("extra,code", [
    ("", "run.upstream_mismatch"),
    (", voice=None, instructions=None, language=None", "run.ok"),
])
def test_run_tier_reads_the_checkpoint_remote_code_signature(tmp_path, extra, code):
    """The checkpoint's own modeling file (auto_map) is read, never run: a request field its
    inference_stream has no parameter for fails the run tier without any upstream object."""
    cfg = _folder(tmp_path, "m", MOSS_TTS_NANO)
    (cfg.parent / "modeling_moss_tts_nano.py").write_text(MOSS_REMOTE_CODE.replace("{extra}", extra))
    out = _scaffold(cfg, tmp_path / "o", "single-stage-ar", "moss_tts_nano", trust_remote_code=True)
    man = load_manifests(out)[0]
    assert man["upstream_source"] == {"file": str((cfg.parent / "modeling_moss_tts_nano.py").resolve()),
                                      "class": "MossTTSNanoForCausalLM"}
    findings = run_tier(out, man)
    assert [f.code for f in findings] == [code], [(f.code, f.message) for f in findings]
    if code == "run.upstream_mismatch":
        assert "'voice'" in findings[0].message and "read not run" in findings[0].message
    else:
        assert "signatures checked against" in findings[0].evidence["upstream"]
