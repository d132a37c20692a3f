#!/usr/bin/env bash
# ampjit-train's scaler follows the AMP policy's loss_scale (GradScaler(policy)):
# dynamic scaling from 2^16 for f16, none (scale 1) for bf16 and O0, whose
# gradients do not underflow.
set -euo pipefail
train=$1
check() {
  local expected=$1
  shift
  output=$("$train" --backend cpu --data synthetic --epochs 1 --max-steps 2 --json --no-progress "$@")
  python3 - "$expected" "$output" "$*" <<'PY'
import json, sys
expected, output, flags = float(sys.argv[1]), sys.argv[2], sys.argv[3]
epochs = [json.loads(line) for line in output.splitlines() if line.strip().startswith("{") and '"epoch"' in line]
scale = epochs[-1]["loss_scale"]
print(f"{flags}: loss scale {scale}")
sys.exit(0 if scale == expected else 1)
PY
}
check 65536 --amp O1 --dtype f16
check 1 --amp O1 --dtype bf16
check 1 --amp O1 --dtype auto # bf16 on the CPU
check 1 --amp O0
check 65536 --amp O2 --dtype f16 --model mlp9 --width 32 --steps-per-epoch 2
check 1 --amp O2 --dtype bf16 --model mlp9 --width 32 --steps-per-epoch 2
