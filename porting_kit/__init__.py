"""porting-kit: find the silent faults in ports of Hugging Face TTS/audio models.

The library is organised as one data flow (DESIGN.md):
spec -> load weights -> capture -> align -> compare -> diagnose -> report.

Heavy dependencies (torch, transformers, librosa) are imported lazily by the
modules that need them, so ``import porting_kit`` and the lint hooks work
without them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
