"""End-to-end quality measurements of two sets of takes (``porting-kit quality``): facts only.

Both sides speak the same prompts with the same seeds, N takes each. This module
reads such a set from a folder (:func:`read_take_set`) or synthesises it from a
spec's ``synthesize_reference`` / ``synthesize_candidate`` (:func:`synthesize_take_set`),
and measures per metric the reference's own spread (take against take) and the
candidate's distance from the reference (:func:`measure_quality`). No verdict and
no code string here: :mod:`porting_kit.checks.quality` judges.

Folder layout (one per side)::

    DIR/prompts.json        {"prompts": {"p01": "The text.", ...},   # required in REF_DIR
                             "seeds": [0, 1, 2],                     # optional: take k used seeds[k]
                             "chunk_samples": 9600}                  # optional: the streaming chunk
    DIR/p01/take0.wav       one file per take (WAV/FLAC), take0 .. take<N-1>
    DIR/p01/take1.wav

The candidate folder may omit ``prompts.json``; when present its texts must equal
the reference's. Its ``chunk_samples`` (at the candidate's rate) places the seams.

Metrics (each one :class:`MetricResult`; ``skipped`` holds the reason and the
install command when its package is absent):

* ``duration`` -- trimmed speech length; distance ``|log(d_cand / d_ref)|``;
* ``mcd`` -- mel-cepstral distortion (dB) along a DTW path (librosa MFCC 1..24);
* ``seam`` -- first-difference jump at each chunk boundary over the clip's 99th
  percentile ``|diff|`` (median over seams), and the per-frame relative L2 change of the
  log-mel frame at the seam over the clip's median frame change;
* ``wer`` -- ASR round trip (pocketsphinx's bundled US-English model, or the user's
  ``asr(waveform, sample_rate) -> str``) scored with jiwer after text normalisation;
* ``speaker`` -- ``1 - cos`` of speaker embeddings (resemblyzer's GE2E encoder, or the
  user's ``speaker(waveform, sample_rate) -> vector``);
* ``mos`` -- DNSMOS P.835 overall score (speechmos's bundled ONNX models, onnxruntime);
* ``stoi`` / ``pesq`` -- intrusive: the drop of STOI (pystoi) / PESQ MOS-LQO (pesq; wide-band
  at 16 kHz, narrow-band at 8 kHz) of the candidate's take against the reference's take of the
  same (prompt, seed), only where the two are the same utterance in time (:func:`align_pair`).
  With sampling on no pair aligns and both report "not applicable" (a skip, never a fail).
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError

#: The sidecar every take folder carries at its root.
PROMPTS_FILE = "prompts.json"
_TAKE_RE = re.compile(r"^take(\d+)\.(wav|flac)$", re.IGNORECASE)
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")

#: pip package per optional metric (the install command a skip names).
INSTALL = {"wer": "pip install pocketsphinx jiwer", "speaker": "pip install resemblyzer",
           "mos": "pip install speechmos onnxruntime", "stoi": "pip install pystoi",
           "pesq": "pip install pesq (an sdist: needs a C compiler, ~20 s)"}


@dataclass
class TakeSet:
    """The takes of one side.

    Attributes
    ----------
    prompts : dict of str to str
        Prompt id -> text, in order.
    takes : dict of str to list of np.ndarray [shape=(samples,)], float32
        Prompt id -> its takes (mono; a multi-channel file is averaged).
    sample_rate : int
        Hz; one rate for every take of the side.
    seeds : list of int
        ``seeds[k]`` made take ``k``.
    chunk_samples : int or None
        Streaming chunk length in samples at ``sample_rate`` (seams at its multiples).
    source : str
        The folder or the spec function the takes came from.
    """

    prompts: dict[str, str]
    takes: dict[str, list[Any]]
    sample_rate: int
    seeds: list[int]
    chunk_samples: int | None = None
    source: str = ""

    @property
    def n_takes(self) -> int:
        """Takes per prompt (the smallest count over prompts)."""
        return min(len(v) for v in self.takes.values())


def _read_sidecar(root: Path, required: bool) -> dict[str, Any] | None:
    p = root / PROMPTS_FILE
    if not p.is_file():
        if required:
            raise InputError(f"{root}: no {PROMPTS_FILE}; write {{\"prompts\": {{\"p01\": \"text\", ...}}}} "
                             f"beside the <prompt_id>/take<k>.wav folders")
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{p}: not readable JSON ({exc})") from None
    prompts = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(prompts, dict) or not prompts:
        raise InputError(f"{p}: needs \"prompts\": a non-empty object of prompt id -> text")
    for pid, text in prompts.items():
        if not _ID_RE.match(pid) or not isinstance(text, str) or not text.strip():
            raise InputError(f"{p}: prompt {pid!r} needs an id of letters, digits, _.- and a non-empty text")
    seeds = data.get("seeds")
    if seeds is not None and (not isinstance(seeds, list)
                              or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise InputError(f"{p}: \"seeds\" must be a list of integers")
    chunk = data.get("chunk_samples")
    if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 2):
        raise InputError(f"{p}: \"chunk_samples\" must be an integer >= 2")
    return data


def read_take_set(root: str | Path, prompts: dict[str, str] | None = None) -> TakeSet:
    """Read one side's takes from ``root`` (the layout in this module's docstring).

    Parameters
    ----------
    root : str or Path
        The side's folder.
    prompts : dict, optional
        The reference's prompts: given, ``root``'s ``prompts.json`` is optional and must agree.

    Returns
    -------
    TakeSet

    Raises
    ------
    InputError
        Missing folder or sidecar, a prompt without takes, take numbers with a gap,
        an unreadable clip, clips at different rates within the side, texts that differ
        from the reference's (one line naming the file).
    """
    import numpy as np

    from porting_kit.probes.waveform import read_audio

    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a folder; give a folder of <prompt_id>/take<k>.wav clips")
    data = _read_sidecar(root, required=prompts is None)
    own = data["prompts"] if data else None
    if prompts is not None and own is not None:
        if list(own) != list(prompts) or any(own[k].strip() != prompts[k].strip() for k in prompts):
            raise InputError(f"{root / PROMPTS_FILE}: prompts differ from the reference's; both sides must "
                             f"speak the same prompt ids and texts")
    prompts = dict(prompts if prompts is not None else own)
    takes: dict[str, list[Any]] = {}
    rates: set[tuple[int, str]] = set()
    for pid in prompts:
        folder = root / pid
        if not folder.is_dir():
            raise InputError(f"{folder}: missing; every prompt needs a folder of take<k>.wav clips")
        found = sorted((int(m.group(1)), f) for f in folder.iterdir() if (m := _TAKE_RE.match(f.name)))
        if not found:
            raise InputError(f"{folder}: no take<k>.wav clips")
        if [k for k, _ in found] != list(range(len(found))):
            raise InputError(f"{folder}: takes must be numbered take0, take1, ... without gaps")
        clips = []
        for _, f in found:
            y, sr = read_audio(f)
            rates.add((sr, str(f)))
            clip = np.asarray(y.mean(axis=0), dtype=np.float32)
            if not np.isfinite(clip).all():
                raise InputError(f"{f}: holds NaN or Inf samples; a take must be finite audio")
            clips.append(clip)
        takes[pid] = clips
    distinct = sorted({r for r, _ in rates})
    if len(distinct) > 1:
        example = {r: f for r, f in sorted(rates)}
        raise InputError(f"{root}: takes at different sample rates ({', '.join(f'{r} Hz: {example[r]}' for r in distinct)}); "
                         f"one side must use one rate")
    seeds = (data or {}).get("seeds") or list(range(max(len(v) for v in takes.values())))
    return TakeSet(prompts, takes, distinct[0], list(seeds), (data or {}).get("chunk_samples"), str(root))


def write_take_set(ts: TakeSet, root: str | Path, *, force: bool = False) -> Path:
    """Write ``ts`` in the folder layout (PCM-16 WAV takes and ``prompts.json``).

    Parameters
    ----------
    ts : TakeSet
    root : str or Path
        Created if absent.
    force : bool, default False
        Replace a take set already there (its ``prompts.json`` and take files of the same names).

    Returns
    -------
    Path
        ``root``.

    Raises
    ------
    InputError
        ``root`` already holds a ``prompts.json`` and ``force`` is False (nothing is written).
    """
    import numpy as np
    import soundfile as sf

    root = Path(root)
    if (root / PROMPTS_FILE).exists() and not force:
        raise InputError(f"{root}: already holds a take set ({PROMPTS_FILE}); choose another folder or force=True")
    root.mkdir(parents=True, exist_ok=True)
    side = {"prompts": ts.prompts, "seeds": ts.seeds}
    if ts.chunk_samples:
        side["chunk_samples"] = int(ts.chunk_samples)
    (root / PROMPTS_FILE).write_text(json.dumps(side, indent=1) + "\n", encoding="utf-8")
    for pid, clips in ts.takes.items():
        (root / pid).mkdir(exist_ok=True)
        for k, y in enumerate(clips):
            sf.write(str(root / pid / f"take{k}.wav"), np.clip(y, -1, 1), ts.sample_rate, subtype="PCM_16")
    return root


def synthesize_take_set(fn: Callable[[str, int], Any], prompts: dict[str, str] | Sequence[str],
                        seeds: Sequence[int] = (0, 1, 2), *, source: str = "",
                        chunk_samples: int | None = None) -> TakeSet:
    """Synthesise every prompt once per seed with ``fn(text, seed) -> (waveform, sample_rate)``.

    Parameters
    ----------
    fn : callable
        A spec's ``synthesize_reference`` or ``synthesize_candidate``.
    prompts : dict of id -> text, or list of str
        A list gets ids ``p00``, ``p01``...
    seeds : sequence of int
        Take ``k`` uses ``seeds[k]``; both sides get the same seeds.

    Returns
    -------
    TakeSet

    Raises
    ------
    InputError
        ``fn`` returned no ``(waveform, sample_rate)``, an empty waveform, or rates that differ.
    """
    import numpy as np

    if not isinstance(prompts, dict):
        prompts = {f"p{i:02d}": t for i, t in enumerate(prompts)}
    takes: dict[str, list[Any]] = {}
    rates = set()
    for pid, text in prompts.items():
        takes[pid] = []
        for seed in seeds:
            out = fn(text, int(seed))
            if not (isinstance(out, tuple) and len(out) == 2):
                raise InputError(f"{source or 'synthesize'}: must return (waveform, sample_rate)")
            y, sr = out
            y = np.asarray(y.detach().cpu().float() if hasattr(y, "detach") else y, dtype=np.float32)
            y = y.reshape(-1) if y.ndim == 1 or y.shape[0] == 1 else y.mean(axis=0)
            if y.size == 0:
                raise InputError(f"{source or 'synthesize'}: empty waveform for prompt {pid!r} seed {seed}")
            rates.add(int(sr))
            takes[pid].append(y)
    if len(rates) != 1:
        raise InputError(f"{source or 'synthesize'}: returned different sample rates {sorted(rates)}")
    return TakeSet(dict(prompts), takes, rates.pop(), [int(s) for s in seeds], chunk_samples, source)


def spec_take_sets(spec: Any) -> tuple[Any, Any]:
    """Both sides' takes of a spec that can synthesise them (the ``quality`` family's input).

    Parameters
    ----------
    spec : Spec
        Defines ``synthesize_reference``, ``synthesize_candidate`` and ``quality_prompts``;
        optional ``quality_seeds`` (default ``[0, 1, 2]``) and ``quality_chunk_samples``.

    Returns
    -------
    (TakeSet, TakeSet)
        The reference's and the candidate's, same prompts and seeds.

    Raises
    ------
    InputError
        A name is missing, or a synthesiser raised or returned no ``(waveform, sample_rate)``.
    """
    lacking = [n for n in ("synthesize_reference", "synthesize_candidate", "quality_prompts") if not spec.has(n)]
    if lacking:
        raise InputError(f"{spec.name}: the spec lacks {', '.join(lacking)} (both sides must synthesise "
                         f"a prompt list)")
    prompts = spec.get("quality_prompts")
    seeds = list(spec.get("quality_seeds", None) or (0, 1, 2))
    ref = synthesize_take_set(lambda t, s: spec.call("synthesize_reference", t, s), prompts, seeds,
                              source=f"{spec.name}:synthesize_reference")
    cand = synthesize_take_set(lambda t, s: spec.call("synthesize_candidate", t, s), prompts, seeds,
                               source=f"{spec.name}:synthesize_candidate",
                               chunk_samples=spec.get("quality_chunk_samples", None))
    return ref, cand


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

@dataclass
class MetricResult:
    """One metric on both sides.

    Attributes
    ----------
    name : str
        ``duration``, ``mcd``, ``seam``, ``stoi``, ``pesq``, ``wer``, ``speaker``, ``mos``.
    unit : str
    reference_spread : float or None
        The reference's worst take-to-take value (its own spread; ``None`` when skipped).
    candidate : float or None
        The candidate's value at its worst prompt (same scale as the spread).
    per_prompt : dict of str to dict
        Prompt id -> ``{"reference_spread", "candidate", ...}`` (plus transcripts for ``wer``).
    worst_prompt : str or None
        The prompt where the candidate is furthest beyond the reference's spread.
    higher_is_worse : bool
        Direction of the candidate value (``mos``: a lower score is worse, stored as a drop).
    skipped : str or None
        Why it did not run (with the install command), else ``None``.
    detail : dict
        Extra facts (the encoder or recogniser used, series for plots).
    """

    name: str
    unit: str
    reference_spread: float | None = None
    candidate: float | None = None
    per_prompt: dict[str, dict[str, Any]] = field(default_factory=dict)
    worst_prompt: str | None = None
    higher_is_worse: bool = True
    skipped: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _resample(y: Any, sr: int, target: int) -> Any:
    import librosa
    import numpy as np

    if sr == target:
        return y
    return np.asarray(librosa.resample(y, orig_sr=sr, target_sr=target), dtype=np.float32)


def speech_seconds(y: Any, sr: int, top_db: float = 40.0) -> float:
    """Length of ``y`` without leading/trailing silence (``librosa.effects.trim``), seconds."""
    import librosa

    trimmed, _ = librosa.effects.trim(y, top_db=top_db)
    return max(len(trimmed), 1) / sr


def _mfcc(y: Any, sr: int, fmax: float | None = None) -> Any:
    import librosa

    return librosa.feature.mfcc(y=y, sr=sr, n_mfcc=25, n_fft=1024, hop_length=256, n_mels=40, fmax=fmax)[1:]


def mel_cepstral_distortion(a: Any, b: Any) -> float:
    """MCD in dB between two MFCC matrices along their DTW path.

    Parameters
    ----------
    a, b : np.ndarray [shape=(coefficients, frames)]
        librosa MFCCs (dB-scaled log mel, orthonormal DCT) without c0.

    Returns
    -------
    float
        ``sqrt(2) * mean_path ||a_i - b_j||`` (dB).

    Notes
    -----
    Kubichek's MCD is ``(10 / ln 10) sqrt(2 sum (c - c')^2)`` on natural-log cepstra; librosa's
    MFCCs are already ``10 / ln 10`` times those, so the factor is ``sqrt(2)``. Alignment is
    ``librosa.sequence.dtw`` with the Euclidean cost.
    """
    import librosa
    import numpy as np

    _, path = librosa.sequence.dtw(X=a, Y=b, metric="euclidean")
    d = np.linalg.norm(a[:, path[:, 0]] - b[:, path[:, 1]], axis=0)
    return float(math.sqrt(2.0) * d.mean())


def seam_jumps(y: Any, sr: int, chunk_samples: int) -> dict[str, float]:
    """The discontinuity at each chunk boundary of ``y``.

    Parameters
    ----------
    y : np.ndarray [shape=(samples,)]
    sr : int
        Hz.
    chunk_samples : int
        Seams at ``chunk_samples, 2 * chunk_samples, ...``.

    Returns
    -------
    dict
        ``jump`` -- median over seams of ``|y[b] - y[b-1]|`` over the clip's 99th-percentile
        ``|diff|``; ``jump_max`` -- the largest seam's; ``frame_l2`` -- median over seams of the
        log-mel frame change ``||S_t - S_{t-1}|| / ||S_t||`` at the seam's frame over the clip's
        median frame change; ``seams`` -- how many.
    """
    import librosa
    import numpy as np

    bounds = np.arange(chunk_samples, len(y), chunk_samples)
    if bounds.size == 0:
        return {"jump": 0.0, "jump_max": 0.0, "frame_l2": 0.0, "seams": 0}
    diff = np.abs(np.diff(y, prepend=y[0]))
    scale = float(np.percentile(diff, 99)) + 1e-9
    jumps = diff[bounds] / scale
    hop = 128
    S = np.log(librosa.feature.melspectrogram(y=y, sr=sr, n_fft=512, hop_length=hop, n_mels=40) + 1e-6)
    change = np.linalg.norm(np.diff(S, axis=1), axis=0) / (np.linalg.norm(S[:, 1:], axis=0) + 1e-9)
    frames = np.clip(bounds // hop, 1, change.size) - 1
    frame_l2 = float(np.median(change[frames]) / (np.median(change) + 1e-12))
    return {"jump": float(np.median(jumps)), "jump_max": float(jumps.max()), "frame_l2": frame_l2,
            "seams": int(bounds.size)}


def normalise_text(text: str) -> str:
    """Lower case, no punctuation, single spaces (jiwer's transforms)."""
    import jiwer

    tf = jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(),
                        jiwer.Strip()])
    return tf(text)


