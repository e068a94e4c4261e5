"""The generated scaffolds' run and gpu tiers on a CUDA device (issue 12 point 1, issue 13 point 2).

For each vLLM-Omni shape, from the tests' TTS config and from an independent TTS config, this
scaffolds a fresh tree and runs ``porting-kit validate DIR --device cuda`` (every tier that
applies: static, consistency, run, gpu), then prints one line per tree with the codes and the
run tier's evidence (seam, requests, samples, device). On a machine without vLLM the seam
resolves to porting-kit's torch stand-ins; the line says so.

    python benchmarks/scaffold_cuda.py OUT_DIR [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from porting_kit.scaffold.examples import EXAMPLE_CONFIGS

SHAPES = ("two-stage", "single-stage-ar", "native-ar")
#: The two example TTS configs (also used by tests/scaffold_helpers.py and tests/scaffold/test_run_tier.py).
CONFIGS = EXAMPLE_CONFIGS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder for the JSON reports")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in CONFIGS.items():
            cfg_path = Path(tmp) / f"{name}.json"
            cfg_path.write_text(json.dumps(cfg))
            for shape in SHAPES:
                tree = Path(tmp) / f"{name}-{shape}"
                gen = subprocess.run([sys.executable, "-m", "porting_kit", "scaffold", "--framework", "vllm-omni",
                                      "--shape", shape, "--model-type", name, "--config", str(cfg_path),
                                      "--out", str(tree)], capture_output=True, text=True)
                if gen.returncode:
                    print(f"{name} {shape}: scaffold rc={gen.returncode} {gen.stderr.strip()}", flush=True)
                    worst = max(worst, gen.returncode)
                    continue
                rep = out / f"validate_{name}_{shape}.json"
                val = subprocess.run([sys.executable, "-m", "porting_kit", "validate", str(tree), "--device",
                                      args.device, "--json", str(rep)], capture_output=True, text=True)
                worst = max(worst, val.returncode)
                if not rep.exists():
                    print(f"{name} {shape}: validate rc={val.returncode} {val.stderr.strip()}", flush=True)
                    continue
                doc = json.loads(rep.read_text())
                codes = [f"{f['code']}:{f['status']}" for f in doc["findings"]]
                run_ev = next((f["evidence"] for f in doc["findings"] if f["code"] == "run.ok"), {})
                keep = {k: run_ev.get(k) for k in ("seam", "device", "requests", "samples", "async_chunk",
                                                   "chunks") if k in run_ev}
                print(f"{name} {shape}: rc={val.returncode} {' '.join(codes)} {keep}", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
