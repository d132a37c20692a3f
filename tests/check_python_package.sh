#!/usr/bin/env bash
# ctest python-package: tests/python/test_ampjit_package.py over the build's
# libampjit.so, with python/ on PYTHONPATH; a sanitized library gets its
# sanitizers' runtimes preloaded (Python's own allocations are not ours to
# count as leaks).
# Usage: check_python_package.sh LIBAMPJIT.so SOURCE_DIR [SANITIZERS]
set -euo pipefail
library="$1"
source="$2"
preload="$("$source/tests/sanitizer_preload.sh" "${3:-}")"
LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" PYTHONPATH="$source/python" \
  exec python3 "$source/tests/python/test_ampjit_package.py" "$library" "$source/examples"
