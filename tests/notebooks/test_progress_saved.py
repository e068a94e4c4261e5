"""The walkthroughs' progress line leaves nothing a saved notebook cannot show again (issue 26, point 2)."""

import pytest

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_check_in_a_kernel_leaves_a_text_summary_and_no_widget(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from porting_kit.notebooks import check\nr = check('tts', only='config,rope')\nprint(r.status)")]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = nb.cells[0].outputs
    assert not any(WIDGET in o.get("data", {}) for o in outs), outs
    assert "widgets" not in nb.metadata
    shown = [o for o in outs if o.output_type == "display_data"]
    assert len(shown) == 1  # the one progress line, updated in place
    text = shown[0]["data"]["text/plain"]
    assert text.startswith("checks of example:tts: 2 families in ") and text.endswith(" s"), text
    assert [o["text"] for o in outs if o.output_type == "stream"] == ["pass\n"]
    assert not any(o.output_type == "error" for o in outs)


def test_progress_outside_a_kernel_is_a_text_bar_removed_when_done(capsys):
    from porting_kit.notebooks import _progress_bar

    bar = _progress_bar(3, "checks of x")
    assert bar.handle is None and bar.bar is not None
    bar.show(1, "rope")
    bar.close("done")
    assert bar.bar.disable or bar.bar.n == 1
