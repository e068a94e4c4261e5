"""porting_kit.devices.cuda_missing: one answer for check --device and validate's GPU tier."""

import sys

import pytest
import torch

from porting_kit.context import CheckContext
from porting_kit.devices import cuda_missing
from porting_kit.errors import InputError
from porting_kit.scaffold import validate


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_check_and_gpu_tier_give_the_same_reason():
    why = cuda_missing()
    assert why == f"no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is False)"
    with pytest.raises(InputError) as e:
        CheckContext(spec=None, device="cuda").check_device()
    assert str(e.value) == f"--device cuda: {why}"
    (f,) = validate.gpu_tier(None, None)
    assert (f.code, f.status, f.message) == ("gpu.skipped", "skip", f"GPU tier skipped: {why}.")


def test_index_past_the_count_and_in_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cuda_missing(2) == "this machine has 2 CUDA device(s) (cuda:0 to cuda:1)"
    assert cuda_missing(1) is None and cuda_missing() is None


def test_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert cuda_missing() == "torch is not installed (pip install 'porting-kit[torch]')"
