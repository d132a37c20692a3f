#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs every test: GoogleTest suites,
# the lit suite and the binary checks, all through ctest.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="${AMPJIT_BUILD_DIR:-$repo_root/build}"
"$repo_root/scripts/setup.sh" --build-dir "$build_dir" "$@"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
