"""The engine-contract driver calls a model the way vLLM-Omni 0.30.0's AR runner does."""

import json
import tempfile

import pytest
import torch
from typer.testing import CliRunner

from porting_kit.adapters.vllm_omni.engine import (
    EngineDriver,
    EngineError,
    EngineRequest,
    run_requests,
)
from porting_kit.embedded.generator_model import EOS_TOKEN_ID, build_model


class Recorder:
    """A minimal generator-style model that records every engine call.

    Request ``r`` with text of ``w`` words yields ``w`` chunks of 4 samples whose
    value is the chunk index."""

    have_multimodal_outputs = True

    def __init__(self, hidden_rows_ok=True):
        self.log = []
        self.infos_seen = {}
        self.left = {}
        self.flags = []

    def forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None,
                runtime_additional_information=None, **kw):
        infos = runtime_additional_information
        self.log.append(("forward", [i.get("global_request_id") for i in infos],
                         input_ids.tolist(), positions.tolist(),
                         [i.get("generated_len") for i in infos]))
        outs, flags = [], []
        for info in infos:
            if info.get("_is_dummy"):
                outs.append(torch.zeros(0))
                flags.append(True)
                continue
            rid = info["global_request_id"][0]
            self.infos_seen.setdefault(rid, []).append(id(info))
            if rid not in self.left:
                self.left[rid] = len(info["text"][0].split())
            k = self.left[rid]
            self.left[rid] -= 1
            outs.append(torch.full((4,), float(k)))
            flags.append(self.left[rid] == 0)
        if not infos:
            flags = [True]
        self.flags = flags
        from porting_kit.embedded.generator_model import OmniOutput

        return OmniOutput(torch.zeros(input_ids.shape[0], 2), {"model_outputs": outs})

    def compute_logits(self, hidden, sampling_metadata=None):
        self.log.append(("compute_logits", hidden.shape[0]))
        logits = torch.zeros(hidden.shape[0], 4)
        for r in range(hidden.shape[0]):
            logits[r, EOS_TOKEN_ID if (self.flags[r] if r < len(self.flags) else True) else 1] = 1
        return logits

    def on_requests_finished(self, ids):
        self.log.append(("on_requests_finished", sorted(ids)))

    def get_dummy_runtime_additional_information(self, n):
        return [{"text": "hello", "_is_dummy": True}] * n


def test_call_sequence_matches_the_ar_runner():
    m = Recorder()
    with EngineDriver(m) as drv:
        drv.add_request(EngineRequest("a", "one two", seed=5, extra={"audio_temperature": 0.7}))
        drv.add_request(EngineRequest("b", "x y z", seed=6))
        drv.run()
    kinds = [e[0] for e in m.log]
    # forward then compute_logits each step; finished ids delivered at the start of the next step
    assert kinds == ["forward", "compute_logits", "forward", "compute_logits",
                     "on_requests_finished", "forward", "compute_logits", "on_requests_finished"]
    assert m.log[0][1] == [["a"], ["b"]]  # global_request_id arrives as a one-element list
    assert m.log[0][2] == [1, 1] and m.log[0][3] == [0, 0]  # prompt token 1, position 0
    assert m.log[0][4] == [0, 0] and m.log[2][4] == [1, 1]  # generated_len refreshed
    assert m.log[4] == ("on_requests_finished", ["a"])
    assert m.log[7] == ("on_requests_finished", ["b"])
    # the same info dict object every step (model_intermediate_buffer)
    assert len(set(m.infos_seen["b"])) == 1
    assert [c.tolist()[0] for c in drv.results["a"].chunks] == [2.0, 1.0]
    assert drv.results["a"].finished_by == "eos" and drv.results["b"].steps == 3


def test_info_dict_carries_text_seed_and_sampling_keys_as_lists():
    captured = {}

    class M(Recorder):
        def forward(self, **kw):
            captured.update(kw["runtime_additional_information"][0])
            assert kw["model_intermediate_buffer"] is kw["runtime_additional_information"]
            return super().forward(**kw)

    run_requests(M(), [EngineRequest("r1", "hi", seed=3, extra={"audio_top_k": 9})])
    assert captured["text"] == ["hi"] and captured["seed"] == [3]
    assert captured["audio_top_k"] == [9] and captured["global_request_id"] == ["r1"]


