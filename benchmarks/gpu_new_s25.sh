#!/usr/bin/env bash
# Session 25's GPU steps (on the device machine, from the repository root; wheels carried in .whl):
# the clean real pairs in float32 and bfloat16 on CUDA (the false-alarm gate of issue 29), and
# `scaffold --hf` -> `check OUT/port_spec.py` / `validate --tier gpu` for CSM and Dia (issue 31).
# Every step is time-boxed; one summary line each in $OUT/summary.txt.
set -u
OUT="${OUT:-./gpu-out}"; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/wheels.log" 2>&1 || echo "wheels: install failed" | tee -a "$OUT/summary.txt"
  export PYTHONPATH="/tmp/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
S="$OUT/summary.txt"
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))" >> "$S" 2>&1
step() { local name="$1" secs="$2"; shift 2; local t=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t ))s :: $(grep -E '^(PASS|FAIL)$|passed|failed' "$OUT/$name.log" | tail -1)" | tee -a "$S"; }
for spec in llama_meta encodec_pair mimi_pair dac_pair whisper_features; do
  for dt in float32 bfloat16; do
    step "pair_${spec}_$dt" 60 python3 -m porting_kit check "examples/$spec.py" --device cuda --dtype "$dt" \
      --json "$OUT/pair_${spec}_$dt.json"
  done
done
for v in roundtrip roundtrip_conv_as_matmul; do
  step "pair_mimi_${v}_bf16" 60 python3 -m porting_kit check examples/mimi_pair.py --variant "$v" --device cuda --dtype bfloat16
done
python3 - "$OUT/hf" > "$OUT/hf_build.log" 2>&1 <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests/scaffold")
from hf_models import build_csm, build_dia
root = Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True)
print(build_csm(root / "csm")); print(build_dia(root / "dia"))
PY
for m in csm dia; do
  step "scaffold_hf_$m" 120 python3 -m porting_kit scaffold --hf "$OUT/hf/$m" --out "$OUT/scaf_$m"
  for dt in float32 bfloat16; do
    step "check_port_${m}_$dt" 120 python3 -m porting_kit check "$OUT/scaf_$m/port_spec.py" --device cuda --dtype "$dt" \
      --json "$OUT/check_port_${m}_$dt.json"
  done
  step "validate_$m" 150 python3 -m porting_kit validate "$OUT/scaf_$m" --tier static,consistency,run,gpu --device cuda
done
step pytest_gpu 150 python3 -m pytest -q -m gpu -p no:cacheprovider -ra
for f in "$OUT"/*.json; do python3 - "$f" >> "$S" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [(f["code"], f["status"]) for f in r["findings"] if f["status"] in ("fail", "warn")]
print(f"  {sys.argv[1].rsplit('/', 1)[-1]}: status={r['status']} fail/warn={bad or 'none'}")
PY
done
rm -rf "$OUT/hf" "$OUT"/scaf_*/ 2>/dev/null
tar czf /tmp/gpu-new.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + && mv /tmp/gpu-new.tgz "$OUT/"
true
