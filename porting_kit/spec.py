"""Port specs: the small Python file that describes a port (DESIGN.md, "The port spec").

A spec is a plain module. Required for layer parity: ``reference()``,
``candidate()``, ``inputs()``. Optional names: ``convert_weights``,
``run_reference`` / ``run_candidate``, ``module_map``, ``tolerances``, the audio
names (``codes``, ``decode_reference``, ``decode_candidate``, ``hop_length`` or
``codec_config``, optional ``decode_candidate_stream`` with ``stream_chunk_frames``
/ ``stream_context_frames`` / ``stream_lookahead_frames``, ``decode_candidate_stream_batch``,
``codec_candidate``; README "Port spec: audio names",
:mod:`porting_kit.probes.codec_pair`), ``engine_model``, ``synthesize_candidate`` / ``synthesize_reference``,
``reference_config`` / ``candidate_config``, ``candidate_tp(rank, world_size)`` and
``tp_timeout`` (the sharded port for ``--tp N``, :mod:`porting_kit.probes.tp`), the per-module overrides
``module_tolerances`` / ``allow_divergence`` (:func:`porting_kit.probes.layers.module_rules`),
the decode names ``decode_steps``, ``candidate_step`` / ``reference_step``
(:mod:`porting_kit.probes.decode`) and the sampling names ``sampling_params``,
``candidate_logits_processor``, ``candidate_sampler``, ``sampling_vocab_size``
(:mod:`porting_kit.checks.sampling`). A spec that only defines the
generator-style names (``engine_model`` or ``synthesize_candidate``) is valid:
parity is then reported as ``skip``. So is a spec with only the audio names
(``codes``, ``decode_reference``, ``decode_candidate``): the audio families run,
every other family reports ``skip`` with its reason; so is one with only
``sampling_params`` and ``candidate_sampler`` / ``candidate_logits_processor`` (the
``sampling`` family); and one with only the feature
names ``reference_features(waveform, sample_rate)`` / ``candidate_features(waveform,
sample_rate)`` (optional ``feature_clip``, ``feature_layout``;
:mod:`porting_kit.probes.features`), which any spec may add for the ``features`` family.

Variants (planted faults)
-------------------------
A spec may declare ``VARIANTS = {"name": "one-line description", ...}`` and a
module global ``VARIANT = None``. ``load_spec(path, variant="name")`` imports the
module, checks the name is declared and sets ``module.VARIANT = "name"`` before
any spec function runs; the spec's functions read ``VARIANT`` to plant their
fault. On the command line: ``porting-kit check SPEC --variant NAME`` or
``porting-kit check --example tts:NAME`` for the embedded examples.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from porting_kit.errors import InputError

PARITY_NAMES = ("reference", "candidate", "inputs")
GENERATOR_NAMES = ("engine_model", "synthesize_candidate")
#: The audio names that let the audio families (hop, channel, dtype) run on their own.
AUDIO_NAMES = ("codes", "decode_reference", "decode_candidate")
#: The reference-audio feature names that let the ``features`` family run on their own.
FEATURE_NAMES = ("reference_features", "candidate_features")
#: With ``sampling_params``, either lets the ``sampling`` family run on its own.
SAMPLING_NAMES = ("candidate_sampler", "candidate_logits_processor")

#: Embedded examples: name -> module path. The first is the default.
EMBEDDED = {
    "tts": "porting_kit.embedded.tts",
    "generator": "porting_kit.embedded.generator",
    "espeak": "porting_kit.embedded.espeak_pair",
}
DEFAULT_EXAMPLE = "tts"


@dataclass
class Spec:
    """A loaded port spec.

    Attributes
    ----------
    module : ModuleType
        The imported spec module; optional names are read from it with :meth:`get`.
    name : str
        Display name: the file path, or ``example:<name>`` for an embedded one.
    variant : str | None
        The planted-fault variant in force, if any.
    """

    module: ModuleType
    name: str
    variant: str | None = None
    trust_remote_code: bool = False

    def get(self, attr: str, default: Any = None) -> Any:
        """The spec's optional name ``attr``, or ``default`` when it does not define it.

        Parameters
        ----------
        attr : str
            A module-level name of the spec (``"module_map"``, ``"hop_length"``, ``"SEED"``...).
        default : Any, default None
            Returned when the spec module has no attribute ``attr``.

        Returns
        -------
        Any
            The attribute itself (a function is returned, not called: see :meth:`call`).
        """
        return getattr(self.module, attr, default)

    def has(self, attr: str) -> bool:
        """True when the spec module defines ``attr`` (callable or not).

        Parameters
        ----------
        attr : str
            A module-level name of the spec.

        Returns
        -------
        bool
        """
        return hasattr(self.module, attr)

    @property
    def has_parity(self) -> bool:
        """True when the spec defines the parity trio ``reference``/``candidate``/``inputs``
        (``reference`` may be a local model directory, a string)."""
        return all(callable(getattr(self.module, n, None)) or (n == "reference" and self.reference_is_path)
                   for n in PARITY_NAMES)

    @property
    def reference_is_path(self) -> bool:
        """True when the spec's ``reference`` is a local model directory (a string), not a function."""
        return isinstance(getattr(self.module, "reference", None), (str, Path))

    @property
    def variants(self) -> dict[str, str]:
        """The spec's ``VARIANTS``: name -> one-line description (``{}`` when it has none)."""
        return dict(getattr(self.module, "VARIANTS", {}) or {})

    def call(self, attr: str, *args: Any, **kwargs: Any) -> Any:
        """Call the spec function ``attr`` with ``args`` / ``kwargs``.

        Parameters
        ----------
        attr : str
            Name of a spec function (``"reference"``, ``"inputs"``, ``"decode_candidate"``...).
        *args, **kwargs
            Passed through unchanged.

        Returns
        -------
        Any
            Whatever the spec function returns.

        Raises
        ------
        InputError
            ``attr`` is missing or not callable (``reference`` may be a local model
        directory: :func:`porting_kit.adapters.transformers_local.load_local_reference`),
        or the function raised (any ``Exception``
            or ``SystemExit``; an ``InputError`` raised inside passes through unchanged).
            The message names the spec and the function: the tool could not run, exit 2.
        """
        fn: Callable[..., Any] | None = getattr(self.module, attr, None)
        if attr == "reference" and self.reference_is_path:
            from porting_kit.adapters.transformers_local import load_local_reference

            spec_dir = None if self.name.startswith("example:") else Path(self.name).resolve().parent
            return load_local_reference(fn, spec_dir=spec_dir, trust_remote_code=self.trust_remote_code)
        if not callable(fn):
            raise InputError(f"{self.name}: spec does not define {attr}()")
        try:
            return fn(*args, **kwargs)
        except InputError:
            raise
        except (Exception, SystemExit) as exc:  # reported as one line, exit 2
            raise InputError(f"{self.name}: {attr}() raised {_describe(exc)}") from exc


