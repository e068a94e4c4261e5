"""File writes that never lose a user's file: atomic replace, optional backup."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str, *, backup: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder
    and ``os.replace``, so a crash never leaves a half-written file.

    With ``backup=True`` an existing file is first copied to ``path + '.bak'``.
    Raises ``OSError`` when the folder cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if backup and path.exists():
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
