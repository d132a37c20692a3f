#!/usr/bin/env bash
# The main job's acceptance check (issue 6): ampjit-train with O1-f16 on the
# CPU, SGD lr 1e-2 momentum 0.9, reaches >= 93% held-out accuracy on the real
# MNIST digits within 10 epochs; with AdamW (lr 1e-3, weight decay 1e-2, the
# torch.optim defaults) at O2-bf16 it reaches >= 94% within 5. The digits come
# from scripts/setup.sh.
set -euo pipefail
train=$1

expect_accuracy() {
  local least=$1
  shift
  local output
  output=$("$train" "$@" --backend cpu --json --no-progress)
  echo "$output"
  python3 - "$least" "$output" <<'PY'
import json, sys
least, output = float(sys.argv[1]), sys.argv[2]
lines = [json.loads(line) for line in output.splitlines() if line.strip()]
final = lines[-1]
accuracy = final["held_out_accuracy"]
print(f"{final['optimizer']}: held-out accuracy {accuracy:.4f} after {len(lines) - 1} epochs (at least {least})")
sys.exit(0 if accuracy >= least else 1)
PY
}

expect_accuracy 0.93 --amp O1 --dtype f16 --epochs 10 --lr 1e-2 --momentum 0.9
expect_accuracy 0.94 --amp O2 --dtype bf16 --epochs 5 --optimizer adamw
