#!/usr/bin/env bash
# Fails if any binary in the given folder needs a shared library the GPU
# machine may not have: ampjit's binaries must run where no LLVM, yaml-cpp or
# OpenBLAS is installed, so those are linked statically. Allowed: the C/C++
# runtime, zlib/zstd (in every Debian base system) and the CUDA toolkit's own
# libraries, which the GPU machine provides. A sanitized build (the second
# argument: AMPJIT_SANITIZE's value) may need the sanitizers' runtimes too.
set -euo pipefail
dir="$1"
sanitizers="${2:-}"
runtimes='libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libz|libzstd|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvrtc|libnvrtc-builtins|libnvJitLink'
[ -n "$sanitizers" ] && runtimes="$runtimes|libasan|libubsan|liblsan|libtsan"
allowed="^\[($runtimes)\.so[.0-9]*\]$"
checked=0
for binary in "$dir"/*; do
  [ -f "$binary" ] && [ -x "$binary" ] || continue
  needed=$(readelf -d "$binary" | awk '/NEEDED/ {print $NF}')
  unexpected=$(grep -vE "$allowed" <<<"$needed" || true)
  if [ -n "$unexpected" ]; then
    echo "FAIL: $binary needs: $(tr '\n' ' ' <<<"$unexpected")"
    exit 1
  fi
  checked=$((checked + 1))
done
if [ "$checked" -eq 0 ]; then
  echo "FAIL: no binaries found in $dir"
  exit 1
fi
echo "ok: $checked binaries in $dir need only the C/C++ runtime, zlib/zstd and CUDA libraries"