def word_error_rate(truth: str, hypothesis: str) -> float:
    """WER of ``hypothesis`` against ``truth`` after :func:`normalise_text` (jiwer)."""
    import jiwer

    t, h = normalise_text(truth), normalise_text(hypothesis)
    if not t:
        return 0.0
    return float(jiwer.wer(t, h if h else "<empty>"))


def pocketsphinx_asr(y: Any, sr: int, vocabulary: Sequence[str] | None = None) -> str:
    """Transcribe with pocketsphinx's bundled US-English acoustic model (16 kHz, offline).

    Parameters
    ----------
    y : np.ndarray [shape=(samples,)], float
    sr : int
        Hz; resampled to 16 kHz.
    vocabulary : sequence of str, optional
        Closed vocabulary: a JSGF grammar ``( w1 | w2 | ... )*`` over these words (those in the
        bundled dictionary) replaces the bundled language model. The round trip then asks
        which of the prompts' words are heard, in which order -- what a dropped, repeated or
        garbled word changes -- and not open-vocabulary recognition, which the bundled model
        does poorly on synthetic voices.

    Returns
    -------
    str
        The hypothesis (lower case words), ``""`` when nothing was recognised.
    """
    import numpy as np
    from pocketsphinx import Decoder

    pcm = (np.clip(_resample(y, sr, 16000), -1, 1) * 32767).astype("<i2").tobytes()
    key = ("ps", tuple(sorted(set(vocabulary))) if vocabulary else None)
    dec = _DECODER.get(key)
    if dec is None:
        dec = Decoder(samprate=16000, loglevel="FATAL")
        words = [w for w in (key[1] or ()) if re.fullmatch(r"[a-z']+", w) and dec.lookup_word(w)]
        if words:
            dec.add_jsgf_string("prompts", "#JSGF V1.0;\ngrammar prompts;\npublic <s> = ( "
                                + " | ".join(words) + " )* ;\n")
            dec.activate_search("prompts")
        _DECODER[key] = dec
    dec.start_utt()
    dec.process_raw(pcm, full_utt=True)
    dec.end_utt()
    hyp = dec.hyp()
    return hyp.hypstr if hyp is not None else ""


