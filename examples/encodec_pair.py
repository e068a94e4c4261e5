"""Real EnCodec pair: transformers EncodecModel (reference) vs Meta's encodec (candidate), 24 kHz mono / 48 kHz stereo.

Two independent implementations of the same codec (REAL_PAIRS.md). The
transformers model is built from a config with seeded random weights and random
codebooks; Meta's ``encodec.EncodecModel`` gets them through the inverse of
transformers' conversion mapping (:mod:`porting_kit.adapters.encodec_meta`).
The candidate's *served* output is Meta's decode made mono 1-D float32 (the
channel mean for stereo), as a TTS server returns it.

Layouts: the default is the 24 kHz causal mono codec (hop 8*5*4*2 = 320);
variants whose name starts with ``48k`` use the 48 kHz non-causal stereo codec
(time_group_norm, normalize, 1 s chunks), ``48k`` alone being the clean one.

Run: ``porting-kit check examples/encodec_pair.py --only hop,channel,dtype
[--variant NAME]``. Audio names: see README "Port spec: audio names".
"""

from __future__ import annotations

import torch

from porting_kit.adapters.encodec_meta import (build_hf_encodec, build_meta_encodec,
                                               convert_hf_to_meta, hop_length_of)
from porting_kit.probes.streaming import stream_decode

VARIANTS = {
    "hop_trim": "candidate computes its output length from frames - 1 (drops the last hop of samples)",
    "wrong_hop": "candidate trims to frames * 256 (hop from wrong ratios [8,4,4,2] instead of [8,5,4,2])",
    "codebook_transposed": "candidate rebuilds codes from the frame-major AR stream with reshape(K, T)",
    "bf16": "candidate codec cast to bfloat16 (output cast back to float32)",
    "stream_no_context": "candidate streaming decodes each chunk without the requested left context",
    "48k": "clean 48 kHz stereo layout, served as the channel mean",
    "48k_interleaved_flatten": "48 kHz stereo served as y.T.reshape(-1) (2x length, an octave down)",
    "48k_wrong_downmix": "48 kHz stereo served as the first channel instead of the mean",
}
VARIANT = None

SEED = 0
NUM_CODEBOOKS = 4
FRAMES = 60
#: The port's streaming configuration (frames): 10-frame chunks, 16 frames of left context.
stream_chunk_frames = 10
stream_context_frames = 16

_CONFIGS = {
    "24k": dict(sampling_rate=24000, audio_channels=1, hidden_size=32, num_filters=8,
                upsampling_ratios=[8, 5, 4, 2], codebook_size=1024, target_bandwidths=[1.5, 3.0, 6.0],
                use_causal_conv=True, norm_type="weight_norm", normalize=False),
    "48k": dict(sampling_rate=48000, audio_channels=2, hidden_size=32, num_filters=8,
                upsampling_ratios=[8, 5, 4, 2], codebook_size=1024, target_bandwidths=[3.0, 6.0],
                use_causal_conv=False, norm_type="time_group_norm", normalize=True,
                chunk_length_s=1.0, overlap=0.01),
}
#: Per-chunk scale of the normalised 48 kHz layout (the input RMS the encoder divided by).
SCALE_48K = 0.05
_CACHE: dict[str, object] = {}


def _layout() -> str:
    return "48k" if (VARIANT or "").startswith("48k") else "24k"


def _scale():
    return torch.tensor([[SCALE_48K]]) if _layout() == "48k" else None


# ----------------------------------------------------------------- parity names


def reference():
    """transformers ``EncodecModel``, seeded random weights and codebooks."""
    return build_hf_encodec(_CONFIGS[_layout()], SEED)


def candidate():
    """Meta ``encodec.EncodecModel`` of the same layout (weights set by the tool)."""
    m = build_meta_encodec(reference().config)
    return m.to(torch.bfloat16) if VARIANT == "bf16" else m


def convert_weights(reference_state_dict):
    """HF -> Meta names (inverse of transformers' conversion script)."""
    meta = build_meta_encodec(reference().config)
    return convert_hf_to_meta(reference_state_dict, meta)


#: SEANet layers align by index (HF EncodecResnetBlock = Meta SEANetResnetBlock, not its inner
#: ``.block`` Sequential, which the automatic call-order alignment would pick).
module_map = [("decoder.layers.{i}", "decoder.model.{i}"), ("encoder.layers.{i}", "encoder.model.{i}")]


def inputs():
    return {"codes": codes()}


def run_reference(model, inputs):
    return model.decode(inputs["codes"][None, None], [_scale()])[0]


def run_candidate(model, inputs):
    return model.decode([(inputs["codes"][None], _scale())])


def codec_config():
    return _models()[0].config


# ----------------------------------------------------------------- audio names


def _models():
    """(reference, candidate with converted weights), built once per loaded spec."""
    if "pair" not in _CACHE:
        ref = reference()
        meta = build_meta_encodec(ref.config)
        meta.load_state_dict(convert_hf_to_meta(ref.state_dict(), meta))
        if VARIANT == "bf16":
            meta = meta.to(torch.bfloat16)
        _CACHE["pair"] = (ref, meta.eval())
    return _CACHE["pair"]


def codes():
    """Random codes ``(NUM_CODEBOOKS, FRAMES)``, codebook-major, seeded."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, 1024, (NUM_CODEBOOKS, FRAMES), generator=g)


def decode_reference(codes):
    ref = _models()[0]
    with torch.no_grad():
        y = ref.decode(codes[None, None], [_scale()])[0]
    return y[0], ref.config.sampling_rate


def _candidate_raw(codes):
    """Meta's decode of (K, T) codes: (channels, samples) float32."""
    meta = _models()[1]
    with torch.no_grad():
        y = meta.decode([(codes[None], _scale())])
    return y[0].float()


def _serve(y, frames: int):
    """The candidate server's glue: (channels, samples) -> mono 1-D float32 (planted faults here)."""
    if VARIANT == "hop_trim":
        y = y[..., :(frames - 1) * 320]
    elif VARIANT == "wrong_hop":
        y = y[..., :frames * 8 * 4 * 4 * 2]
    if VARIANT == "48k_interleaved_flatten":
        return y.T.reshape(-1)
    if VARIANT == "48k_wrong_downmix":
        return y[0]
    return y.mean(dim=0)


def _layout_codes(codes):
    if VARIANT == "codebook_transposed":
        K, T = codes.shape
        stream = codes.T.reshape(-1)       # the AR model's frame-major token stream
        return stream.reshape(K, T)         # fault: read back codebook-major
    return codes


def decode_candidate(codes):
    return _serve(_candidate_raw(_layout_codes(codes)), codes.shape[1]), _models()[0].config.sampling_rate


def decode_candidate_stream(codes, chunk_frames, context_frames):
    """The port's streaming decode; ``None`` for the 48 kHz layout, whose time_group_norm
    normalises over the whole chunk and so cannot stream frame by frame."""
    if _layout() == "48k":
        return None
    if VARIANT == "stream_no_context":
        context_frames = 0
    hop = hop_length_of(_models()[0].config)
    y, sr = stream_decode(lambda c: (_candidate_raw(c), 0), _layout_codes(codes), chunk_frames,
                          context_frames, hop)
    return _serve(torch.from_numpy(y).float(), codes.shape[1]), _models()[0].config.sampling_rate


def codec_candidate():
    return _models()[1]
