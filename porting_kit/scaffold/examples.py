"""Two example TTS ``config.json`` documents to scaffold from when no model is at hand.

``my_tts`` is a Qwen-style TTS talker (``rope_parameters``, a ``codec_config`` with EnCodec-like
upsampling ratios 8 x 5 x 4 x 3 = hop 480 at 24 kHz, 8 codebooks); ``other_speech`` is an
independent one (flat ``rope_theta``, an ``audio_tokenizer_config`` with hop 320 at 16 kHz, 4
codebooks, separate codec and text stop ids). Every field the scaffolder reads
(:mod:`porting_kit.scaffold.facts`) differs between the two, so a template that hard-codes one
model's value shows up on the other. The scaffold tests, the run-tier tests and
``benchmarks/scaffold_cuda.py`` scaffold from these.

    from porting_kit.scaffold.examples import write_example_config
    write_example_config("other_speech", Path("config.json"))
    # porting-kit scaffold --framework vllm-omni --shape two-stage --model-type other_speech \\
    #     --config config.json --out my_port
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

#: name (the model_type to scaffold with) -> config.json document.
EXAMPLE_CONFIGS: dict[str, dict[str, Any]] = {
    "my_tts": {
        "architectures": ["MyTTSForConditionalGeneration"],
        "model_type": "my_tts",
        "_name_or_path": "acme/my-tts-0.5b",
        "vocab_size": 4096,
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "intermediate_size": 1536,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "eos_token_id": 2,
        "codec_config": {"sampling_rate": 24000, "upsampling_ratios": [8, 5, 4, 3], "num_quantizers": 8},
    },
    "other_speech": {
        "architectures": ["OtherSpeechForConditionalGeneration"],
        "model_type": "other_speech",
        "vocab_size": 1031,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "intermediate_size": 2048,
        "num_attention_heads": 12,
        "max_position_embeddings": 2048,
        "rope_theta": 500000.0,
        "codec_eos_token_id": 1027,
        "eos_token_id": 1028,
        "audio_tokenizer_config": {"sample_rate": 16000, "hop_length": 320, "n_q": 4},
    },
}


def example_config(name: str) -> dict[str, Any]:
    """A fresh copy of one example config (changing it leaves :data:`EXAMPLE_CONFIGS` as it is).

    Parameters
    ----------
    name : str
        ``"my_tts"`` or ``"other_speech"``.

    Returns
    -------
    dict
        The ``config.json`` document.

    Raises
    ------
    KeyError
        An unknown name.
    """
    return copy.deepcopy(EXAMPLE_CONFIGS[name])


def write_example_config(name: str, path: Path, **changes: Any) -> Path:
    """Write one example config as ``config.json`` (top-level keys overridden by ``changes``).

    Parameters
    ----------
    name : str
        ``"my_tts"`` or ``"other_speech"``.
    path : Path
        The file to write.
    **changes
        Top-level keys to set (or replace) in the document.

    Returns
    -------
    Path
        ``path``.
    """
    path.write_text(json.dumps({**example_config(name), **changes}), encoding="utf-8")
    return path
