#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs the main job. Until the training
# demo exists, the main job is the AMP pipeline over a whole traced train step
# of the MindSpore MNIST classifier (forward, backward, loss scaler, SGD): it
# verifies the module (state model included), rewrites it for O1 mixed
# precision (AMPJIT_LEVEL / AMPJIT_DTYPE override O1 / f16), prints the result
# and the precision summary of the AMP report.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="${AMPJIT_BUILD_DIR:-$repo_root/build}"
level="${AMPJIT_LEVEL:-O1}"
dtype="${AMPJIT_DTYPE:-f16}"
"$repo_root/scripts/setup.sh" --build-dir "$build_dir" "$@"
report="$build_dir/mnist-amp-report.json"
"$build_dir/bin/amp-opt" "$repo_root/examples/mnist_train_step.mlir" \
  --amp-pipeline="level=$level dtype=$dtype report=$report report-dot=$build_dir/mnist-amp.dot"
python3 - "$report" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
options, summary = report["options"], report["summary"]
print(f"\nAMP {options['level']} {options['dtype']} (policy {options['policy']}, target {options['target']}):")
for dtype, count in sorted(summary["ops_per_compute_type"].items()):
    print(f"  {count:3d} ops compute in {dtype}")
print(f"  {summary['casts_inserted']} casts inserted, {summary['casts_removed']} removed, "
      f"{summary['master_weight_copies']} low-precision parameter copies")
print(f"  per-op reasons: {sys.argv[1]}")
PY

# Compile the rewritten step to a plan (elementwise chains fused) and train it
# on the CPU for a few steps on one fixed random batch: the loss must fall.
echo
echo "Training the compiled step on the CPU (one fixed random batch):"
"$build_dir/bin/ampjit-run" "$repo_root/examples/mnist_train_step.mlir" \
  --amp-pipeline="level=$level dtype=$dtype" --jit-fuse-elementwise --steps=20 --seed=1
