"""Plots for the notebooks and ``--plot`` options (matplotlib, imported lazily).

Each function takes plain data (a report, arrays) and returns the matplotlib
``Figure``; nothing here computes a check. Nothing here selects a matplotlib
backend: figures drawn for display go through ``pyplot`` (so JupyterLab's inline
backend shows them), figures only written to a file are built with
``matplotlib.figure.Figure`` (no backend involved, nothing left open).
"""

from __future__ import annotations

from typing import Any


def plot_error_per_module(report, *, ax=None, title: str | None = None):
    """Estimated relative error ``||a-b||/||b||`` of every compared module pair, in
    reference call-completion order (log scale), first divergence marked.

    Parameters
    ----------
    report : Report
        From :func:`porting_kit.runner.run_check` with the parity family run
        (uses ``report.extras["alignment"]``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    rows = [r for r in report.extras.get("alignment", []) if r["rel_err"] is not None]
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 3.5))
    else:
        fig = ax.figure
    xs = list(range(len(rows)))
    ys = [max(r["rel_err"], 1e-12) for r in rows]
    colors = ["tab:red" if r["status"] == "differs" else "tab:green" for r in rows]
    ax.scatter(xs, ys, c=colors, s=14)
    ax.plot(xs, ys, lw=0.5, color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("aligned module (reference completion order)")
    ax.set_ylabel("||cand - ref|| / ||ref||")
    fd = report.first_divergence
    first = next((x for x, r in zip(xs, rows) if r["status"] == "differs"), None)
    if fd and first is not None:
        ax.axvline(first, color="tab:red", ls="--", lw=1)
        ax.text(first, 0.5, f"  first output to differ: {rows[first]['reference']}\n"
                            f"  fault located in: {fd['reference_module']}",
                transform=ax.get_xaxis_transform(), fontsize=8, va="center")
    ax.set_title(title or "layer parity: error per module")
    fig.tight_layout()
    return fig


def plot_error_per_layer(report, *, ax=None, title: str | None = None):
    """Estimated relative error of each decoder layer's output (modules whose name ends in a
    layer index, e.g. ``model.layers.3``), in layer order.

    Parameters
    ----------
    report : Report
        A parity report; its ``extras["alignment"]`` rows are plotted.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when None.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import re

    import matplotlib.pyplot as plt

    rows = [r for r in report.extras.get("alignment", [])
            if r["rel_err"] is not None and re.search(r"\.\d+$", r["reference"])]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3))
    else:
        fig = ax.figure
    labels = [r["reference"] for r in rows]
    ax.bar(range(len(rows)), [max(r["rel_err"], 1e-12) for r in rows],
           color=["tab:red" if r["status"] == "differs" else "tab:green" for r in rows])
    ax.set_yscale("log")
    if rows:
        ax.set_ylim(bottom=min(max(r["rel_err"], 1e-12) for r in rows) / 10)
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("||cand - ref|| / ||ref||")
    ax.set_title(title or "error per layer")
    fig.tight_layout()
    return fig


