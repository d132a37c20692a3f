#!/usr/bin/env bash
# Sets up (scripts/setup.sh: packages, the MNIST digits, the build) and runs
# the main job: ampjit-train trains the MindSpore tutorial's MNIST classifier
# (784-512-512-10, ReLU, batch 64, cross-entropy, SGD momentum 0.9) on 8,000
# real handwritten digits with a jit::trace'd mixed-precision step (forward,
# backward, dynamic loss scaler and optimizer compiled as one), on the GPU if
# there is one, else on the CPU, and reports held-out accuracy on 2,000 more
# and the precision summary. AMPJIT_LEVEL / AMPJIT_DTYPE / AMPJIT_EPOCHS
# override O1 / f16 / 10; extra arguments go to setup.sh.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="${AMPJIT_BUILD_DIR:-$repo_root/build}"
level="${AMPJIT_LEVEL:-O1}"
dtype="${AMPJIT_DTYPE:-f16}"
epochs="${AMPJIT_EPOCHS:-10}"
"$repo_root/scripts/setup.sh" --build-dir "$build_dir" "$@"
echo
"$build_dir/bin/ampjit-train" --amp "$level" --dtype "$dtype" --epochs "$epochs" --backend auto
