#!/usr/bin/env bash
# ctest install-and-consume: installs the build into a temporary prefix and
# builds examples/consumer against that prefix alone, as a user's program
# would (find_package(ampjit), ampjit::ampjit). Checks that
#   - libampjit.so needs no libLLVM and exports only jit:: and ampjit::
#     symbols (an exported LLVM or MLIR symbol could bind to a host program's
#     own LLVM, another version, and break both);
#   - the installed tools keep the build's run path (CUDA's libraries), and the
#     installed ampjit-run compiles and runs the MNIST step;
#   - the installed headers are all the API needs (the consumer sees no source tree);
#   - the consumer runs: a traced O1-f16 step agrees with eager, trains,
#     replays, and a mistake comes back as a jit::Error (train_regression.cpp);
#     a framework's step as MLIR text compiles at O1-f16, agrees with its fp32
#     plan, trains on the runtime with the framework's tensors updated in
#     place, and malformed IR is an error at its line (embed_module.cpp);
#   - the C API's header is installed, its functions are the library's only C
#     symbols, and it works from C (embed_c.c: an O2-f16 session, its derived
#     copies, a skipped overflow) and from Python through the installed
#     `ampjit` package, which finds the library by itself (embed_python.py).
# Usage: check_install_consumer.sh BUILD_DIR SOURCE_DIR [SANITIZERS]
set -euo pipefail
build="$1"
source="$2"
sanitize="${3:-}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "install-and-consume: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install failed"; }
lib="$(find "$work/prefix" -name 'libampjit.so' | head -n 1)"
[ -n "$lib" ] || fail "no libampjit.so under the install prefix"
# A binary's run path without empty entries (CMake pads the build tree's).
runpath() {
  readelf -d "$1" | sed -n 's/.*Library \(runpath\|rpath\): \[\(.*\)\]/\2/p' | tr ':' '\n' | grep -v '^$' | paste -sd:
}
for tool in amp-opt ampjit-run ampjit-train; do
  [ -x "$work/prefix/bin/$tool" ] || fail "$tool was not installed"
  # The build's run path names only libraries outside the tree (CUDA's):
  # the installed tool must still find them where ldconfig does not.
  [ "$(runpath "$work/prefix/bin/$tool")" = "$(runpath "$build/bin/$tool")" ] ||
    fail "installed $tool has run path '$(runpath "$work/prefix/bin/$tool")', the build's has '$(runpath "$build/bin/$tool")'"
done
[ -f "$work/prefix/include/jit/jit.h" ] || fail "jit/jit.h was not installed"

if readelf -d "$lib" | grep NEEDED | grep -qi 'libLLVM\|libMLIR'; then
  fail "$lib needs a shared LLVM or MLIR: $(readelf -d "$lib" | grep NEEDED)"
fi
nm -D --defined-only "$lib" | awk '{ print $3 }' > "$work/exported.txt"
# The C symbols must be exactly the functions the C API's header declares:
# another would be OpenBLAS's or LLVM's C API, and a declared one missing
# would fail only when a program calls it.
header="$work/prefix/include/ampjit-c/Ampjit.h"
[ -f "$header" ] || fail "ampjit-c/Ampjit.h was not installed"
grep -o '\bampjit_[a-z_]*(' "$header" | tr -d '(' | sort -u > "$work/declared.txt"
grep -v '^_Z' "$work/exported.txt" | sort -u > "$work/c-symbols.txt" || true
[ "$(wc -l < "$work/declared.txt")" -ge 20 ] || fail "found only $(wc -l < "$work/declared.txt") functions in $header"
if ! diff "$work/declared.txt" "$work/c-symbols.txt" > "$work/c-api.diff"; then
  fail "libampjit.so's C symbols are not the C API's functions (< declared only, > exported only): $(grep '^[<>]' "$work/c-api.diff" | head -n 5 | tr '\n' ';')"
fi
# By mangled name: a name in namespace llvm, mlir or YAML (a function, its
# type information or vtable) is one of theirs.
: > "$work/foreign.txt"
grep -E '^_Z(T[ISVT])?N[KRO]*(4llvm|4mlir|4YAML)' "$work/exported.txt" >> "$work/foreign.txt" || true
# Everything else must be in jit:: or ampjit:: (frontend/ampjit.map's prefixes):
# functions and variables, type information, vtables, thunks, local statics,
# thread-local wrappers.
grep '^_Z' "$work/exported.txt" |
  grep -v -E '^_Z(N[KRO]*|T[ISVT]N|Th[n0-9_]*N[K]?|Tv[n0-9_]*N[K]?|ZN[K]?|GVZN[K]?|T[HW]N)(3jit|6ampjit)' \
  >> "$work/foreign.txt" || true
if [ -s "$work/foreign.txt" ]; then
  fail "libampjit.so exports $(sort -u "$work/foreign.txt" | wc -l) symbols outside jit:: and ampjit::, e.g. $(sort -u "$work/foreign.txt" | head -n 5 | c++filt | tr '\n' ';')"
fi
c++filt < "$work/exported.txt" > "$work/demangled.txt"
grep -q '^jit::Tensor::item(' "$work/demangled.txt" || fail "libampjit.so does not export jit::Tensor::item"

flags=()
if [ -n "$sanitize" ]; then
  flags+=("-DCMAKE_CXX_FLAGS=-fsanitize=$sanitize -fno-sanitize=vptr" "-DCMAKE_C_FLAGS=-fsanitize=$sanitize")
fi
cmake -S "$source/examples/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${flags[@]}" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "configuring examples/consumer against the installed package failed"; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "building examples/consumer against the installed package failed"; }
"$work/prefix/bin/ampjit-run" "$source/examples/mnist_train_step.mlir" --amp-pipeline="level=O1 dtype=f16" \
  --steps=2 > "$work/run.log" 2>&1 || { cat "$work/run.log" >&2; fail "the installed ampjit-run failed"; }
"$work/consumer/train_regression"
"$work/consumer/embed_module" "$source/examples/mnist_train_step.mlir"
"$work/consumer/embed_c" "$source/examples/mnist_train_step.mlir"
# Python loads the library with ctypes. A sanitized library needs its runtimes
# loaded first, and Python's own allocations are not ours to count as leaks.
preload="$("$source/tests/sanitizer_preload.sh" "$sanitize")"
site="$(dirname "$lib")/python3/site-packages"
[ -f "$site/ampjit/__init__.py" ] || fail "the ampjit Python package was not installed beside libampjit.so"
LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" PYTHONPATH="$site" \
  python3 "$source/examples/consumer/embed_python.py" "$source/examples/mnist_train_step.mlir"
