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
    """The folder ``name`` (one of :data:`SHIPPED_FOLDERS`): the packaged copy first, then the checkout's.

    Raises
    ------
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
    """A file of ``porting_kit/data/`` (stored schemas generated from the real frameworks)."""
    return _PACKAGE / "data" / name


def is_inside_package(path: str | Path) -> bool:
    """True when ``path`` lies inside the installed package (where no command may write)."""
    try:
        Path(path).resolve().relative_to(_PACKAGE)
    except ValueError:
        return False
    return True