#: Import name -> the install that provides it, for a spec (or a shipped example) that needs it.
EXTRA_FOR_MODULE = {
    "llama_models": "pip install 'porting-kit[examples]'",
    "fairscale": "pip install 'porting-kit[examples]'",
    "encodec": "pip install 'porting-kit[examples]'",
    "torch": "pip install 'porting-kit[torch]'",
    "transformers": "pip install 'porting-kit[torch]'",
    "librosa": "pip install 'porting-kit[audio]'",
    "soundfile": "pip install 'porting-kit[audio]'",
    "scipy": "pip install 'porting-kit[audio]'",
    "matplotlib": "pip install 'porting-kit[audio]'",
}


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".", 1)[0]
        install = EXTRA_FOR_MODULE.get(top)
        text += f" (install it: {install})" if install else f" (install the package that provides {top!r})"
    return text


def _shipped_example(p: Path) -> Path | None:
    """``examples/NAME.py`` given relative to a folder that has no such file: the copy shipped
    with porting-kit (a wheel install has no ``examples/`` in the user's folder), else None."""
    if p.is_absolute() or len(p.parts) != 2 or p.parts[0] != "examples":
        return None
    from porting_kit.resources import shipped

    try:
        candidate = shipped("examples") / p.name
    except InputError:  # no shipped folder: the plain "not found" stands
        return None
    return candidate if candidate.is_file() else None


