"""Reference-audio baselines (``reference_audio/``): record the reference's audio once, compare later.

``porting-kit baseline record SPEC`` decodes the spec's ``codes()`` with
``decode_reference`` and writes ``<out>/<name>.wav`` (32-bit float WAV, so the
comparison is exact) and ``<out>/<name>.json``, the sidecar:

=================  ==============================================================
key                meaning
=================  ==============================================================
schema             ``porting-kit/baseline/1``
spec, variant      where the audio came from (spec path or ``example:<name>``)
sample_rate        Hz
channels, samples  layout of the file
duration_s         seconds
seed               the spec's ``SEED`` (``None`` when it has none)
inputs             what was decoded: codes shape and the codes' sha256
sha256             of the audio file's bytes (a changed file is refused)
versions           python, torch, transformers, numpy, soundfile, porting-kit
provenance         free text (e.g. the espeak-ng command of a speech clip)
=================  ==============================================================

``porting-kit baseline compare SPEC`` decodes the same codes with
``decode_candidate`` and compares the served audio with the recorded file
(measured by :func:`porting_kit.probes.waveform.analyse_waveforms`, judged by
:func:`porting_kit.audio_files.waveform_findings`): the ``hop`` and ``channel``
codes of the audio checks. Nothing is overwritten without ``force`` (then the
old files are kept as ``.bak``); writes are atomic.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError
from porting_kit.report.findings import Report, ok

SCHEMA = "porting-kit/baseline/1"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes.

    Parameters
    ----------
    path : str or Path
        File to hash; read in 64 KiB blocks.

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    OSError
        The file cannot be opened (callers turn it into :class:`InputError`).
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape the audio (missing ones omitted).

    Returns
    -------
    dict of str to str
        ``python`` always; ``torch``, ``transformers``, ``numpy``, ``soundfile``, ``librosa``,
        ``encodec``, ``porting-kit`` when installed (``importlib.metadata`` versions).
    """
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "numpy", "soundfile", "librosa", "encodec", "porting-kit"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def _atomic_write_audio(path: Path, wav, sample_rate: int, subtype: str, backup: bool) -> None:
    import soundfile as sf

    from porting_kit.fsutil import atomic_write

    # the temporary file keeps the audio suffix: soundfile picks the format from it
    atomic_write(path, lambda tmp: sf.write(tmp, wav, sample_rate, subtype=subtype),
                 backup=backup, suffix=path.suffix)


def write_clip(path: str | Path, wav, sample_rate: int, sidecar: dict[str, Any], *,
               force: bool = False, subtype: str = "FLOAT") -> list[Path]:
    """Write an audio file and its ``.json`` sidecar (sha256, duration, versions added).

    Parameters
    ----------
    path : str or Path
        Audio file (``.wav`` or ``.flac``).
    wav : np.ndarray [shape=(channels, samples)]
    sample_rate : int
        Hz.
    sidecar : dict
        Extra keys (spec, seed, inputs, provenance...).
    force : bool
        Replace existing files, keeping ``.bak`` copies.
    subtype : str
        soundfile subtype (``FLOAT`` for exact baselines, ``PCM_16`` for clips).

    Returns
    -------
    list of Path
        ``[audio, sidecar]``.

    Raises
    ------
    InputError
        A file exists and ``force`` is false, or the folder cannot be written.
    """
    import numpy as np

    from porting_kit.fsutil import atomic_write, atomic_write_text

    path = Path(path)
    side = path.with_suffix(".json")
    existing = [p for p in (path, side) if p.exists()]
    if existing and not force:
        raise InputError(f"{existing[0]}: baseline exists; pass --force to replace it "
                         "(the old files are kept as .bak)")
    w = np.asarray(wav, dtype=np.float32)
    w = w[None, :] if w.ndim == 1 else w
    # the clip and its sidecar land together: an error or Ctrl-C between them restores both
    before = {p: (p.read_bytes() if p.is_file() else None) for p in (path, side)}
    baks_before = set(path.parent.glob("*.bak*")) if path.parent.is_dir() else set()
    try:
        _atomic_write_audio(path, w.T, int(sample_rate), subtype, backup=force)
        meta = {"schema": SCHEMA, **sidecar, "sample_rate": int(sample_rate),
                "channels": int(w.shape[0]), "samples": int(w.shape[1]),
                "duration_s": round(w.shape[1] / sample_rate, 6), "file": path.name,
                "sha256": sha256_file(path), "versions": library_versions()}
        atomic_write_text(side, json.dumps(meta, indent=2, sort_keys=False) + "\n", backup=force)
    except BaseException as exc:
        for p, data in before.items():
            if data is None:
                p.unlink(missing_ok=True)
            else:
                atomic_write(p, lambda tmp, data=data: Path(tmp).write_bytes(data))
        for bak in set(path.parent.glob("*.bak*")) - baks_before:
            bak.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"{path.parent}: cannot write baseline ({exc.strerror or exc})") from exc
        raise
    return [path, side]


