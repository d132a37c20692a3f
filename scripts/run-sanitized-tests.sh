#!/usr/bin/env bash
# Builds every target with AddressSanitizer and UndefinedBehaviorSanitizer
# (AMPJIT_SANITIZE=address,undefined, RelWithDebInfo) in its own build folder
# and runs every test there, stopping a test at the first report. Not part of
# CI: on 2 cores the build takes about 25 minutes, the tests 12 to 21 more.
#
#   scripts/run-sanitized-tests.sh [ctest arguments, e.g. -R Emulated]
#
# AMPJIT_SANITIZED_BUILD_DIR chooses the folder (build-asan). Leaks count as
# failures too: none is expected, so nothing is suppressed.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="${AMPJIT_SANITIZED_BUILD_DIR:-$repo_root/build-asan}"
"$repo_root/scripts/setup.sh" --no-build
cmake -S "$repo_root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAMPJIT_SANITIZE=address,undefined \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
cmake --build "$build_dir"
# intercept_tls_get_addr=0: the CUDA emulation dlopens each generated kernel
# library, and each has thread-local state. GCC 12's LeakSanitizer misreads
# glibc 2.36's dynamic TLS of such libraries (a range like 0x10add-0x4800011bdf),
# and its tracer then dies with signal 11 at exit (google/sanitizers#1322), so
# ampjit-train-on-emulated-cuda failed with no report. Without the interception,
# LSan does not scan dynamic TLS for pointers: a block held only from there would
# be reported as a leak (a false report, never a missed one), and none is.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
