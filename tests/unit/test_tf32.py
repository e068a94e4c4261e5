"""float32 checks on CUDA run with TF32 off and give the user's settings back (porting_kit.probes.tf32)."""

import pytest

torch = pytest.importorskip("torch")

from porting_kit.probes.tf32 import ieee_float32, tf32_allowed, tf32_settings  # noqa: E402


@pytest.fixture
def user_tf32():
    """A user who allows TF32 everywhere; the process's own settings are restored after."""
    old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
           torch.get_float32_matmul_precision())
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    yield tf32_settings()
    torch.set_float32_matmul_precision(old[2])
    torch.backends.cuda.matmul.allow_tf32 = old[1]
    torch.backends.cudnn.allow_tf32 = old[0]


def test_cuda_check_turns_tf32_off_inside_and_restores_the_users_settings(user_tf32):
    assert tf32_allowed(user_tf32)
    with ieee_float32("cuda:0") as got:
        inside = tf32_settings()
    assert inside == {"cudnn_allow_tf32": False, "matmul_allow_tf32": False, "float32_matmul_precision": "highest"}
    assert not tf32_allowed(inside)
    assert got == {"user": user_tf32, "during_check": inside}
    assert tf32_settings() == user_tf32


def test_settings_are_restored_when_the_check_raises(user_tf32):
    with pytest.raises(RuntimeError), ieee_float32("cuda"):
        raise RuntimeError("boom")
    assert tf32_settings() == user_tf32


def test_cpu_check_changes_nothing(user_tf32):
    with ieee_float32("cpu") as got:
        assert tf32_settings() == user_tf32
    assert got is None