def read_sidecar(path: str | Path) -> dict[str, Any]:
    """Read and verify a clip's sidecar: the audio file's sha256 must match.

    Parameters
    ----------
    path : str or Path
        The audio file (``<name>.wav``); the sidecar is ``path.with_suffix(".json")``.
        The audio file checked is the one the sidecar's ``file`` key names, in the same
        folder (``path``'s own name when the key is absent).

    Returns
    -------
    dict
        The sidecar's JSON object (keys of the module table: ``sample_rate`` in Hz,
        ``samples``, ``duration_s`` in seconds, ``inputs``, ``sha256``...).

    Raises
    ------
    InputError
        Missing or unreadable sidecar/audio, a sidecar that is not a JSON object with
        a ``sha256`` string, or an audio file changed since recording (exit 2).
    """
    side = Path(path).with_suffix(".json")
    if not side.exists():
        raise InputError(f"{side}: no baseline recorded; run `porting-kit baseline record` first")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{side}: unreadable baseline sidecar ({exc})") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
        raise InputError(f"{side}: not a porting-kit baseline sidecar (needs a JSON object with the "
                         "audio's sha256); record it again with `porting-kit baseline record --force`")
    audio = side.with_name(str(meta.get("file", Path(path).name)))
    if not audio.exists():
        raise InputError(f"{audio}: baseline audio missing (sidecar {side.name} names it)")
    if sha256_file(audio) != meta["sha256"]:
        raise InputError(f"{audio}: sha256 differs from its sidecar; the baseline was modified "
                         "(record it again with --force)")
    return meta


def _name(spec) -> str:
    return spec.name.split(":", 1)[1] if spec.name.startswith("example:") else Path(spec.name).stem


