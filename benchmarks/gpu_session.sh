#!/usr/bin/env bash
# One GPU session, every step time-boxed, everything written under $OUT (default ./gpu-out).
#   bash benchmarks/gpu_session.sh            # from the repository root, on the GPU machine
# Steps: carried wheels -> pytest -m gpu -> whole suite -> check (llama, tts) bf16/fp16 ->
# planted variants bf16 -> dtype_matrix -> check_overhead 7/28 layers (plain, families) -> gpu_speed.
# Each step has its own `timeout` (seconds below); a step that times out is recorded (rc=124),
# not fatal. BUDGET_S=N caps the whole session (steps shortened or skipped; the archive of all
# logs, gpu-out.tgz, is written at the end either way). A full session does not fit one 600 s device call. ONLY='regex' runs only the matching steps
# (e.g. ONLY='overhead|gpu_speed') so a session can be split over two device calls.
set -u
OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
WHEELS="${WHEELS:-.gpu-wheels}"  # carried py3.12 wheels (librosa, soundfile, ...), installed to /tmp/site
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl > "$OUT/wheels.log" 2>&1 && echo "wheels: $(ls "$WHEELS"/*.whl | wc -l) installed" \
    || echo "wheels: install failed (see wheels.log)"
  export PYTHONPATH="/tmp/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)

ONLY="${ONLY:-.}"
step() {  # step NAME SECONDS CMD...: run CMD under timeout, log to $OUT/NAME.log, one summary line
  local name="$1" secs="$2"; shift 2
  if ! [[ "$name" =~ $ONLY ]]; then return 0; fi
  if [ -n "${BUDGET_S:-}" ]; then  # the whole session's budget: shorten or skip the step
    local left=$(( BUDGET_S - ($(date +%s) - T0) ))
    if [ "$left" -lt 20 ]; then echo "$name skipped (budget)" | tee -a "$SUMMARY"; return 0; fi
    [ "$secs" -gt "$left" ] && secs="$left"
  fi
  local t=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t ))s" | tee -a "$SUMMARY"
  return 0
}

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))" > "$OUT/env.txt" 2>&1


# the timing figures first, while nothing else runs on the machine
OV="--shape qwen3-0.6b --device cuda --dtype bfloat16 --repeats ${REPEATS:-5}"
step profile_l7 90 python3 benchmarks/prefill_profile.py --shape qwen3-0.6b --layers 7 --device cuda \
  --dtype bfloat16 --top 25
step parts_l7 90 python3 benchmarks/prefill_profile.py --shape qwen3-0.6b --layers 7 --device cuda \
  --dtype bfloat16 --parts
step decode_l7 90 python3 benchmarks/check_overhead.py $OV --layers 7 --decode-steps 16
step overhead_l7 90 python3 benchmarks/check_overhead.py $OV --layers 7 --no-memory
step overhead_l28 120 python3 benchmarks/check_overhead.py $OV --layers 28 --no-memory
step overhead_l7_families 90 python3 benchmarks/check_overhead.py $OV --layers 7 --no-memory \
  --families parity,rope,norm,config,dtype
step overhead_l28_families 150 python3 benchmarks/check_overhead.py $OV --layers 28 --no-memory \
  --families parity,rope,norm,config,dtype
# last: four cold child processes (7 and 28 layers, forwards and check)
step overhead_memory 150 python3 benchmarks/check_overhead.py $OV --layers 7 --deep-layers 28 --memory-only

step pytest_gpu 120 python3 -m pytest -q -m gpu -p no:cacheprovider -ra
# one torch thread per xdist worker: 15 workers x 16 threads each oversubscribe the cores ~15x
# (the session-22 run finished 846 of 1058 tests in 400 s that way)
(export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
 step pytest_all "${SUITE_S:-240}" python3 -m pytest -p no:cacheprovider -rfEs -v \
  -n "${XDIST:-8}" --durations 25 --junitxml "$OUT/pytest_all.xml")
# the summary line only (the whole log stays in pytest_all.log)
[ -f "$OUT/pytest_all.log" ] && tail -n 1 "$OUT/pytest_all.log" | sed 's/^/pytest_all: /' | tee -a "$SUMMARY"



for dt in bfloat16 float16; do
  step "check_llama_$dt" 40 python3 -m porting_kit check examples/llama_meta.py --device cuda --dtype "$dt" \
    --json "$OUT/check_llama_$dt.json"
  step "check_tts_$dt" 40 python3 -m porting_kit check --device cuda --dtype "$dt" --json "$OUT/check_tts_$dt.json"
done

cat > "$OUT/variants.py" <<'PY'
import os, sys
from porting_kit.runner import run_check
from porting_kit.spec import load_spec
dtype = sys.argv[1]
for name, src in (("llama", "examples/llama_meta.py"), ("tts", None)):
    if name not in os.environ.get("PAIRS", "llama,tts").split(","):
        continue
    spec = load_spec(src) if src else load_spec(example="tts")
    for v in [v for v in spec.variants if not v.startswith("audio_")]:
        dt = "float16" if v == "fp16_overflow" else dtype
        try:
            rep = (run_check(src, variant=v, device="cuda", dtype=dt) if src
                   else run_check(example=f"tts:{v}", device="cuda", dtype=dt))
            codes = sorted({f.code for f in rep.findings if f.status in ("fail", "warn")})
        except Exception as exc:  # one line per variant, whatever happens
            codes = [f"ERROR {type(exc).__name__}: {exc}"]
        print(f"{name}:{v} [{dt}] -> {', '.join(codes) or '-'}", flush=True)
for v in ("graph_stale_output", "graph_shape_changed", "graph_capture_generator", None):
    ex = "generator" + (f":{v}" if v else "")
    rep = run_check(example=ex, only="cudagraph", device="cuda")
    print(f"{ex} -> {', '.join(f.code for f in rep.findings)}: {rep.findings[0].message}", flush=True)
PY
step variants_bf16 90 python3 "$OUT/variants.py" bfloat16

step scaffold_cuda 120 python3 benchmarks/scaffold_cuda.py "$OUT/scaffold_cuda" --device cuda
step gpu_speed 40 python3 benchmarks/gpu_speed.py "$OUT/gpu_speed.md" --device cuda
step dtype_matrix 60 python3 benchmarks/dtype_matrix.py --device cuda --seeds 2 \
  --out "$OUT/dtype_matrix_cuda.md"



{
  echo "--- figures"
  for f in "$OUT"/overhead_*.log; do echo "  $(basename "$f" .log): $(grep -h '^overhead_ratio\|^decode_overhead_ratio\|^depth_memory_ratio=\|^check_parts_s=' "$f" | tr '\n' ' ')"; done
  for f in "$OUT"/check_*.json; do
    python3 - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [f["code"] for f in r["findings"] if f["status"] in ("fail", "warn")]
rope = [f["evidence"].get("angle_error_rad") for f in r["findings"] if f["check"] == "rope"]
print(f"  {sys.argv[1].rsplit('/', 1)[-1]}: status={r['status']} fail/warn={bad or 'none'} rope_angle={rope}")
PY
  done
  echo "--- variants"; cat "$OUT/variants_bf16.log" 2>/dev/null
  echo "total $(( $(date +%s) - T0 ))s"
} | tee -a "$SUMMARY"
# one archive: the device returns a limited number of files
tar czf /tmp/gpu-out.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + \
  && mv /tmp/gpu-out.tgz "$OUT/"
true
