"""Keep a broken torchaudio from breaking ``import transformers``.

PyPI's ``torchaudio`` wheels are CUDA builds. Installed next to a CPU torch
(``torch==2.13.0+cpu`` here; ``encodec`` pulls torchaudio in), ``import
torchaudio`` raises ``OSError: Could not load this library ... _torchaudio.so``,
and ``transformers.audio_utils`` imports torchaudio whenever it is installed —
so every transformers model import fails (REAL_PAIRS.md, "Trap common to
several"). porting-kit never needs torchaudio itself. :func:`ensure_importable`
tries the real import once; when its native library cannot load, it puts a
named stub module (with a ``__spec__``, which ``importlib.util.find_spec`` and
so transformers' availability check need) in ``sys.modules``. Code that then
really calls torchaudio gets a clear ``AttributeError`` naming the stub.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

_STATE = {"checked": False, "stubbed": False}


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"torchaudio could not load its native library on this machine "
                             f"(a CUDA build next to a CPU torch); porting-kit replaced it with a stub, "
                             f"so torchaudio.{name} is unavailable")


def ensure_importable() -> bool:
    """Make ``import torchaudio`` safe.

    Idempotent and cheap after the first call. Never raises.

    Returns
    -------
    bool
        True when the stub was installed (on this call or an earlier one); False when
        torchaudio imports, is not installed, or was already imported before the first call.
    """
    if _STATE["checked"]:
        return _STATE["stubbed"]
    _STATE["checked"] = True
    if "torchaudio" in sys.modules:
        return False
    try:
        import torchaudio  # noqa: F401
        return False
    except ImportError:
        return False  # not installed: transformers will not import it either
    except OSError:
        pass
    for name in [m for m in sys.modules if m == "torchaudio" or m.startswith("torchaudio.")]:
        del sys.modules[name]
    for sub in ("", ".functional", ".transforms", "._extension"):
        mod = _Stub("torchaudio" + sub)
        mod.__spec__ = importlib.machinery.ModuleSpec("torchaudio" + sub, None)
        mod.__version__ = "0.0.0+porting-kit-stub"
        mod.__path__ = []  # a package, so `import torchaudio.functional` resolves
        sys.modules["torchaudio" + sub] = mod
    sys.modules["torchaudio"].functional = sys.modules["torchaudio.functional"]
    sys.modules["torchaudio"].transforms = sys.modules["torchaudio.transforms"]
    _STATE["stubbed"] = True
    return True
