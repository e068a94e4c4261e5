#!/usr/bin/env bash
# Non-editable install smoke test (issue 11): build the wheel, install it into fresh
# virtualenvs and run the commands a user runs, from a directory outside the repository.
#   1. core install (no torch): scaffold, validate --static, notebooks, examples, lint
#   2. with the torch/audio stack (system site packages, the wheel installed --no-deps on top):
#      check --example, baseline compare, check on a shipped example spec
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 -m pip wheel -q --no-deps -w "$W/dist" "$REPO"
WHEEL=$(ls "$W"/dist/porting_kit-*.whl)
LISTING=$(python3 -m zipfile -l "$WHEEL")   # listed once: grep -q on a pipe would break it under pipefail
for want in porting_kit/_shipped/templates/ porting_kit/_shipped/notebooks/ porting_kit/_shipped/examples/ \
            porting_kit/_shipped/reference_audio/ porting_kit/py.typed porting_kit/data/; do
  grep -q -- "$want" <<<"$LISTING" || { echo "wheel lacks $want"; exit 1; }
done

python3 -m venv "$W/core"
"$W/core/bin/pip" install -q "$WHEEL"
cd "$W"
printf '{"architectures": ["TinyTTSForConditionalGeneration"], "model_type": "tiny_tts", "hidden_size": 64,\n "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "sampling_rate": 24000}\n' > config.json
"$W/core/bin/python" -c "import sys, porting_kit; assert 'torch' not in sys.modules; print('import ok', porting_kit.__file__)"
"$W/core/bin/porting-kit" scaffold --framework vllm-omni --shape single-stage-ar --model-type tiny_tts \
    --config config.json --out scaffold_out
"$W/core/bin/porting-kit" validate --static scaffold_out
"$W/core/bin/porting-kit" notebooks walk
ls walk/*.ipynb walk/examples/*.py > /dev/null
"$W/core/bin/porting-kit" notebooks walk   # twice: nothing changes
"$W/core/bin/porting-kit" examples > /dev/null
"$W/core/bin/porting-kit" lint scaffold_out

python3 -m venv --system-site-packages "$W/full"
"$W/full/bin/pip" install -q --no-deps --force-reinstall "$WHEEL"
"$W/full/bin/python" -c "import porting_kit, sys; p = porting_kit.__file__; print(p); sys.exit(0 if p.startswith('$W/full') else 1)"
"$W/full/bin/porting-kit" check --example tts:qkv_shard_order --only parity --json r.json && exit 1 || [ $? -eq 1 ]
"$W/full/bin/porting-kit" check --example tts --only parity,hop
"$W/full/bin/porting-kit" baseline record --example tts --out baselines
"$W/full/bin/porting-kit" baseline compare --example tts --out baselines
# a walkthrough copied out of the wheel runs to the end in a kernel of the wheel's environment
"$W/full/bin/porting-kit" notebooks walk2 > /dev/null
"$W/full/bin/python" - "$W" <<'PY'
import sys
import nbclient
import nbformat
nb = nbformat.read("walk2/01_layer_parity.ipynb", as_version=4)
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "walk2"}}).execute()
outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
errors = [o for o in outs if o.get("output_type") == "error"]
pngs = sum("image/png" in o.get("data", {}) for o in outs)
assert not errors and pngs, (errors, pngs)
print(f"walkthrough 01 from the wheel: ran, {pngs} plot(s)")
PY
echo "wheel smoke: ok"
