"""Real TTS architectures from transformers, built small with seeded random weights and
``save_pretrained`` into a folder (REAL_PAIRS.md, "TTS architectures transformers ships"):
the inputs of ``porting-kit scaffold --hf``."""

from __future__ import annotations

from pathlib import Path

ROPE = {"rope_type": "default", "rope_theta": 500000.0}


def _quiet_codec_(codec, num_codebooks: int, codebook_size: int) -> None:
    """Scale the codec's last conv so its decode of random codes peaks at 0.5: a trained codec
    serves audio in [-1, 1]; random weights need not (the output is linear in that conv)."""
    import torch

    convs = [m for m in codec.decoder.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d))]
    last = convs[-1]
    g = torch.Generator().manual_seed(7)
    codes = torch.randint(0, codebook_size, (1, num_codebooks, 40), generator=g)
    with torch.no_grad():
        peak = float(codec.decode(audio_codes=codes).audio_values.abs().max())
        last.weight.mul_(0.5 / peak)
        if last.bias is not None:
            last.bias.mul_(0.5 / peak)


def build_csm(folder: Path) -> Path:
    """A small ``CsmForConditionalGeneration`` (Llama backbone 2 layers, depth decoder 2 layers,
    Mimi with 4 codebooks of 64 codes) saved into ``folder``. Special ids fit the small
    vocabularies: audio ids < 64, text ids < 100."""
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration

    mimi = dict(model_type="mimi", hidden_size=32, num_filters=8, num_residual_layers=1,  # noqa: C408
                upsampling_ratios=[4, 4, 2], codebook_size=64, codebook_dim=32,
                vector_quantization_hidden_dimension=32, num_quantizers=4, num_semantic_quantizers=1,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                intermediate_size=64, sliding_window=16, upsample_groups=32, sampling_rate=24000)
    depth = dict(num_codebooks=4, backbone_hidden_size=64, vocab_size=64, hidden_size=32,  # noqa: C408
                 intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=8, rope_parameters=dict(ROPE))
    cfg = CsmConfig(num_codebooks=4, vocab_size=64, text_vocab_size=100, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=128, codebook_size=64, depth_decoder_config=depth,
                    codec_config=mimi, rope_parameters=dict(ROPE), pad_token_id=63, codebook_pad_token_id=63,
                    codebook_eos_token_id=0, audio_token_id=99, audio_eos_token_id=98, bos_token_id=97,
                    eos_token_id=96)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = CsmForConditionalGeneration(cfg).eval()
    _quiet_codec_(model.codec_model, 4, 64)
    model.save_pretrained(folder)
    return folder


def build_dia(folder: Path) -> Path:
    """A small ``DiaForConditionalGeneration`` (encoder 2 layers over 256 byte ids, decoder 2 layers
    over 3 channels of Dia's 1024 codes + 4 special ids) saved into ``folder``, and a small ``DacModel``
    (3 codebooks of 1024 codes, hop 16) saved into ``folder/audio_tokenizer`` (Dia keeps its codec
    apart). Special ids fit the decoder vocabulary: eos 1024, pad 1025, bos 1026 < 1028."""
    import torch
    from transformers import DacConfig, DacModel, DiaConfig, DiaForConditionalGeneration

    enc = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=2,  # noqa: C408
               head_dim=16, intermediate_size=64, vocab_size=256, rope_parameters=dict(ROPE))
    dec = dict(num_hidden_layers=2, hidden_size=48, intermediate_size=96, num_attention_heads=4,  # noqa: C408
               num_key_value_heads=2, head_dim=16, cross_num_attention_heads=2, cross_head_dim=16,
               cross_num_key_value_heads=2, cross_hidden_size=32, vocab_size=1028, num_channels=3,
               eos_token_id=1024, pad_token_id=1025, bos_token_id=1026, rope_parameters=dict(ROPE))
    cfg = DiaConfig(encoder_config=enc, decoder_config=dec, delay_pattern=[0, 1, 2])
    dac_cfg = DacConfig(encoder_hidden_size=8, downsampling_ratios=[4, 4], decoder_hidden_size=32, n_codebooks=3,
                        codebook_size=1024, codebook_dim=8, sampling_rate=16000)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = DiaForConditionalGeneration(cfg).eval()
        dac = DacModel(dac_cfg).eval()
    with torch.no_grad():  # random codebooks (REAL_PAIRS.md: codebooks that start at zero decode to silence)
        for layer in dac.quantizer.quantizers:
            layer.codebook.weight.normal_(generator=torch.Generator().manual_seed(3))
    _quiet_codec_(dac, 3, 1024)
    model.save_pretrained(folder)
    dac.save_pretrained(folder / "audio_tokenizer")
    return folder


def build_causal_lm(folder: Path, arch: str) -> Path:
    """A small Llama-layout causal LM (``LlamaForCausalLM`` with tied embeddings, or
    ``Qwen2ForCausalLM``: q/k/v biased, o_proj not), seeded, saved into ``folder``; its q/k/v
    biases are given random values (transformers initialises them to zero, which hides a
    dropped bias)."""
    import torch
    import transformers

    kw = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,  # noqa: C408
              num_key_value_heads=2, vocab_size=256, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    if arch == "LlamaForCausalLM":
        config = transformers.LlamaConfig(tie_word_embeddings=True, **kw)
    else:
        config = transformers.Qwen2Config(**kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(transformers, arch)(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(std=0.1)
    model.save_pretrained(folder)
    return folder
