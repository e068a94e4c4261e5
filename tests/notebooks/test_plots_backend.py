"""Plots never select a matplotlib backend (a notebook's inline backend must survive them)."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")


def test_saving_a_plot_file_leaves_the_backend_and_pyplot_alone(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from porting_kit.probes.waveform import analyse_waveforms
    from porting_kit.report.plots import save_audio_comparison

    def refuse(*args, **kwargs):
        raise AssertionError("porting-kit must not call matplotlib.use")

    monkeypatch.setattr(matplotlib, "use", refuse)
    monkeypatch.setattr(plt, "switch_backend", refuse)
    t = np.arange(48) / 8000.0
    wave = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    before = plt.get_fignums()
    save_audio_comparison(analyse_waveforms(wave, wave, 8000, 8000), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == before   # nothing left open in pyplot