_DECODER: dict[str, Any] = {}


def resemblyzer_embed(y: Any, sr: int) -> Any:
    """GE2E speaker embedding (resemblyzer, weights in its wheel), 256 floats, unit norm."""
    from resemblyzer import VoiceEncoder, preprocess_wav

    enc = _DECODER.get("ge2e")
    if enc is None:
        enc = _DECODER["ge2e"] = VoiceEncoder(device="cpu", verbose=False)
    return enc.embed_utterance(preprocess_wav(y, source_sr=sr))


def dnsmos_overall(y: Any, sr: int) -> float:
    """DNSMOS P.835 overall score (speechmos's bundled ONNX models), 1..5, at 16 kHz."""
    import numpy as np
    from speechmos import dnsmos

    x = np.clip(_resample(y, sr, 16000), -1, 1).astype(np.float32)
    return float(dnsmos.run(x, sr=16000)["ovrl_mos"])


def load_callable(ref: str, what: str) -> Callable[..., Any]:
    """Import ``module:function`` (``--asr`` / ``--speaker``), or raise InputError."""
    mod, _, name = ref.partition(":")
    if not mod or not name:
        raise InputError(f"{what} {ref!r}: give module:function (a function of (waveform, sample_rate))")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{what} {ref!r}: cannot import ({exc})") from None
    if not callable(fn):
        raise InputError(f"{what} {ref!r}: not callable")
    import inspect

    try:
        inspect.signature(fn).bind(None, 0)
    except TypeError:
        raise InputError(f"{what} {ref!r}: must take (waveform, sample_rate); its signature is "
                         f"{inspect.signature(fn)}") from None
    except ValueError:  # a builtin without a signature: judged when called
        pass
    return fn


