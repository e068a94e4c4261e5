#!/usr/bin/env bash
# float32 / bfloat16 parity of the clean real pairs on CUDA after the TF32 change, the DAC / Mimi
# planted faults in float32, benchmarks/tf32_parity.py (TF32 on vs off figures) and the gpu tests.
# From the repository root on the device machine (wheels in /tmp/site, PYTHONPATH set by the caller).
set -u
OUT="${OUT:-./gpu-out}"; mkdir -p "$OUT"; S="$OUT/summary.txt"
export MPLBACKEND=Agg HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name(0), 'cudnn.allow_tf32', torch.backends.cudnn.allow_tf32)" >> "$S" 2>&1
step() { local name="$1" secs="$2"; shift 2; local t=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t ))s :: $(grep -E '^(PASS|FAIL)$|passed|failed|first divergence' "$OUT/$name.log" | tail -1)" >> "$S"; }
chk() { local name="$1"; shift; step "$name" 150 python3 -m porting_kit check "$@" --device cuda --json "$OUT/$name.json"; }
( chk dac_f32 examples/dac_pair.py --dtype float32; chk dac_bf16 examples/dac_pair.py --dtype bfloat16
  chk dac_codes_f32 examples/dac_pair.py --variant codes --dtype float32 --only parity
  chk dac_bias_scale_f32 examples/dac_pair.py --variant bias_scale --dtype float32 --only parity
  chk dac_convt_flip_f32 examples/dac_pair.py --variant convt_flip --dtype float32 --only parity ) &
( chk mimi_f32 examples/mimi_pair.py --dtype float32; chk mimi_bf16 examples/mimi_pair.py --dtype bfloat16
  chk mimi_roundtrip_f32 examples/mimi_pair.py --variant roundtrip --dtype float32 --only parity
  chk mimi_roundtrip_bf16 examples/mimi_pair.py --variant roundtrip --dtype bfloat16 --only parity
  chk mimi_kernel_flip_f32 examples/mimi_pair.py --variant kernel_flip --dtype float32 --only parity ) &
( chk llama_f32 examples/llama_meta.py --dtype float32; chk encodec_f32 examples/encodec_pair.py --dtype float32
  chk llama_bf16 examples/llama_meta.py --dtype bfloat16; chk encodec_bf16 examples/encodec_pair.py --dtype bfloat16 ) &
step tf32_parity 200 python3 benchmarks/tf32_parity.py cuda &
wait
step pytest_gpu 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/checks/test_real_pairs.py
cat "$S"
