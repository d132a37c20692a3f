#!/usr/bin/env bash
# Prints what LD_PRELOAD must hold for a process that is not itself
# sanitized (python3) to load a library built with these sanitizers
# (AMPJIT_SANITIZE, e.g. address,undefined): their runtimes, which must come
# first. Prints nothing when SANITIZERS is empty.
# Usage: sanitizer_preload.sh [SANITIZERS]
set -euo pipefail
preload=""
case ",${1:-}," in *,address,*) runtimes="libasan.so" ;; *) runtimes="" ;; esac
case ",${1:-}," in *,undefined,*) runtimes="$runtimes libubsan.so" ;; esac
for runtime in $runtimes; do
  path="$(${CXX:-c++} -print-file-name="$runtime")"
  [ -f "$path" ] || { echo "sanitizer_preload.sh: no $runtime for ${CXX:-c++}" >&2; exit 1; }
  preload="$preload $path"
done
echo "${preload# }"