def _available(*modules: str) -> str | None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            return m
    return None


def _pairs_spread(values: list[Any], dist: Callable[[Any, Any], float]) -> float:
    """Worst take-to-take distance within one side (0 with a single take)."""
    return max((dist(a, b) for a, b in itertools.combinations(values, 2)), default=0.0)


def _cross(ref: list[Any], cand: list[Any], dist: Callable[[Any, Any], float]) -> float:
    """Mean distance over every (candidate take, reference take) pair."""
    vals = [dist(r, c) for r in ref for c in cand]
    return float(sum(vals) / len(vals))


def _finish(res: MetricResult) -> MetricResult:
    """Reference spread and candidate value at the prompt worst beyond the spread."""
    rows = res.per_prompt
    res.reference_spread = max(r["reference_spread"] for r in rows.values())
    res.worst_prompt = max(rows, key=lambda k: rows[k]["candidate"] - rows[k]["reference_spread"])
    res.candidate = rows[res.worst_prompt]["candidate"]
    return res


def _distance_metric(name: str, unit: str, ref: TakeSet, cand: dict[str, list[Any]],
                     feature: Callable[[Any], Any], dist: Callable[[Any, Any], float]) -> MetricResult:
    res = MetricResult(name, unit)
    for pid in ref.prompts:
        rf = [feature(y) for y in ref.takes[pid]]
        cf = [feature(y) for y in cand[pid]]
        res.per_prompt[pid] = {"reference_spread": _pairs_spread(rf, dist), "candidate": _cross(rf, cf, dist)}
    return _finish(res)


