"""Norm rules (issue 29, point 4): PKN101 literal epsilon where the configured one is at hand,
PKN102 (1 + w) gain on a plain-gain weight, PKN103 RMSNorm without an fp32 upcast (warn).
Each planted line gives its exact code at its line; each twin is clean."""

import contextlib
import io
import textwrap

import pytest

from porting_kit.cli import lint_main as main
from porting_kit.lint.rules import severity_of

CASES = [
    ("PKN101", """
        class T5LayerNorm(nn.Module):
            def forward(self, x):
                return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
            def __init__(self, dim, eps=1e-6):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
                self.variance_epsilon = eps
        """, """
        class T5LayerNorm(nn.Module):
            def forward(self, x):
                return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight
            def __init__(self, dim, eps=1e-6):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
                self.variance_epsilon = eps
        """),
    ("PKN101", """
        class Attention(nn.Module):
            def __init__(self, config):
                self.q_norm = RMSNorm(config.head_dim, eps=1e-6)
                self.k_norm = RMSNorm(config.head_dim, eps=config.rms_norm_eps)
        """, """
        class Attention(nn.Module):
            def __init__(self, config):
                self.q_norm = RMSNorm(config.head_dim, eps=config.rms_norm_eps)
                self.k_norm = RMSNorm(config.head_dim, eps=config.rms_norm_eps)
        """),
    ("PKN101", """
        class Norm(nn.Module):
            def forward(self, x):
                return F.layer_norm(x, self.shape, self.weight, self.bias, 1e-5)
            def __init__(self, shape, eps):
                self.shape, self.eps = shape, eps
        """, """
        class Norm(nn.Module):
            def forward(self, x):
                return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)
            def __init__(self, shape, eps):
                self.shape, self.eps = shape, eps
        """),
    ("PKN101", """
        class ScaleNorm(nn.Module):
            def forward(self, x):
                var = 1e-5 + torch.mean(x ** 2, dim=2, keepdim=True)
                return x * self.alpha * torch.rsqrt(var)
            def __init__(self, dim, eps=1e-5):
                self.eps = eps
        """, """
        class ScaleNorm(nn.Module):
            def forward(self, x):
                var = self.eps + torch.mean(x ** 2, dim=2, keepdim=True)
                return x * self.alpha * torch.rsqrt(var)
            def __init__(self, dim, eps=1e-5):
                self.eps = eps
        """),
    ("PKN102", """
        class RMSNorm(nn.Module):
            def forward(self, x):
                return self._norm(x.float()) * (1.0 + self.weight.float())
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
        """, """
        class RMSNorm(nn.Module):
            def forward(self, x):
                return self._norm(x.float()) * (1.0 + self.weight.float())
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.zeros(dim))
        """),
    ("PKN102", """
        class AdaNorm(nn.Module):
            def forward(self, x):
                return self.norm(x) * (self.scale + 1)
            def __init__(self, dim):
                self.scale = nn.Parameter(torch.ones(dim))
        """, """
        class AdaNorm(nn.Module):
            def forward(self, x):
                return self.norm(x) * self.scale
            def __init__(self, dim):
                self.scale = nn.Parameter(torch.ones(dim))
        """),
    ("PKN103", """
        class MyRMSNorm(nn.Module):
            def forward(self, hidden_states):
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                return self.weight * hidden_states * torch.rsqrt(variance + self.eps)
        """, """
        class MyRMSNorm(nn.Module):
            def forward(self, hidden_states):
                variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
                return self.weight * (hidden_states * torch.rsqrt(variance + self.eps)).to(hidden_states.dtype)
        """),
    ("PKN103", """
        class AdaRMSNorm(nn.Module):
            def _norm(self, x):
                var = torch.mean(torch.square(x), dim=-1, keepdim=True)
                return x * torch.rsqrt(var + self.eps)
            def forward(self, x):
                return self._norm(x).to(self.weight.dtype) * self.weight
        """, """
        class AdaRMSNorm(nn.Module):
            def _norm(self, x):
                var = torch.mean(torch.square(x.float()), dim=-1, keepdim=True)
                return x.float() * torch.rsqrt(var + self.eps)
            def forward(self, x):
                return self._norm(x).to(self.weight.dtype) * self.weight
        """),
    ("PKN103", """
        import torch
        def rms_norm(x, weight, eps):
            return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * weight
        """, """
        import torch
        def rms_norm(x, weight, eps):
            y = x.float()
            return (y * torch.rsqrt(torch.mean(y * y, dim=-1, keepdim=True) + eps)).type_as(x) * weight
        """),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def _lint(tmp_path, source):
    path = tmp_path / "pkg" / "modeling.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(path)])
    return rc, buf.getvalue(), str(path)


@pytest.mark.parametrize("code,bad,good", CASES, ids=IDS)
def test_bad_line_gives_its_code_at_its_line(tmp_path, code, bad, good):
    rc, out, path = _lint(tmp_path, bad)
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:3:") and f" {code} " in lines[0], out
    assert rc == (1 if severity_of(code) == "fail" else 0)
    assert "(fix: " in lines[0]


@pytest.mark.parametrize("code,bad,good", CASES, ids=IDS)
def test_good_twin_is_clean(tmp_path, code, bad, good):
    assert _lint(tmp_path, good)[:2] == (0, "")


def test_residual_zero_init_gain_and_forward_upcast_are_left_alone(tmp_path):
    """ConvNeXt-V2's GRN starts gamma at zeros on purpose (a residual); an RMSNorm whose forward
    upcasts before calling _norm is upcast; a module-configured compute dtype is a choice."""
    rc, out, _ = _lint(tmp_path, """
        class GRN(nn.Module):
            def __init__(self, dim):
                self.gamma = nn.Parameter(torch.zeros(1, 1, dim))
            def forward(self, x):
                nx = x / (x.norm(dim=1, keepdim=True).mean(dim=-1, keepdim=True) + 1e-6)
                return self.gamma * (x * nx) + x
        class RMSNorm_FP32(nn.Module):
            def __init__(self, dim, eps):
                self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))
            def _norm(self, x):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            def forward(self, x):
                return self._norm(x.float()).type_as(x) * self.weight
        class ScaledRMSNorm(nn.Module):
            def forward(self, x):
                x = x.to(self.compute_dtype)
                return x * torch.rsqrt(self.eps + torch.mean(x ** 2, dim=-1, keepdim=True))
        """)
    assert (rc, out) == (0, "")


def test_pkn_prefix_selects_only_the_norm_rules():
    from porting_kit.lint.rules import select_codes

    assert select_codes(["PKN"], None) == {"PKN101", "PKN102", "PKN103", "PK000"}


#: PKN102 through a simple local alias of the weight (issue 29, point 4): (bad, line, good).
ALIAS_CASES = [
    ("""
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
            def forward(self, x):
                w = self.weight
                return self._norm(x.float()) * (1 + w)
        """, 7, """
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
            def forward(self, x):
                w = self.weight
                return self._norm(x.float()) * w
        """),
    ("""
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
            def forward(self, x):
                gain = self.weight.float()
                return (self._norm(x.float()) * (1.0 + gain)).type_as(x)
        """, 7, """
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.zeros(dim))
            def forward(self, x):
                gain = self.weight.float()
                return (self._norm(x.float()) * (1.0 + gain)).type_as(x)
        """),
    ("""
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
            def forward(self, x):
                w = self.weight
                return self._norm(x.float()) * (w.float() + 1)
        """, 7, """
        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))
            def forward(self, x):
                w = self.weight
                if self.zero_centred:
                    w = w - 1.0
                return self._norm(x.float()) * (1 + w)
        """),
]


@pytest.mark.parametrize("bad,line,good", ALIAS_CASES, ids=[f"PKN102-alias-{i}" for i in range(len(ALIAS_CASES))])
def test_pkn102_follows_a_simple_local_alias_of_the_weight(tmp_path, bad, line, good):
    rc, out, path = _lint(tmp_path, bad)
    lines = out.splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith(f"{path}:{line}:") and " PKN102 " in lines[0], out
    assert _lint(tmp_path, good)[:2] == (0, "")