def plot_error_per_layer_grid(reports: dict[str, Any], *, title: str | None = None):
    """Per-layer error of several reports side by side, one axis (own log scale) per report.

    Errors of a clean pair (~1e-7) and of a fault (~1) differ by orders of magnitude; a shared
    y-axis hides one of them, so each report gets its own axis and each bar its value.

    Parameters
    ----------
    reports : dict[str, Report]
        Label -> parity report (``extras["alignment"]``), drawn left to right.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    n = max(len(reports), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.4), squeeze=False)
    for ax, (label, rep) in zip(axes[0], reports.items()):
        plot_error_per_layer(rep, ax=ax, title=label)
        heights = [patch.get_height() for patch in ax.patches]
        for patch, h in zip(ax.patches, heights):
            ax.annotate("0 (exact)" if h <= 1e-12 else format(h, ".1e"),
                        (patch.get_x() + patch.get_width() / 2, h),
                        ha="center", va="bottom", fontsize=7)
        if heights:
            ax.set_ylim(top=max(heights) * 5)  # room for the labels on the log axis
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def alignment_markdown(rows: list[dict[str, Any]], limit: int = 60) -> str:
    """The aligned-module table as Markdown (for ``IPython.display.Markdown``).

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`porting_kit.probes.layers.alignment_table` (``order``, ``reference``,
        ``reference_type``, ``candidate``, ``candidate_type``, ``source``, ``rel_err``, ``status``).
    limit : int, default 60
        Rows shown before ``"... N more rows"``.

    Returns
    -------
    str

    Notes
    -----
    In a notebook, ``report.extras["alignment"]`` is shown as an HTML table with the first
    divergence highlighted by displaying the report itself (:mod:`porting_kit.report.html`).
    """
    head = "| # | reference | candidate | aligned by | est. rel. error | status |\n|---|---|---|---|---|---|\n"
    body = "".join(
        f"| {r['order']} | `{r['reference']}` ({r['reference_type']}) | `{r['candidate']}` "
        f"({r['candidate_type']}) | {r['source']} | "
        f"{'' if r['rel_err'] is None else format(r['rel_err'], '.2e')} | {r['status']} |\n"
        for r in rows[:limit])
    more = f"\n... {len(rows) - limit} more rows\n" if len(rows) > limit else ""
    return head + body + more


# --------------------------------------------------------------------------- audio (issue 4)


def plot_waveforms(reference, candidate, sample_rate: int, *, ax=None, title: str | None = None,
                   labels: tuple[str, str] = ("reference", "candidate")):
    """Two waveforms overlaid against time in seconds (mono mixdown of each).

    Parameters
    ----------
    reference, candidate : np.ndarray [shape=(samples,) or (channels, samples)]
    sample_rate : int
        Hz, used for the time axis of both.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from porting_kit.probes.waveform import as_channels_first

    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 3))
    else:
        fig = ax.figure
    for y, lab, kw in ((reference, labels[0], dict(lw=1.2, alpha=0.8)),
                       (candidate, labels[1], dict(lw=0.8, alpha=0.8, ls="--"))):
        if y is None:
            continue
        m = as_channels_first(y).mean(axis=0)
        ax.plot(np.arange(m.size) / sample_rate, m, label=lab, **kw)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("amplitude")
    ax.legend(loc="upper right")
    ax.set_title(title or "waveforms")
    fig.tight_layout()
    return fig


def plot_spectrogram_difference(reference, candidate, sample_rate: int, *, axes=None,
                                title: str | None = None, n_fft: int = 1024):
    """Log-magnitude spectrograms (dB) of both signals and their difference.

    ``librosa.stft`` (hop ``n_fft/4``) of each mono mixdown over the common
    length; the third panel is ``dB(candidate) - dB(reference)``.

    Parameters
    ----------
    reference, candidate : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
        The two waveforms.
    sample_rate : int
        Hz, for the axes.
    axes : sequence of three matplotlib.axes.Axes, optional
        Where to draw; a new figure when None.
    title : str, optional
        Figure title.
    n_fft : int, default 1024
        STFT size in samples.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import librosa
    import librosa.display
    import matplotlib.pyplot as plt
    import numpy as np

    from porting_kit.probes.waveform import as_channels_first

    r = as_channels_first(reference).mean(axis=0)
    c = as_channels_first(candidate).mean(axis=0)
    n = min(r.size, c.size)
    n_fft = min(n_fft, 1 << max(int(np.log2(max(n, 2))), 1))
    hop = max(n_fft // 4, 1)
    db = [librosa.amplitude_to_db(np.abs(librosa.stft(x[:n], n_fft=n_fft, hop_length=hop)),
                                  ref=1.0, amin=1e-6) for x in (r, c)]
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.2), sharey=True)
    else:
        fig = axes[0].figure
    for ax, img, t in zip(axes, (db[0], db[1], db[1] - db[0]),
                          ("reference (dB)", "candidate (dB)", "candidate - reference (dB)")):
        kw = dict(cmap="coolwarm", vmin=-40, vmax=40) if t.startswith("candidate -") else {}
        m = librosa.display.specshow(img, sr=sample_rate, hop_length=hop, x_axis="time",
                                     y_axis="hz", ax=ax, **kw)
        fig.colorbar(m, ax=ax)
        ax.set_title(t)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_audio_comparison(comparison, path) -> None:
    """Write the waveform overlay and spectrogram difference of an
    :class:`~porting_kit.probes.waveform.WaveformComparison` to one PNG at ``path``.

    Parameters
    ----------
    comparison : WaveformComparison
        Its ``reference``, ``candidate`` and ``sample_rate`` (Hz) are drawn; the
        spectrogram panels only when both signals have at least 64 samples.
    path : str or pathlib.Path
        The PNG written.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 6.5))
    top = fig.add_subplot(2, 1, 1)
    ref, cand = comparison.reference, comparison.candidate
    plot_waveforms(ref, cand, comparison.sample_rate, ax=top, title="waveforms")
    if cand is not None and ref is not None and min(ref.shape[-1], cand.shape[-1]) >= 64:
        axes = [fig.add_subplot(2, 3, 4 + i) for i in range(3)]
        plot_spectrogram_difference(ref, cand, comparison.sample_rate, axes=axes)
    fig.tight_layout()
    fig.savefig(str(path), dpi=90)