def _duration(ref: TakeSet, cand: dict[str, list[Any]]) -> MetricResult:
    res = MetricResult("duration", "|log ratio|")
    sr = ref.sample_rate
    for pid in ref.prompts:
        dr = [speech_seconds(y, sr) for y in ref.takes[pid]]
        dc = [speech_seconds(y, sr) for y in cand[pid]]
        mr, mc = sum(dr) / len(dr), sum(dc) / len(dc)
        res.per_prompt[pid] = {"reference_spread": _pairs_spread(dr, lambda a, b: abs(math.log(a / b))),
                               "candidate": abs(math.log(mc / mr)), "ratio": mc / mr,
                               "reference_seconds": mr, "candidate_seconds": mc}
    return _finish(res)


def _seam(ref: TakeSet, cand_ts: TakeSet, cand: dict[str, list[Any]]) -> MetricResult:
    import numpy as np

    res = MetricResult("seam", "jump / p99 |diff|")
    if not cand_ts.chunk_samples:
        res.skipped = ("no chunk size: give chunk_samples in the candidate's prompts.json or "
                       "--chunk-samples to place the seams")
        return res
    sr = ref.sample_rate
    chunk = max(2, round(cand_ts.chunk_samples * sr / cand_ts.sample_rate))
    res.detail["chunk_samples"] = chunk
    for pid in ref.prompts:
        rj = [seam_jumps(y, sr, chunk) for y in ref.takes[pid]]
        cj = [seam_jumps(y, sr, chunk) for y in cand[pid]]
        if not any(j["seams"] for j in cj):
            continue
        res.per_prompt[pid] = {"reference_spread": max(j["jump"] for j in rj),
                               "candidate": float(np.median([j["jump"] for j in cj])),
                               "candidate_jump_max": max(j["jump_max"] for j in cj),
                               "reference_frame_l2": max(j["frame_l2"] for j in rj),
                               "candidate_frame_l2": float(np.median([j["frame_l2"] for j in cj])),
                               "seams": max(j["seams"] for j in cj)}
    if not res.per_prompt:
        res.skipped = f"no clip is longer than one chunk ({chunk} samples): no seam to measure"
        return res
    return _finish(res)


