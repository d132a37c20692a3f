#!/usr/bin/env bash
# The main job's acceptance check (issue 6): ampjit-train with O1-f16 on the
# CPU, SGD lr 1e-2 momentum 0.9, reaches >= 93% held-out accuracy on the real
# MNIST digits within 10 epochs. The digits come from scripts/setup.sh.
set -euo pipefail
train=$1
output=$("$train" --amp O1 --dtype f16 --backend cpu --epochs 10 --lr 1e-2 --momentum 0.9 --json --no-progress)
echo "$output"
python3 - "$output" <<'PY'
import json, sys
lines = [json.loads(line) for line in sys.argv[1].splitlines() if line.strip()]
final = lines[-1]
accuracy = final["held_out_accuracy"]
print(f"held-out accuracy {accuracy:.4f} after {len(lines) - 1} epochs")
sys.exit(0 if accuracy >= 0.93 else 1)
PY