# --------------------------------------------------------------------------- rng / lifecycle (issue 5)


def plot_request_audio(waveforms: dict[str, Any], sample_rate: int, *,
                       spans: dict[str, tuple[int, int, str]] | None = None,
                       title: str | None = None):
    """One row per request: waveform against time (s) and its spectrogram.

    Parameters
    ----------
    waveforms : dict
        label -> mono waveform [shape=(samples,)] (tensor or array), e.g.
        ``{"A alone": ..., "B alone": ..., "B served": ...}``.
    sample_rate : int
        Hz, for the time axes.
    spans : dict, optional
        label -> ``(start, end, text)`` in samples: a region of that row to shade
        and annotate (e.g. where B's served audio equals A's tail).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt
    import numpy as np

    spans = spans or {}
    n = len(waveforms)
    fig, axes = plt.subplots(n, 2, figsize=(13, 2.2 * n), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]})
    t_max = max((np.asarray(w).reshape(-1).size for w in waveforms.values()), default=1) / sample_rate
    for (label, w), (ax_w, ax_s) in zip(waveforms.items(), axes):
        y = np.asarray(w, dtype=np.float32).reshape(-1)
        ax_w.plot(np.arange(y.size) / sample_rate, y, lw=0.6)
        ax_w.set_xlim(0, t_max)
        ax_w.set_ylabel(label, rotation=0, ha="right", va="center")
        if label in spans:
            a, b, text = spans[label]
            ax_w.axvspan(a / sample_rate, b / sample_rate, color="tab:red", alpha=0.15)
            ax_w.text(a / sample_rate, ax_w.get_ylim()[1] * 0.8, " " + text, color="tab:red",
                      fontsize=9, va="top")
        if y.size >= 256:
            with np.errstate(divide="ignore"):  # silent stretches: log10(0) is drawn as -inf
                ax_s.specgram(y, NFFT=256, Fs=sample_rate, noverlap=192, cmap="magma")
            ax_s.set_xlim(0, t_max)
            ax_s.set_ylim(0, 2000)
        ax_s.set_ylabel("Hz")
    axes[-1][0].set_xlabel("time (s)")
    axes[-1][1].set_xlabel("time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_rope_error_vs_position(reports: dict[str, Any], *, ax=None, title: str | None = None):
    """RoPE angle error against position, one line per report (the rope family's measurement).

    Parameters
    ----------
    reports : dict[str, Report]
        Label -> report from :func:`porting_kit.runner.run_check` with the rope
        family run; uses ``report.extras["rope_error_vs_position"]`` (pairs of
        position and the largest angle error in radians over rotary pairs, for
        layer 0's q). Reports without it (e.g. a layout mismatch, where no
        angle table applies) are skipped.

    Returns
    -------
    matplotlib.figure.Figure
        Log-scale y; errors below 1e-9 rad are drawn at 1e-9.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.2))
    else:
        fig = ax.figure
    for label, rep in reports.items():
        series = rep.extras.get("rope_error_vs_position")
        if not series:
            continue
        ax.plot([p for p, _ in series], [max(e, 1e-9) for _, e in series], lw=1.2, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel("max |angle error| (rad)")
    ax.set_title(title or "RoPE: candidate rotation angle vs reference, by position")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- any report (notebooks)

#: Status colours shared by the plots (the HTML tables use paler ones).
STATUS_COLORS = {"pass": "tab:green", "fail": "tab:red", "warn": "tab:orange", "skip": "tab:gray"}


def plot_findings_by_check(report, *, ax=None, title: str | None = None):
    """How many findings of each status every check family (or validate tier) gave.

    Parameters
    ----------
    report : Report
        Any report; its findings are grouped by ``check`` (the code prefix: a check family, or
        a validate tier's family such as ``scaffold``, ``consistency``, ``run``, ``gpu``).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when None.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
        One horizontal stacked bar per family, in report order, segments coloured by status.
    """
    import matplotlib.pyplot as plt

    checks = list(dict.fromkeys(f.check for f in report.findings))
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(checks), 2) + 1.2))
    else:
        fig = ax.figure
    left = [0] * len(checks)
    for status, colour in STATUS_COLORS.items():
        counts = [sum(f.check == c and f.status == status for f in report.findings) for c in checks]
        ax.barh(range(len(checks)), counts, left=left, color=colour, label=status)
        left = [a + b for a, b in zip(left, counts)]
    ax.set_yticks(range(len(checks)), checks)
    ax.invert_yaxis()
    ax.set_xlabel("findings")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title or f"porting-kit {report.command}: {report.status.upper()}")
    fig.tight_layout()
    return fig