def _wer(ref: TakeSet, cand: dict[str, list[Any]], asr: Callable[[Any, int], str] | None) -> MetricResult:
    res = MetricResult("wer", "WER")
    if asr is None:
        missing = _available("pocketsphinx", "jiwer")
        if missing:
            res.skipped = f"{missing} is not installed: {INSTALL['wer']} (or pass --asr module:function)"
            return res
        vocabulary = sorted({w for t in ref.prompts.values() for w in normalise_text(t).split()})
        asr = lambda y, sr: pocketsphinx_asr(y, sr, vocabulary)  # noqa: E731
        res.detail["asr"] = "pocketsphinx (bundled en-us model, closed vocabulary of the prompts' words)"
    else:
        if _available("jiwer"):
            res.skipped = "jiwer is not installed: pip install jiwer"
            return res
        res.detail["asr"] = getattr(asr, "__module__", "") + ":" + getattr(asr, "__name__", "asr")
    sr = ref.sample_rate
    for pid, text in ref.prompts.items():
        rt = [str(asr(y, sr)) for y in ref.takes[pid]]
        ct = [str(asr(y, sr)) for y in cand[pid]]
        rw = [word_error_rate(text, t) for t in rt]
        cw = [word_error_rate(text, t) for t in ct]
        worst_c = max(range(len(cw)), key=cw.__getitem__)
        res.per_prompt[pid] = {"reference_spread": max(rw), "candidate": sum(cw) / len(cw),
                               "reference_mean": sum(rw) / len(rw), "text": text,
                               "reference_transcript": rt[max(range(len(rw)), key=rw.__getitem__)],
                               "candidate_transcript": ct[worst_c]}
    _finish(res)
    # ASR noise is large per prompt: judge the mean over prompts (worst take per prompt on the
    # reference's side, mean over takes on the candidate's)
    rows = res.per_prompt.values()
    res.reference_spread = sum(r["reference_spread"] for r in rows) / len(rows)
    res.candidate = sum(r["candidate"] for r in rows) / len(rows)
    return res


def _speaker(ref: TakeSet, cand: dict[str, list[Any]], speaker: Callable[[Any, int], Any] | None) -> MetricResult:
    import numpy as np

    res = MetricResult("speaker", "1 - cos")
    if speaker is None:
        missing = _available("resemblyzer", "webrtcvad")
        if missing:
            res.skipped = f"{missing} is not installed: {INSTALL['speaker']} (or pass --speaker module:function)"
            return res
        speaker = resemblyzer_embed
        res.detail["encoder"] = "resemblyzer GE2E (weights in the wheel)"
    sr = ref.sample_rate

    def dist(a: Any, b: Any) -> float:
        a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
        return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))

    out = _distance_metric("speaker", "1 - cos", ref, cand, lambda y: speaker(y, sr), dist)
    out.detail.update(res.detail or {"encoder": getattr(speaker, "__module__", "") + ":"
                                                + getattr(speaker, "__name__", "speaker")})
    return out


def _mos(ref: TakeSet, cand: dict[str, list[Any]]) -> MetricResult:
    res = MetricResult("mos", "DNSMOS drop", higher_is_worse=True)
    missing = _available("speechmos", "onnxruntime")
    if missing:
        res.skipped = f"{missing} is not installed: {INSTALL['mos']}"
        return res
    res.detail["model"] = "DNSMOS P.835 (speechmos, bundled ONNX)"
    sr = ref.sample_rate
    for pid in ref.prompts:
        rm = [dnsmos_overall(y, sr) for y in ref.takes[pid]]
        cm = [dnsmos_overall(y, sr) for y in cand[pid]]
        mr, mc = sum(rm) / len(rm), sum(cm) / len(cm)
        res.per_prompt[pid] = {"reference_spread": max(rm) - min(rm), "candidate": mr - mc,
                               "reference_mos": mr, "candidate_mos": mc}
    return _finish(res)


#: Two takes are the same utterance in time when the peak of their normalised waveform
#: cross-correlation reaches this ...
ALIGN_MIN_CORRELATION = 0.5
#: ... and, once the candidate is moved by the lag, the two takes end within this fraction of the
#: reference's length (a deterministic port that pads its last chunk differs by less; a 25 %
#: time-stretch or an early stop by far more). Whole clips, not trimmed speech: noise fills the
#: silence a trim would cut, so trimmed lengths would call a noisy deterministic take misaligned.
ALIGN_LENGTH_TOLERANCE = 0.05


@dataclass
class Alignment:
    """How one candidate take lines up with the reference's take of the same (prompt, seed).

    Attributes
    ----------
    lag : int
        Samples the candidate is late (negative: early), from the cross-correlation peak.
    correlation : float
        ``max |xcorr| / (||ref|| ||cand||)``: 1 for the same waveform, ~0.1-0.3 for two
        sampled takes of one prompt (measured on the espeak pair), 0.87 at 5 dB SNR noise.
    length_mismatch : float
        ``|(len_cand - lag) - len_ref| / len_ref``: where the two takes end once aligned.
    aligned : bool
        ``correlation >= ALIGN_MIN_CORRELATION`` and ``length_mismatch <= ALIGN_LENGTH_TOLERANCE``.
    """

    lag: int
    correlation: float
    length_mismatch: float
    aligned: bool


