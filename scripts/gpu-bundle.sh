#!/usr/bin/env bash
# Packs what the GPU machine needs to check and measure the CUDA backend
# (../shared/GPU.md): the GPU tests, the benchmark, the main job and the
# PyTorch peer script, stripped and xz-compressed into gpu-bundle/ (git
# ignores it) with gpu-bundle/run.sh, which runs there and writes its logs
# to $OUT. With the device tool: carry ["gpu-bundle"], command
# `bash gpu-bundle/run.sh`. Build first (scripts/run-tests.sh or ninja in build/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}"
[ -x "$build/bin/ampjit-gpu-tests" ] || { echo "no $build/bin/ampjit-gpu-tests: build with CUDA first" >&2; exit 1; }

rm -rf gpu-bundle
mkdir -p gpu-bundle/bin gpu-bundle/bench
for binary in ampjit-gpu-tests ampjit-bench ampjit-train ampjit-cuda-compile-tests; do
  strip -o "gpu-bundle/bin/$binary" "$build/bin/$binary"
  xz -9 -T0 "gpu-bundle/bin/$binary"
done
cp bench/peers/torch_peers.py bench/peers/torch_graph_peer.py gpu-bundle/bench/
git rev-parse HEAD > gpu-bundle/COMMIT

cat > gpu-bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine: the GPU tests, then the benchmark with the PyTorch
# peer in the same run. Logs and JSON go to $OUT (default gpu-out/).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out" "$here/run"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export AMPJIT_KERNEL_CACHE="$here/run/kernel-cache"
for compressed in "$here"/bin/*.xz; do
  xz -dc "$compressed" > "$here/run/$(basename "$compressed" .xz)"
  chmod +x "$here/run/$(basename "$compressed" .xz)"
done
echo "commit $(cat "$here/COMMIT")" | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/summary.txt"
for binary in "$here"/run/ampjit-*; do
  missing=$(ldd "$binary" | grep 'not found' || true)
  [ -z "$missing" ] || echo "$(basename "$binary") misses: $missing" | tee -a "$out/summary.txt"
done
"$here/run/ampjit-gpu-tests" --gtest_output="json:$out/gpu-tests.json" > "$out/gpu-tests.log" 2>&1
echo "gpu tests: exit $? ($(grep -c '^\[       OK' "$out/gpu-tests.log") ok, $(grep -c '^\[  FAILED' "$out/gpu-tests.log") failed lines)" \
  | tee -a "$out/summary.txt"
"$here/run/ampjit-bench" --model "${AMPJIT_BENCH_MODELS:-classifier,mlp9,resnet50}" --levels O0,O1,O2 --dtypes f16,bf16 \
  --peer-compile --peer-script "$here/bench/torch_peers.py" > "$out/bench.jsonl" 2> "$out/bench.log"
echo "bench: exit $?" | tee -a "$out/summary.txt"
tail -n 1 "$out/bench.jsonl" >> "$out/summary.txt"
RUN
chmod +x gpu-bundle/run.sh
du -sh gpu-bundle