def test_shuffle_permutes_rows_and_join_mid_stream():
    m = Recorder()
    reqs = [EngineRequest(f"r{i}", " ".join(["w"] * 6), seed=i, arrival_step=a)
            for i, a in enumerate([0, 0, 2, 3])]
    res, calls = run_requests(m, reqs, order="shuffle")
    orders = [c.req_ids for c in calls]
    assert orders[0] in (["r0", "r1"], ["r1", "r0"]) and len(orders[2]) == 3 and len(orders[3]) == 4
    assert len({tuple(o) for o in orders if len(o) == 4}) > 1  # rows move between steps
    assert all(r.finished_by == "eos" and len(r.chunks) == 6 for r in res.values())


def test_abort_is_delivered_through_on_requests_finished_next_step():
    m = Recorder()
    with EngineDriver(m) as drv:
        for rid in ("a", "b", "c"):
            drv.add_request(EngineRequest(rid, "w w w w w", seed=1))
        drv.step()
        drv.abort("b")
        call = drv.step()
    assert call.finished_notified == ["b"] and call.req_ids == ["a", "c"]
    assert ("on_requests_finished", ["b"]) in m.log
    assert drv.results["b"].finished_by == "abort"


def test_dummy_run_profile_then_flagged_rows():
    m = Recorder()
    with EngineDriver(m) as drv:
        calls = drv.dummy_run(num_reqs=3)
    assert [c.kind for c in calls] == ["profile", "dummy"]
    assert m.log[0][1] == [] and m.log[2][1] == [None, None, None]  # [] then 3 _is_dummy rows
    assert all(all(c.eos) for c in calls) and calls[1].logits_rows == 3


def test_driver_restores_tempdir_and_counts_model_temp_files():
    saved = tempfile.tempdir
    with EngineDriver(build_model()) as drv:
        drv.add_request(EngineRequest("a", "one two three four", seed=1))
        drv.step()
        assert len(drv.temp_files()) == 1 and drv.live_generators() == 1
        drv.run()
        assert drv.temp_files() == [] and drv.live_generators() == 0
    assert tempfile.tempdir == saved


def test_global_rng_changes_are_recorded_per_call():
    with EngineDriver(build_model("sampling_global_rng")) as drv:
        drv.add_request(EngineRequest("a", "one two", seed=1))
        call = drv.step()
    assert call.rng_changed == ["torch_cpu"]
    with EngineDriver(build_model()) as drv:
        drv.add_request(EngineRequest("a", "one two", seed=1))
        assert drv.step().rng_changed == []


def test_model_error_names_the_call_and_cli_exits_2(tmp_path):
    class Broken(Recorder):
        def forward(self, **kw):
            raise KeyError("text")

    with pytest.raises(EngineError, match=r"forward \(step 0\) raised KeyError"):
        run_requests(Broken(), [EngineRequest("a", "x", seed=1)])

    spec = tmp_path / "broken.py"
    spec.write_text("import torch\n\nclass M:\n    def forward(self, **kw):\n        raise KeyError('text')\n"
                    "    def compute_logits(self, h, sampling_metadata=None):\n        return h\n\n"
                    "def engine_model():\n    return M()\n")
    from porting_kit.cli import app

    result = CliRunner().invoke(app, ["check", str(spec), "--only", "rng"])
    assert result.exit_code == 2
    assert "engine_model()" in result.output and "Traceback" not in result.output


def test_cli_check_example_generator_json(tmp_path):
    from porting_kit.cli import app

    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["check", "--example", "generator:no_on_requests_finished",
                                      "--only", "rng,lifecycle", "--json", str(out)])
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "porting-kit/report/1" and data["status"] == "fail"
    codes = [f["code"] for f in data["findings"]]
    assert "rng.generator_leak" in codes and "lifecycle.ok" in codes
    leak = next(f for f in data["findings"] if f["code"] == "rng.generator_leak")
    assert leak["check"] == "rng" and leak["where"]["candidate"] == "engine_model.on_requests_finished"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generator_changes_are_recorded_and_example_runs_on_cuda():
    from porting_kit.runner import run_check

    torch.cuda.init()

    class DrawsOnCuda(Recorder):
        def forward(self, **kw):
            torch.randn(4, device="cuda")  # the CUDA default generator
            return super().forward(**kw)

    with EngineDriver(DrawsOnCuda(), device="cuda") as drv:
        drv.add_request(EngineRequest("a", "one two", seed=1))
        assert drv.step().rng_changed == ["torch_cuda"]
    report = run_check(example="generator", only="rng,lifecycle", device="cuda")
    assert report.codes() == ["rng.ok", "lifecycle.ok"]