def plot_audio_report(report, *, title: str | None = None):
    """The audio pair an audio check compared: waveforms overlaid and the spectrogram difference.

    Parameters
    ----------
    report : Report
        A report with the ``hop`` / ``channel`` / ``dtype`` families run; draws
        ``report.extras["audio_pair"]`` (the reference codec's decode and the candidate's served
        waveform, Hz each). Without one (the spec defines no decode functions), the figure says so.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
        Top: waveforms against time (s); bottom: reference dB, candidate dB and their difference
        (when both have at least 64 samples).
    """
    import matplotlib.pyplot as plt

    pair = report.extras.get("audio_pair")
    if pair is None:
        fig, ax = plt.subplots(figsize=(8, 1.2))
        ax.axis("off")
        ax.text(0, 0.5, "no audio pair: the spec defines no codes / decode functions, "
                        "or the audio families did not run", va="center")
        return fig
    ref, cand = pair.reference, pair.candidate
    fig = plt.figure(figsize=(14, 6.5))
    plot_waveforms(ref, cand, pair.sr_reference, ax=fig.add_subplot(2, 1, 1),
                   title=title or "reference vs served waveform")
    if cand is not None and ref is not None and min(ref.shape[-1], cand.shape[-1]) >= 64:
        axes = [fig.add_subplot(2, 3, 4 + i) for i in range(3)]
        plot_spectrogram_difference(ref, cand, pair.sr_reference, axes=axes)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- decode (issue 14)