def _import_file(path: Path) -> ModuleType:
    mod_name = f"porting_kit_spec_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    # Let a spec import helpers that sit beside it.
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a spec calling sys.exit() is bad input too
        sys.modules.pop(mod_name, None)
        raise InputError(f"{path}: spec failed to import: {_describe(exc)}") from exc
    finally:
        try:
            sys.path.remove(str(path.parent))
        except ValueError:
            pass
    return module


def load_spec(path: str | Path | None = None, *, example: str | None = None,
              variant: str | None = None, trust_remote_code: bool = False) -> Spec:
    """Import a port spec file, or an embedded example.

    Parameters
    ----------
    path : str or Path, optional
        A ``.py`` spec file. With neither ``path`` nor ``example``, the embedded
        default example (``tts``) is used.
    example : str, optional
        An embedded example name, optionally with a variant: ``"tts"``,
        ``"tts:qk_not_permuted"``.
    variant : str, optional
        A planted-fault variant declared in the spec's ``VARIANTS``.
    trust_remote_code : bool, default False
        Passed to transformers when the spec's ``reference`` is a local model directory
        (``--trust-remote-code``); never set implicitly.

    Returns
    -------
    Spec

    Raises
    ------
    InputError
        Missing or unreadable file, import failure, unknown example or
        variant, or a spec with neither the parity trio nor a generator-style
        name (``engine_model`` / ``synthesize_candidate``) nor the three audio names
        (``codes`` / ``decode_reference`` / ``decode_candidate``) nor the two feature names
        (``reference_features`` / ``candidate_features``). A spec that defines
        some but not all of the parity trio and nothing else is also rejected,
        naming the missing function.
    """
    if path is not None and example is not None:
        raise InputError("give a SPEC path or --example, not both")
    _guard_imports()
    if example is not None and (not example.strip() or example.strip().endswith(":")):
        raise InputError(f"--example {example!r}: give an example name (and optionally :variant); "
                         "run `porting-kit examples` for the list")
    if path is None:
        module, name, variant = _import_example(example or DEFAULT_EXAMPLE, variant)
    else:
        module, name = _import_spec_file(Path(path)), str(Path(path))
    spec = Spec(module=module, name=name, trust_remote_code=bool(trust_remote_code))
    if variant is not None:
        _select_variant(spec, variant)
    _validate(spec)
    return spec


def _import_example(example: str, variant: str | None):
    """``(module, name, variant)`` of an embedded example ``name[:variant]``, freshly imported."""
    ex_name, _, ex_variant = example.partition(":")
    if ex_variant:
        if variant and variant != ex_variant:
            raise InputError(f"--example {example} and --variant {variant} disagree")
        variant = ex_variant
    if ex_name not in EMBEDDED:
        raise InputError(f"unknown example {ex_name!r}; known: {', '.join(EMBEDDED)} "
                         "(run `porting-kit examples`)")
    module = importlib.import_module(EMBEDDED[ex_name])
    module = importlib.reload(module)  # fresh globals: VARIANT from a previous load is gone
    return module, f"example:{ex_name}", variant


