"""An ``argparse`` parser whose usage errors are one line (DESIGN.md: exit 2, one clear line)."""

from __future__ import annotations

import argparse

from porting_kit.errors import InputError


class OneLineParser(argparse.ArgumentParser):
    """``ArgumentParser`` that raises :class:`InputError` (``prog: message; see --help``)
    instead of printing its usage block and exiting; callers turn it into exit 2."""

    def error(self, message: str):  # type: ignore[override]
        raise InputError(f"{self.prog}: {message} (see {self.prog} --help)")
