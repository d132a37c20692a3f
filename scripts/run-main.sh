#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs the main job. Until the training
# demo exists, the main job is amp-opt over a whole traced train step of the
# MindSpore MNIST classifier (forward, backward, loss scaler, SGD): it parses
# and verifies the module, including its state model, and prints it after
# canonicalization and CSE.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="${AMPJIT_BUILD_DIR:-$repo_root/build}"
"$repo_root/scripts/setup.sh" --build-dir "$build_dir" "$@"
"$build_dir/bin/amp-opt" "$repo_root/examples/mnist_train_step.mlir" --canonicalize --cse
