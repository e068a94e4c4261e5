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
from porting_kit.scaffold.validate import validate  # noqa: E402
from porting_kit.spec import Spec, list_examples, load_spec  # noqa: E402


def compare_files(reference_path, candidate_path, **kwargs):
    """Compare two audio files; see :func:`porting_kit.audio_files.compare_files` (needs the audio extra).

    Parameters
    ----------
    reference_path, candidate_path : str or os.PathLike
        The reference and candidate audio files (any format ``soundfile`` reads).
    **kwargs
        Passed on unchanged to :func:`porting_kit.audio_files.compare_files`.

    Returns
    -------
    Report
        Its findings, as :func:`porting_kit.audio_files.compare_files` returns them.

    Raises
    ------
    InputError
        When a file cannot be read or the two cannot be compared.
    """
    from porting_kit.audio_files import compare_files as _compare_files

    return _compare_files(reference_path, candidate_path, **kwargs)


def compare_quality(reference_dir, candidate_dir, **kwargs):
    """End-to-end quality of two take folders; see :func:`porting_kit.quality_files.compare_quality`.

    Parameters
    ----------
    reference_dir, candidate_dir : str or os.PathLike
        ``<prompt_id>/take<k>.wav`` folders with ``prompts.json`` (the candidate's optional).
    **kwargs
        Passed on unchanged (``metrics``, ``chunk_samples``, ``asr``, ``speaker``).

    Returns
    -------
    Report
        Command ``quality``: ``quality.*`` findings and the metric table (``report.quality``).

    Raises
    ------
    InputError
        A folder, sidecar or clip the tool cannot use.
    """
    from porting_kit.quality_files import compare_quality as _compare

    return _compare(reference_dir, candidate_dir, **kwargs)


def copy_notebooks(dest, *, force: bool = False):
    """Copy the walkthroughs into ``dest``; see :func:`porting_kit.notebooks.copy_notebooks`.

    Parameters
    ----------
    dest : str or os.PathLike
        Target directory (absent, or an existing directory).
    force : bool, default False
        Overwrite files that differ, keeping a ``.bak`` of each.

    Returns
    -------
    CopyResult
        What :func:`porting_kit.notebooks.copy_notebooks` returns.

    Raises
    ------
    InputError
        ``dest`` is not a directory, or a file there differs and ``force`` is False
        (nothing is written).
    """
    from porting_kit.notebooks import copy_notebooks as _copy

    return _copy(dest, force=force)


__all__ = [
    "FAMILIES", "Finding", "InputError", "Report", "ScaffoldOptions", "ScaffoldResult", "Spec", "Where",
    "__version__", "compare_files", "compare_quality", "copy_notebooks", "list_examples", "load_spec", "run_check",
    "scaffold", "validate",
]