def _import_spec_file(p: Path):
    """Import a spec file after checking it is a readable ``.py`` file (InputError otherwise)."""
    if not p.exists():
        shipped_copy = _shipped_example(p)
        if shipped_copy is None:
            raise InputError(f"{p}: spec file not found")
        p = shipped_copy
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give a port spec .py file")
    if p.suffix != ".py":
        raise InputError(f"{p}: a port spec is a Python file ending in .py")
    if not p.is_file():
        raise InputError(f"{p}: not a regular file (a FIFO, a device or a socket); give a port spec .py file")
    try:
        p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read spec file: {exc.strerror}") from exc
    return _import_file(p)


def _select_variant(spec: Spec, variant: str) -> None:
    """Set the spec module's ``VARIANT`` after checking the spec declares it."""
    known = spec.variants
    if variant not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise InputError(f"{spec.name}: unknown variant {variant!r}; this spec declares: {listed}")
    spec.module.VARIANT = variant
    spec.variant = variant


def _guard_imports() -> None:
    """Specs import transformers; keep a broken torchaudio from breaking that."""
    try:
        from porting_kit.adapters.torchaudio_guard import ensure_importable
    except ImportError:  # pragma: no cover
        return
    ensure_importable()


def _validate(spec: Spec) -> None:
    present = [n for n in PARITY_NAMES if spec.has(n)]
    for n in present + [n for n in GENERATOR_NAMES if spec.has(n)]:
        if n == "reference" and spec.reference_is_path:
            continue
        if not callable(spec.get(n)):
            raise InputError(f"{spec.name}: `{n}` must be a function")
    has_generator = any(spec.has(n) for n in GENERATOR_NAMES)
    audio = [n for n in AUDIO_NAMES if spec.has(n)]
    for n in audio:
        if not callable(spec.get(n)):
            raise InputError(f"{spec.name}: `{n}` must be a function")
    has_audio = len(audio) == len(AUDIO_NAMES)
    has_features = all(callable(spec.get(n)) for n in FEATURE_NAMES)
    # the sampling family alone: sampling_params and the port's sampler or logits processor
    has_sampling = spec.has("sampling_params") and any(spec.has(n) for n in SAMPLING_NAMES)
    missing = [n for n in PARITY_NAMES if n not in present]
    if missing and not has_generator and not has_audio and not has_features and not has_sampling:
        if present:
            raise InputError(f"{spec.name}: spec lacks required {', '.join(m + '()' for m in missing)}")
        if audio:
            lacking = [n + "()" for n in AUDIO_NAMES if n not in audio]
            raise InputError(f"{spec.name}: audio spec lacks {', '.join(lacking)}")
        features = [n for n in FEATURE_NAMES if callable(spec.get(n))]
        if features:
            lacking = [n + "(waveform, sample_rate)" for n in FEATURE_NAMES if n not in features]
            raise InputError(f"{spec.name}: features spec lacks {', '.join(lacking)}: define both "
                             f"{' and '.join(n + '()' for n in FEATURE_NAMES)} to compare feature extraction")
        raise InputError(f"{spec.name}: spec defines none of reference()/candidate()/inputs(), "
                         "engine_model()/synthesize_candidate(), the audio names "
                         "codes()/decode_reference()/decode_candidate(), "
                         "reference_features()/candidate_features() nor sampling_params() with "
                         "candidate_sampler()/candidate_logits_processor(); nothing to check")


def list_examples() -> list[tuple[str, str]]:
    """All embedded examples and their variants as ``(name, description)`` rows.

    Returns
    -------
    list of (str, str)
        Per example: ``(name, first line of its module docstring)``, then one
        ``("name:variant", description)`` row per declared variant. Examples whose module
        cannot be imported (a missing optional dependency) are left out.
    """
    rows: list[tuple[str, str]] = []
    for ex_name, mod_path in EMBEDDED.items():
        try:
            module = importlib.import_module(mod_path)
        except ModuleNotFoundError:
            continue
        rows.append((ex_name, (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""))
        for v, desc in (getattr(module, "VARIANTS", {}) or {}).items():
            rows.append((f"{ex_name}:{v}", desc))
    return rows
