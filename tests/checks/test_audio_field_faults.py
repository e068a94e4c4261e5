"""Audio field faults (issue 17, points 3 and 4) on the audio-only toy codec spec.

Each planted variant of ``tests/specs/toy_codec.py`` must give its exact code, with both
lengths in the evidence; the clean mono and clean stereo specs must pass.
"""

from pathlib import Path

import pytest

from porting_kit.runner import run_check

TOY = str(Path(__file__).resolve().parents[1] / "specs" / "toy_codec.py")
ONLY = "hop,channel,dtype"
EXPECTED = {
    "delay_tail": "hop.delay_pattern_tail",
    "codebook_offset": "hop.codebook_offset",
    "stereo_as_mono": "channel.wrong_downmix",
    "stereo_mixed_wrong_axis": "channel.axis_mismatch",
    "stereo_transposed": "channel.axis_mismatch",
}


def _run(variant=None):
    return run_check(TOY, variant=variant, only=ONLY)


@pytest.mark.parametrize("variant", [None, "stereo"])
def test_clean_mono_and_clean_stereo_pass(variant):
    rep = _run(variant)
    assert rep.codes() == ["hop.ok", "channel.ok", "dtype.ok"]
    ev = rep.by_code("channel.ok")[0].evidence
    assert ev["candidate_channels"] == (2 if variant else 1)


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_planted_field_fault_gives_its_code(variant):
    rep = _run(variant)
    assert rep.codes("fail") == [EXPECTED[variant]]
    for f in rep.findings:  # every audio finding carries both lengths
        assert {"reference_samples", "candidate_samples"} <= set(f.evidence), f.code


def test_delay_tail_evidence():
    f = _run("delay_tail").by_code("hop.delay_pattern_tail")[0]
    ev = f.evidence
    assert (ev["extra_frames"], ev["pad"], ev["num_codebooks"]) == (3, "code 0", 4)
    assert (ev["reference_samples"], ev["candidate_samples"]) == (2560, 2752)
    assert "2752 vs 2560" in f.message


def test_codebook_offset_evidence_and_message_names_the_lengths():
    f = _run("codebook_offset").by_code("hop.codebook_offset")[0]
    ev = f.evidence
    assert (ev["rows"], ev["shift_frames"], ev["frames_used"]) == ("2, 3", 1, 39)
    assert (ev["reference_samples"], ev["candidate_samples"]) == (2560, 2496)
    assert "2496 vs 2560 samples" in f.message and "right length" not in f.message


def test_stereo_served_as_mono_names_the_mean():
    ev = _run("stereo_as_mono").by_code("channel.wrong_downmix")[0].evidence
    assert (ev["served_channels"], ev["reference_channels"], ev["mono_matches"]) == (2, 2, "mean")


def test_axis_mismatch_names_the_layout():
    assert _run("stereo_transposed").by_code("channel.axis_mismatch")[0].evidence["layout"] == "transposed"
    assert _run("stereo_mixed_wrong_axis").by_code(
        "channel.axis_mismatch")[0].evidence["layout"] == "reshaped"


def test_stereo_candidate_without_served_channels_keeps_the_mono_contract(tmp_path):
    src = Path(TOY).read_text().replace("def served_channels() -> int:", "def _unused() -> int:")
    spec = tmp_path / "toy_mono_contract.py"
    spec.write_text(src)
    rep = run_check(str(spec), variant="stereo", only="channel")
    assert rep.codes("fail") == ["channel.shape_contract"]


def test_served_channels_must_be_a_positive_int(tmp_path):
    from porting_kit.errors import InputError

    spec = tmp_path / "toy_bad_channels.py"
    spec.write_text(Path(TOY).read_text() + "\nserved_channels = 0\n")
    with pytest.raises(InputError, match="served_channels must be a positive int"):
        run_check(str(spec), only="channel")