def align_pair(r: Any, c: Any, sr: int) -> Alignment:
    """Line up the candidate's take ``c`` with the reference's take ``r`` of the same (prompt, seed).

    One lag from the FFT cross-correlation of the waveforms, not a DTW path: STOI and PESQ
    compare the two signals frame by frame (PESQ also re-aligns utterances itself), and a
    DTW-warped candidate would hide a time-stretch and need a phase vocoder whose own artefacts
    PESQ would score. A single lag is what a deterministic port differs by (padding, a delayed first chunk).
    Length agreement alone does not tell the same utterance: two sampled espeak takes of one
    prompt have speech lengths within 1-4 % of each other; their waveform correlation
    (0.06-0.27) tells them apart.

    Returns
    -------
    Alignment
    """
    import numpy as np
    from scipy.signal import correlate

    x = correlate(c.astype(np.float64), r.astype(np.float64), mode="full", method="fft")
    peak = int(np.argmax(np.abs(x)))
    corr = float(np.abs(x[peak]) / (np.linalg.norm(r) * np.linalg.norm(c) + 1e-12))
    lag = peak - (len(r) - 1)
    mismatch = abs((len(c) - lag) - len(r)) / len(r)
    return Alignment(lag, corr, mismatch, corr >= ALIGN_MIN_CORRELATION and mismatch <= ALIGN_LENGTH_TOLERANCE)


def shifted(r: Any, c: Any, lag: int) -> tuple[Any, Any]:
    """``r`` and ``c`` over their common span once ``c`` is moved ``lag`` samples earlier."""
    if lag > 0:
        c = c[lag:]
    elif lag < 0:
        r = r[-lag:]
    n = min(len(r), len(c))
    return r[:n], c[:n]


def stoi_score(r: Any, c: Any, sr: int) -> float | None:
    """STOI of ``c`` against ``r`` (pystoi; resamples to 10 kHz itself), 0..1; ``None`` where too
    little speech is left after pystoi drops the silent frames (it would return 1e-5)."""
    import warnings

    from pystoi import stoi

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score = float(stoi(r, c, sr, extended=False))
    if any("Not enough STFT frames" in str(w.message) for w in caught):
        return None
    return score


def pesq_mode(sr: int) -> tuple[int, str] | None:
    """``(rate, mode)`` PESQ runs at for a clip at ``sr``: wide-band at 16 kHz (``sr >= 16000``),
    narrow-band at 8 kHz (``8000 <= sr < 16000``), else ``None`` (not applicable)."""
    if sr >= 16000:
        return 16000, "wb"
    if sr >= 8000:
        return 8000, "nb"
    return None


def pesq_score(r: Any, c: Any, sr: int) -> float | None:
    """PESQ MOS-LQO of ``c`` against ``r`` after resampling (soxr via librosa) to
    :func:`pesq_mode`'s rate; ``None`` where PESQ finds no utterance or the clip is too short."""
    from pesq import PesqError, pesq

    rate, mode = pesq_mode(sr)
    try:
        return float(pesq(rate, _resample(r, sr, rate), _resample(c, sr, rate), mode))
    except PesqError:
        return None