def plot_decode_error_per_step(report, *, ax=None, title: str | None = None):
    """Logit error ``||a-b||/||b||`` of each teacher-forced decode step (step 0: the prefill).

    Parameters
    ----------
    report : Report
        With the decode family run (``report.extras["decode"]``: ``steps``, ``rel_err``).

    Returns
    -------
    matplotlib.figure.Figure
        Log-scale y; errors below 1e-12 drawn at 1e-12.
    """
    import matplotlib.pyplot as plt

    d = report.extras.get("decode", {})
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3))
    else:
        fig = ax.figure
    steps, errs = d.get("steps", []), [max(e, 1e-12) for e in d.get("rel_err", [])]
    ax.plot(steps, errs, marker="o", ms=3, lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("decode step (0 = prefill)")
    ax.set_ylabel("logits ||cand - ref|| / ||ref||")
    ax.set_title(title or "decode parity: error per step")
    fig.tight_layout()
    return fig


def plot_decode_step_by_layer(report, *, ax=None, title: str | None = None):
    """The (step x layer) picture: each decoder layer's estimated output error at each step.

    Parameters
    ----------
    report : Report
        With the decode family run (``extras["decode"]``: ``layers``, ``layer_rel_err``).

    Returns
    -------
    matplotlib.figure.Figure
        A heat map of ``log10(||a-b||/||b||)`` (floor 1e-12), steps down, layers across.
    """
    import math

    import matplotlib.pyplot as plt

    d = report.extras.get("decode", {})
    grid = [[math.log10(max(e, 1e-12)) if e == e else float("nan") for e in row]
            for row in d.get("layer_rel_err", [])]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4))
    else:
        fig = ax.figure
    if grid and grid[0]:
        im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, label="log10 ||cand - ref|| / ||ref||")
        layers = d.get("layers", [])
        ax.set_xticks(range(len(layers)), layers, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("decode step (0 = prefill)")
    ax.set_title(title or "decode parity: step x layer")
    fig.tight_layout()
    return fig


def save_check_plots(report, directory) -> list:
    """Write the ``check --plot DIR`` figures that the report has data for.

    Parameters
    ----------
    report : Report
        From :func:`porting_kit.runner.run_check`.
    directory : str or Path
        Created when absent (the CLI refuses a path that is not a directory first).

    Returns
    -------
    list of Path
        Written PNG files, of: ``error_per_layer.png`` and ``error_per_module.png`` (parity),
        ``decode_error_per_step.png`` and ``decode_step_by_layer.png`` (decode),
        ``rope_error_vs_position.png`` (rope).
    """
    from pathlib import Path

    from matplotlib.figure import Figure

    from porting_kit.fsutil import atomic_write

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    if len(report.extras.get("alignment") or []) > 0:
        jobs += [("error_per_layer.png", plot_error_per_layer), ("error_per_module.png", plot_error_per_module)]
    if report.extras.get("decode") is not None:
        jobs += [("decode_error_per_step.png", plot_decode_error_per_step),
                 ("decode_step_by_layer.png", plot_decode_step_by_layer)]
    if len(report.extras.get("rope_error_vs_position") or []) > 0:
        jobs.append(("rope_error_vs_position.png",
                     lambda rep, ax: plot_rope_error_vs_position({"candidate": rep}, ax=ax)))
    written = []
    for name, fn in jobs:
        # a Figure of its own (never pyplot): the user's matplotlib backend is left as it was
        fig = Figure(figsize=(8, 4))
        fn(report, ax=fig.subplots())
        fig.tight_layout()
        # atomic: a link or FIFO at the path is refused (InputError), never written through
        atomic_write(out / name, lambda tmp, fig=fig: fig.savefig(tmp, dpi=100, format="png"), suffix=".png")
        written.append(out / name)
    return written


def plot_quality_seams(measurement, prompt_id: str | None = None, *, take: int = 0, axes=None,
                       title: str | None = None):
    """The candidate's first difference around its chunk seams, against the reference's take.

    Parameters
    ----------
    measurement : QualityMeasurement
        From :func:`porting_kit.probes.quality.measure_quality` (``report.extras["quality"]``).
    prompt_id : str, optional
        Default: the seam metric's worst prompt (else the first prompt).
    take : int
        Which take of each side.

    Returns
    -------
    matplotlib.figure.Figure
        Top: ``abs(diff)`` of the reference's and the candidate's take against time (s), over each
        side's 99th percentile, with the candidate's seams as vertical lines. Bottom: the candidate
        value per prompt against the reference's spread (the seam metric), when it ran.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    seam = measurement.metrics.get("seam")
    ran = seam is not None and not seam.skipped
    pid = prompt_id or (seam.worst_prompt if ran else None) or next(iter(measurement.reference.prompts))
    sr = measurement.reference.sample_rate
    cand_sr = measurement.candidate.sample_rate
    if axes is None:
        fig, axes = plt.subplots(2 if ran else 1, 1, figsize=(10, 5 if ran else 3), squeeze=False)
        axes = axes[:, 0]
    fig = axes[0].figure
    ax = axes[0]
    for y, rate, label, kw in ((measurement.reference.takes[pid][take], sr, "reference", dict(lw=0.8)),
                               (measurement.candidate.takes[pid][take], cand_sr, "candidate",
                                dict(lw=0.8, alpha=0.8))):
        d = np.abs(np.diff(y, prepend=y[0]))
        ax.plot(np.arange(d.size) / rate, d / (np.percentile(d, 99) + 1e-9), label=label, **kw)
    chunk = measurement.candidate.chunk_samples
    if chunk:
        for b in range(chunk, len(measurement.candidate.takes[pid][take]), chunk):
            ax.axvline(b / cand_sr, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("|diff| / p99")
    ax.set_title(title or f"seams of prompt {pid}, take {take} (dotted: the candidate's chunk boundaries)")
    ax.legend(loc="upper right")
    if ran:
        ax2 = axes[1]
        ids = list(seam.per_prompt)
        x = np.arange(len(ids))
        ax2.bar(x - 0.2, [seam.per_prompt[k]["reference_spread"] for k in ids], 0.4, label="reference spread")
        ax2.bar(x + 0.2, [seam.per_prompt[k]["candidate"] for k in ids], 0.4, label="candidate")
        ax2.set_xticks(x, ids)
        ax2.set_ylabel("seam jump / p99 |diff|")
        ax2.legend(loc="upper right")
    fig.tight_layout()
    return fig
