#!/usr/bin/env bash
# Fails if any binary in the given folder needs libLLVM or libMLIR at run time:
# ampjit's binaries must run where no LLVM is installed (the GPU machine).
set -euo pipefail
dir="$1"
checked=0
for binary in "$dir"/*; do
  [ -f "$binary" ] && [ -x "$binary" ] || continue
  needed=$(readelf -d "$binary" | awk '/NEEDED/ {print $NF}')
  if grep -qiE 'libLLVM|libMLIR' <<<"$needed"; then
    echo "FAIL: $binary needs: $(grep -iE 'libLLVM|libMLIR' <<<"$needed" | tr '\n' ' ')"
    exit 1
  fi
  checked=$((checked + 1))
done
if [ "$checked" -eq 0 ]; then
  echo "FAIL: no binaries found in $dir"
  exit 1
fi
echo "ok: $checked binaries in $dir need neither libLLVM nor libMLIR"
