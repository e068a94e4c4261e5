"""File writes that never lose a user's file: atomic replace, numbered backups."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from porting_kit.errors import InputError


def backup_path(path: Path) -> Path:
    """The first free backup name for ``path``.

    Tries ``name.bak``, then ``name.bak.1``, ``name.bak.2``... so a second ``--force``
    never overwrites the first backup.

    Parameters
    ----------
    path : Path
        The file about to be replaced (need not exist).

    Returns
    -------
    Path
        A sibling of ``path`` that does not exist yet (nothing is created).
    """
    cand = path.with_name(path.name + ".bak")
    n = 1
    while cand.exists():
        cand = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return cand


def atomic_write(path: Path, write: Callable[[str], None], *, backup: bool = False,
                 suffix: str = ".tmp") -> None:
    """Write ``path`` atomically.

    ``write(tmp_path)`` fills a temporary file in the same folder, then ``os.replace``
    puts it in place, so a crash never leaves a half-written file.

    Parameters
    ----------
    path : Path
        Destination; missing parent folders are created.
    write : callable
        ``write(tmp: str) -> None`` writes the whole content to the path it is given.
    backup : bool, default False
        Copy an existing ``path`` to a fresh :func:`backup_path` first (``--force``).
    suffix : str, default ".tmp"
        Suffix of the temporary file; give the real one (``".wav"``) when the writer
        picks the format from it (soundfile does).

    Raises
    ------
    OSError
        The folder cannot be written (callers turn it into :class:`InputError`).

    Notes
    -----
    A new file gets the usual permissions (``0o666`` less the umask); a replaced one
    keeps its mode. On any exception the temporary file is removed and the exception
    re-raised; ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if backup and path.exists():
        shutil.copy2(path, backup_path(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str, *, backup: bool = False) -> None:
    """:func:`atomic_write` of UTF-8 ``text``.

    Parameters
    ----------
    path : Path
        Destination.
    text : str
        The whole content, written as UTF-8 (no newline translation beyond the platform's).
    backup : bool, default False
        Keep the replaced file as a ``.bak`` (see :func:`backup_path`).

    Raises
    ------
    OSError
        The folder cannot be written.
    """

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    atomic_write(path, write, backup=backup)


def check_output_path(path: Path | None, *, inputs: list[Path | str | None] = (), what: str = "--json") -> None:
    """Refuse, before any work, an output path the tool must not or cannot write.

    Parameters
    ----------
    path : Path or None
        The output file (``--json PATH``, ``--out``...); ``None`` accepts at once.
    inputs : list of (Path or str or None), default ()
        The command's input files; ``None`` entries are skipped. Compared with
        ``os.path.samefile``, so a link or another spelling of an input is caught.
    what : str, default "--json"
        The option's name, used to start the error message.

    Raises
    ------
    InputError
        ``path`` is one of the command's own input files (writing it would destroy
        the user's file), an existing directory, lies under a path that exists
        and is not a directory, or its nearest existing folder is not writable.
    """
    if path is None:
        return
    p = Path(path)
    for inp in inputs:
        if inp is None:
            continue
        try:
            if Path(inp).exists() and p.exists() and os.path.samefile(p, inp):
                raise InputError(f"{what} {p}: is one of this command's inputs; choose another file")
        except OSError:
            pass
    if p.is_dir():
        raise InputError(f"{what} {p}: is a directory; give a file path")
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{what} {p}: cannot write in {parent}")
