#!/usr/bin/env bash
# Packs what the GPU machine needs to check and measure the CUDA backend
# (../shared/GPU.md): the GPU tests, the benchmark, the main job and the
# PyTorch peer script, stripped and xz-compressed into gpu-bundle/ (git
# ignores it) with gpu-bundle/run.sh, which runs there and writes its logs
# to $OUT. With the device tool: carry ["gpu-bundle"], command
# `bash gpu-bundle/run.sh` (then `bash gpu-bundle/run.sh bench mlp9`, `... bench resnet50`,
# `... defer-ab mlp9`:
# one device command may run 600 s). Build first (scripts/run-tests.sh or ninja in build/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}"
[ -x "$build/bin/ampjit-gpu-tests" ] || { echo "no $build/bin/ampjit-gpu-tests: build with CUDA first" >&2; exit 1; }

rm -rf gpu-bundle
mkdir -p gpu-bundle/bin gpu-bundle/bench
for binary in ampjit-gpu-tests ampjit-bench ampjit-train ampjit-cuda-tests; do
  strip -o "gpu-bundle/bin/$binary" "$build/bin/$binary"
  xz -9 -T0 "gpu-bundle/bin/$binary"
done
cp bench/peers/torch_peers.py bench/peers/torch_graph_peer.py gpu-bundle/bench/
git rev-parse HEAD > gpu-bundle/COMMIT

cat > gpu-bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine. Stages, in the order given (default: tests bench classifier):
#   tests           every GPU test in its own process (a crash costs one test, not the rest)
#   bench MODEL...  ampjit-bench for the models (classifier, mlp9, resnet50) with all peers
#   defer-ab MODEL...  O1/O2 f16 with the optimizer update deferred into the next step and not,
#                   no peers: what deferring buys (TraceOptions::defer_updates)
# One device command may run 600 s: give mlp9 and resnet50 a call each.
# Logs, JSON and summary.txt go to $OUT (default gpu-out/).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out" "$here/run"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export AMPJIT_KERNEL_CACHE="$here/run/kernel-cache"
for compressed in "$here"/bin/*.xz; do
  binary="$here/run/$(basename "$compressed" .xz)"
  [ -x "$binary" ] || { xz -dc "$compressed" > "$binary" && chmod +x "$binary"; }
done
echo "commit $(cat "$here/COMMIT")" | tee -a "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/summary.txt"
for binary in "$here"/run/ampjit-*; do
  missing=$(ldd "$binary" | grep 'not found' || true)
  [ -z "$missing" ] || echo "$(basename "$binary") misses: $missing" | tee -a "$out/summary.txt"
done

run_tests() {
  local tests passed=0 skipped=0 failed=() crashed=() log status
  tests=$("$here/run/ampjit-gpu-tests" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
  for test in $tests; do
    log=$(timeout 300 "$here/run/ampjit-gpu-tests" --gtest_filter="$test" 2>&1)
    status=$?
    printf '=== %s (exit %s)\n%s\n' "$test" "$status" "$log" >> "$out/gpu-tests.log"
    case $status in
      0) if grep -q '^\[  SKIPPED \]' <<< "$log"; then skipped=$((skipped + 1)); else passed=$((passed + 1)); fi ;;
      1) failed+=("$test") ;;
      *) crashed+=("$test") ;; # a signal or the timeout
    esac
  done
  echo "gpu tests: ${passed} passed, ${skipped} skipped, ${#failed[@]} failed, ${#crashed[@]} crashed or timed out" \
    | tee -a "$out/summary.txt"
  [ ${#failed[@]} -eq 0 ] || echo "  failed: ${failed[*]}" | tee -a "$out/summary.txt"
  [ ${#crashed[@]} -eq 0 ] || echo "  crashed: ${crashed[*]}" | tee -a "$out/summary.txt"
  "$here/run/ampjit-cuda-tests" > "$out/cuda-compile-tests.log" 2>&1
  echo "cuda compile tests: exit $?" | tee -a "$out/summary.txt"
}

run_bench() {
  local model=$1
  timeout 560 "$here/run/ampjit-bench" --model "$model" --levels O0,O1,O2 --dtypes f16,bf16 \
    --peer-compile --peer-script "$here/bench/torch_peers.py" >> "$out/bench.jsonl" 2>> "$out/bench.log"
  echo "bench $model: exit $?" | tee -a "$out/summary.txt"
  tail -n 1 "$out/bench.jsonl" >> "$out/summary.txt"
}

run_defer_ab() {
  local model=$1 mode
  for mode in on off; do
    timeout 280 "$here/run/ampjit-bench" --model "$model" --levels O1,O2 --dtypes f16 --no-peer \
      --defer-updates "$mode" >> "$out/defer-ab.jsonl" 2>> "$out/bench.log"
    echo "defer-ab $model $mode: exit $?" | tee -a "$out/summary.txt"
    tail -n 1 "$out/defer-ab.jsonl" >> "$out/summary.txt"
  done
}

is_stage() { [ "$1" = tests ] || [ "$1" = bench ] || [ "$1" = defer-ab ]; }

[ $# -gt 0 ] || set -- tests bench classifier
while [ $# -gt 0 ]; do
  case $1 in
    tests) run_tests; shift ;;
    bench) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_bench "$1"; shift; done ;;
    defer-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_defer_ab "$1"; shift; done ;;
    *) echo "run.sh: unknown stage '$1' (tests, bench MODEL..., defer-ab MODEL...)" | tee -a "$out/summary.txt"
       exit 2 ;;
  esac
done
RUN
chmod +x gpu-bundle/run.sh
du -sh gpu-bundle
