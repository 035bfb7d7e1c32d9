#!/usr/bin/env bash
# The GPU check (issue 23): on a machine with CUDA, the parity and fast-vs-plain tests on CUDA (fp32 and bf16),
# then bench/bench.py on CUDA in fp32 and bf16, and one summary table at the end.
#   bash bench/gpu_check.sh [OUT_DIR]        # writes OUT_DIR/{tests.txt,bench-fp32.*,bench-bf16.*,summary.md}
# Needs the setup of the README (PyTorch for the machine's CUDA) and the evaluation data ($EVAL_DATA_DIR).
# Not run yet: no GPU was lent to the sessions that wrote it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu-check}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device here')" || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true

python -m pytest -q -p no:cacheprovider tests/test_cuda.py > "$OUT/tests.txt" 2>&1
tests_rc=$?
for amp in none bf16; do
    python bench/bench.py --device cuda --amp "$amp" --train-steps 200 --warmup-steps 10 --rounds 3 \
        --json "$OUT/bench-$amp.json" > "$OUT/bench-$amp.txt" 2>&1
done

python - "$OUT" "$tests_rc" <<'PY'
import json, sys
from pathlib import Path
out, rc = Path(sys.argv[1]), int(sys.argv[2])
lines = [f"GPU: {(out / 'gpu.txt').read_text().strip()}", "",
         f"tests/test_cuda.py: {'passed' if rc == 0 else 'FAILED'} ({(out / 'tests.txt').read_text().strip().splitlines()[-1]})", "",
         "| amp | system | sentences/s median | ours / theirs | peak GPU MB |", "|---|---|---|---|---|"]
for amp in ("none", "bf16"):
    path = out / f"bench-{amp}.json"
    if not path.exists():
        lines.append(f"| {amp} | (bench failed: see bench-{amp}.txt) | | | |")
        continue
    results = json.loads(path.read_text())["results"]
    for job, r in results.items():
        part = job.split("_")[0]
        theirs = results.get(f"{part}_theirs", {})
        ratio = (f"{r['rate_median'] / theirs['rate_median']:.2f}x"
                 if "rate_median" in theirs and "rate_median" in r and not job.endswith("theirs") else "")
        lines.append(f"| {amp} | {job} | {r.get('rate_median', float('nan')):.1f} | {ratio} | "
                     f"{r.get('peak_gpu_mb', float('nan')):.0f} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
