"""Where the files that ship beside the code live: templates, notebooks, examples, reference audio.

In the repository these folders sit at the top level (``templates/``,
``notebooks/``, ``examples/``, ``reference_audio/``), where the product card puts
them. A wheel carries them as package data under ``porting_kit/_shipped/``
(``setup.py`` copies them there at build time), so a normal ``pip install .``
has them too. :func:`shipped` finds a folder in either place.
"""

from __future__ import annotations

from pathlib import Path

from porting_kit.errors import InputError

#: Top-level folders of the repository that the wheel carries as package data.
SHIPPED_FOLDERS = ("templates", "notebooks", "examples", "reference_audio")

_PACKAGE = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """The folder ``name``: the packaged copy first, then the checkout's.

    Parameters
    ----------
    name : str
        One of :data:`SHIPPED_FOLDERS` (``"templates"``, ``"notebooks"``, ``"examples"``,
        ``"reference_audio"``).

    Returns
    -------
    Path
        ``porting_kit/_shipped/<name>`` in a wheel install, else ``<checkout>/<name>``.

    Raises
    ------
    ValueError
        ``name`` is not a shipped folder (a programming error, not user input).
    InputError
        Neither copy exists (a broken install): exit 2 with the reinstall hint.
    """
    if name not in SHIPPED_FOLDERS:
        raise ValueError(f"not a shipped folder: {name!r}")
    for cand in (_PACKAGE / "_shipped" / name, _PACKAGE.parent / name):
        if cand.is_dir():
            return cand
    raise InputError(f"porting-kit's {name}/ folder is not installed (reinstall porting-kit)")


def data_file(name: str) -> Path:
    """A file of ``porting_kit/data/`` (stored schemas generated from the real frameworks).

    Parameters
    ----------
    name : str
        File name inside ``porting_kit/data/`` (e.g. the vLLM-Omni 0.30.0 deploy schema).

    Returns
    -------
    Path
        The path; its existence is not checked.
    """
    return _PACKAGE / "data" / name
