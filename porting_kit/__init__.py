"""porting-kit: find the silent faults in ports of Hugging Face TTS/audio models.

Data flows one way (``docs/architecture.md``)::

    spec -> load -> locate -> probes (facts) -> checks (verdicts, fault codes) -> report

The public API below is what notebooks and users import; modules may move,
these names stay. Heavy dependencies (torch, transformers, librosa) are
imported lazily by the modules that need them, so ``import porting_kit`` and
the lint hooks work without them.
"""

from porting_kit.version import __version__  # noqa: E402

from porting_kit.errors import InputError  # noqa: E402
from porting_kit.report.findings import Finding, Report, Where  # noqa: E402
from porting_kit.runner import FAMILIES, run_check  # noqa: E402
from porting_kit.scaffold import ScaffoldOptions, ScaffoldResult, scaffold  # noqa: E402
from porting_kit.scaffold.validate import validate_static as validate  # noqa: E402
from porting_kit.spec import Spec, list_examples, load_spec  # noqa: E402


def compare_files(reference_path, candidate_path, **kwargs):
    """Compare two audio files; see :func:`porting_kit.audio_files.compare_files` (needs the audio extra)."""
    from porting_kit.audio_files import compare_files as _compare_files

    return _compare_files(reference_path, candidate_path, **kwargs)


def copy_notebooks(dest, *, force: bool = False):
    """Copy the walkthroughs into ``dest``; see :func:`porting_kit.notebooks.copy_notebooks`."""
    from porting_kit.notebooks import copy_notebooks as _copy

    return _copy(dest, force=force)


__all__ = [
    "FAMILIES", "Finding", "InputError", "Report", "ScaffoldOptions", "ScaffoldResult", "Spec", "Where",
    "__version__", "compare_files", "copy_notebooks", "list_examples", "load_spec", "run_check",
    "scaffold", "validate",
]