def _intrusive(name: str, ref: TakeSet, cand: dict[str, list[Any]]) -> MetricResult:
    """STOI or PESQ drop per aligned (prompt, seed) pair (take ``k`` of both sides, as every metric
    pairs them); the reference's spread from its takes that share a seed (re-synthesised),
    else 0 (the floor alone judges)."""
    unit = "STOI drop" if name == "stoi" else "PESQ drop (MOS-LQO)"
    res = MetricResult(name, unit)
    module = "pystoi" if name == "stoi" else "pesq"
    if _available(module):
        res.skipped = f"{module} is not installed: {INSTALL[name]}"
        return res
    sr = ref.sample_rate
    if name == "pesq":
        if pesq_mode(sr) is None:
            res.skipped = f"not applicable: PESQ needs 8 kHz or more, the reference is at {sr} Hz"
            return res
        rate, mode = pesq_mode(sr)
        res.detail["pesq_mode"] = f"{mode} at {rate} Hz"

    unmeasurable = []

    def drop(r: Any, c: Any) -> float | None:
        a = align_pair(r, c, sr)
        if not a.aligned:
            return None
        r, c = shifted(r, c, a.lag)
        if name == "stoi":
            score = stoi_score(r, c, sr)
            out = None if score is None else 1.0 - score
        else:
            own, other = pesq_score(r, r, sr), pesq_score(r, c, sr)
            out = None if own is None or other is None else own - other
        if out is None:
            unmeasurable.append(1)
        return out

    seeds = list(ref.seeds)
    pairs = aligned = 0
    for pid in ref.prompts:
        rt, ct = ref.takes[pid], cand[pid]
        same_seed = [(i, j) for i, j in itertools.combinations(range(len(rt)), 2)
                     if i < len(seeds) and j < len(seeds) and seeds[i] == seeds[j]]
        spread = [d for i, j in same_seed if (d := drop(rt[i], rt[j])) is not None]
        drops = []
        for k in range(min(len(rt), len(ct))):
            pairs += 1
            d = drop(rt[k], ct[k])
            if d is not None:
                drops.append(d)
        aligned += len(drops)
        if drops:
            res.per_prompt[pid] = {"reference_spread": max(spread, default=0.0),
                                   "candidate": sum(drops) / len(drops), "candidate_worst": max(drops),
                                   "aligned_pairs": len(drops), "same_seed_reference_pairs": len(spread)}
    if not res.per_prompt and unmeasurable:
        res.skipped = (f"not applicable: {name} found too little speech in {len(unmeasurable)} aligned "
                       f"pair(s) (clips too short or silent)")
        return res
    if not res.per_prompt:
        res.skipped = (f"not applicable: takes not aligned (sampling on): none of the {pairs} (prompt, seed) "
                       f"pairs is the same utterance in time (waveform correlation >= {ALIGN_MIN_CORRELATION} "
                       f"and ends within {ALIGN_LENGTH_TOLERANCE:.0%} of the reference's length once aligned)")
        return res
    res.detail["aligned_pairs"] = f"{aligned} of {pairs}"
    if unmeasurable:
        res.detail["unmeasurable_pairs"] = len(unmeasurable)
    same = sum(r["same_seed_reference_pairs"] for r in res.per_prompt.values())
    res.detail["reference_spread_from"] = (f"{same} aligned pairs of reference takes with the same seed" if same
                                           else "no two reference takes share a seed: the absolute floor judges")
    return _finish(res)


@dataclass
class QualityMeasurement:
    """Everything :func:`measure_quality` measured.

    Attributes
    ----------
    reference, candidate : TakeSet
    sample_rates : (int, int)
        The two sides' rates in Hz (the candidate is resampled to the reference's to be measured).
    metrics : dict of str to MetricResult
        In the order ``duration, mcd, seam, stoi, pesq, wer, speaker, mos`` (those asked for).
    """

    reference: TakeSet
    candidate: TakeSet
    sample_rates: tuple[int, int]
    metrics: dict[str, MetricResult]


#: Every metric :func:`measure_quality` knows, in run order; ``stoi``/``pesq``/``wer``/``speaker``/``mos``
#: need packages.
METRICS = ("duration", "mcd", "seam", "stoi", "pesq", "wer", "speaker", "mos")


def measure_quality(ref: TakeSet, cand: TakeSet, *, metrics: Sequence[str] = METRICS,
                    asr: Callable[[Any, int], str] | None = None,
                    speaker: Callable[[Any, int], Any] | None = None) -> QualityMeasurement:
    """Measure the candidate's takes against the reference's own take-to-take spread.

    Parameters
    ----------
    ref, cand : TakeSet
        Same prompt ids; ``cand`` is resampled to ``ref.sample_rate`` (librosa) first.
    metrics : sequence of str
        A subset of :data:`METRICS`.
    asr : callable, optional
        ``asr(waveform, sample_rate) -> str``; default pocketsphinx's bundled model.
    speaker : callable, optional
        ``speaker(waveform, sample_rate) -> vector``; default resemblyzer's GE2E.

    Returns
    -------
    QualityMeasurement
        Per metric: the reference's worst take-to-take value and the candidate's value
        (mean over its takes against every reference take) at its worst prompt.

    Raises
    ------
    InputError
        The sides do not have the same prompt ids, or a metric name is unknown.
    """
    if list(ref.prompts) != list(cand.prompts):
        raise InputError("reference and candidate prompts differ: "
                         f"{sorted(set(ref.prompts) ^ set(cand.prompts))[:5]}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise InputError(f"unknown quality metric(s) {unknown}; known: {', '.join(METRICS)}")
    sr = ref.sample_rate
    c = {pid: [_resample(y, cand.sample_rate, sr) for y in clips] for pid, clips in cand.takes.items()}
    out: dict[str, MetricResult] = {}
    for m in METRICS:
        if m not in metrics:
            continue
        if m == "duration":
            out[m] = _duration(ref, c)
        elif m == "mcd":
            band = min(ref.sample_rate, cand.sample_rate) / 2  # the band both rates carry
            out[m] = _distance_metric("mcd", "dB", ref, c, lambda y: _mfcc(y, sr, band), mel_cepstral_distortion)
            out[m].detail["fmax_hz"] = int(band)
        elif m == "seam":
            out[m] = _seam(ref, cand, c)
        elif m in ("stoi", "pesq"):
            out[m] = _intrusive(m, ref, c)
        elif m == "wer":
            out[m] = _wer(ref, c, asr)
        elif m == "speaker":
            out[m] = _speaker(ref, c, speaker)
        else:
            out[m] = _mos(ref, c)
    return QualityMeasurement(ref, cand, (ref.sample_rate, cand.sample_rate), out)