def _codes_digest(codes) -> str:
    return hashlib.sha256(codes.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def _load(spec_path, example, variant=None):
    from porting_kit.probes.codec_pair import missing_reason
    from porting_kit.spec import load_spec

    spec = load_spec(spec_path, example=example, variant=variant)
    reason = missing_reason(spec)
    if reason:
        raise InputError(f"{spec.name}: cannot record/compare a baseline: {reason}")
    return spec


def record(spec_path: str | Path | None, *, example: str | None = None,
           out_dir: str | Path = "reference_audio", force: bool = False) -> list[Path]:
    """Decode the spec's codes with its reference and save ``<out_dir>/<name>.wav`` + sidecar.

    Parameters
    ----------
    spec_path : str or Path or None
        Port spec; ``None`` for the embedded example (``example``, default ``tts``).
    example : str, optional
        Embedded example name.
    out_dir : str or Path
        Baseline folder.
    force : bool
        Replace an existing baseline (``.bak`` copies kept).

    Returns
    -------
    list of Path
        The audio file and its sidecar.

    Raises
    ------
    InputError
        The spec has no audio names; its codes are empty; the reference's audio is
        empty or holds NaN/Inf; a baseline exists without ``force``; ``out_dir`` is not
        a folder, lies inside the installed package, or cannot be written.
    """
    import numpy as np
    import torch

    from porting_kit.fsutil import check_output_dir
    from porting_kit.probes.waveform import as_channels_first

    check_output_dir(out_dir, what="--out")
    spec = _load(spec_path, example)
    codes = spec.call("codes")
    if not isinstance(codes, torch.Tensor) or codes.numel() == 0:
        raise InputError(f"{spec.name}: codes() returned no codes (shape "
                         f"{tuple(getattr(codes, 'shape', ()))}); nothing to record")
    with torch.no_grad():
        wav, sr = spec.call("decode_reference", codes)
    y = as_channels_first(wav)
    if y.size == 0:
        raise InputError(f"{spec.name}: decode_reference returned empty audio; nothing to record")
    if not np.isfinite(y).all():
        raise InputError(f"{spec.name}: decode_reference returned NaN/Inf samples "
                         f"({int((~np.isfinite(y)).sum())} of {y.size}); a baseline must be finite")
    sidecar = {"spec": spec.name, "variant": None, "seed": spec.get("SEED"),
               "inputs": {"codes_shape": list(codes.shape), "codes_sha256": _codes_digest(codes)},
               "provenance": f"decode_reference(codes()) of {spec.name}, recorded "
                             f"{time.strftime('%Y-%m-%d', time.gmtime())}"}
    return write_clip(Path(out_dir) / f"{_name(spec)}.wav", y, int(sr), sidecar, force=force)


def compare(spec_path: str | Path | None, *, example: str | None = None, variant: str | None = None,
            out_dir: str | Path = "reference_audio") -> Report:
    """Compare the candidate's served audio with the recorded baseline.

    Parameters
    ----------
    spec_path : str or Path or None
        Port spec; ``None`` for the embedded example (``example``, default ``tts``).
    example : str, optional
        Embedded example name, optionally ``name:variant``.
    variant : str, optional
        Planted-fault variant of the spec whose candidate is compared with the recorded
        baseline.
    out_dir : str or Path, default "reference_audio"
        Folder holding ``<name>.wav`` and ``<name>.json``; ``<name>`` is the spec file's
        stem or the example's name.

    Returns
    -------
    Report
        Command ``baseline``; ``hop`` / ``channel`` findings (``<prefix>.ok``
        when clean; content tolerance ``FP32_MIN_SNR_DB`` = 60 dB SNR); exit
        code 1 on a fault. ``report.extras["comparison"]`` holds the
        :class:`~porting_kit.probes.waveform.WaveformComparison`.

    Raises
    ------
    InputError
        No audio names in the spec, no baseline, a modified baseline file, or codes
        that differ from the ones recorded (the spec changed: record again).
    """
    import torch

    from porting_kit.audio_files import waveform_findings
    from porting_kit.probes.codec_pair import hop_length_of_spec
    from porting_kit.probes.waveform import FP32_MIN_SNR_DB, analyse_waveforms, read_audio

    t0 = time.perf_counter()
    spec = _load(spec_path, example, variant)
    path = Path(out_dir) / f"{_name(spec)}.wav"
    meta = read_sidecar(path)
    ref, sr_ref = read_audio(path)
    codes = spec.call("codes")
    want = (meta.get("inputs") or {}).get("codes_sha256")
    if want and want != _codes_digest(codes):
        raise InputError(f"{path}: the spec's codes() differ from the recorded ones; "
                         "record the baseline again (--force)")
    with torch.no_grad():
        cand, sr_c = spec.call("decode_candidate", codes)
    cmp = analyse_waveforms(ref, cand, sr_ref, int(sr_c), hop_length=hop_length_of_spec(spec),
                            frames=int(codes.shape[1]), served=True)
    by_family = waveform_findings(cmp, (path.name, f"{spec.name} candidate"), min_snr_db=FP32_MIN_SNR_DB)
    report = Report(command="baseline")
    for fam in ("hop", "channel"):
        report.findings.extend(by_family[fam] or [ok(fam, evidence={"baseline": str(path),
                                                                    "snr_db": cmp.metrics.snr_db})])
    report.timing = {"total": time.perf_counter() - t0}
    report.extras["comparison"] = cmp
    return report
