#!/usr/bin/env bash
# Packs what the GPU machine needs to check and measure the CUDA backend
# (../shared/GPU.md): the GPU tests, the benchmark, the main job and the
# PyTorch peer script, stripped and xz-compressed into gpu-bundle/ (git
# ignores it) with gpu-bundle/run.sh, which runs there and writes its logs
# to $OUT. With the device tool: carry ["gpu-bundle"], command
# `bash gpu-bundle/run.sh` (then `bash gpu-bundle/run.sh bench mlp9`, `... bench resnet50`,
# `... defer-ab mlp9`, `... priority-ab mlp9`, `... side-ab resnet50`, `... reserve-ab mlp9`, `... overlap-ab mlp9`,
# `... speculate-ab mlp9 bench-best mlp9` (the fastest variant with the peers, in the same call),
# `... timeline mlp9`: one device command may run 600 s). Build first (scripts/run-tests.sh or ninja in build/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}"
[ -x "$build/bin/ampjit-gpu-tests" ] || { echo "no $build/bin/ampjit-gpu-tests: build with CUDA first" >&2; exit 1; }

rm -rf gpu-bundle
mkdir -p gpu-bundle/bin gpu-bundle/bench
for binary in ampjit-gpu-tests ampjit-bench ampjit-train; do
  strip -o "gpu-bundle/bin/$binary" "$build/bin/$binary"
  xz -9 -T0 "gpu-bundle/bin/$binary"
done
# The benchmark with its symbols, for a backtrace (the crash stage).
xz -T0 -6 -c "$build/bin/ampjit-bench" > gpu-bundle/ampjit-bench-debug.xz
tar -cJf gpu-bundle/cuda-include.tar.xz -C /usr/local/cuda/include .
cp bench/peers/torch_peers.py bench/peers/torch_graph_peer.py gpu-bundle/bench/
git rev-parse HEAD > gpu-bundle/COMMIT

cat > gpu-bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine. Stages, in the order given (default: tests bench classifier):
#   probe           the GPU, the driver, PyTorch, and where the CUDA libraries and headers are
#   tests [JOBS]    every GPU test in its own process, JOBS at a time (default 6; a crash costs
#                   one test), failures rerun alone; stops starting tests after TESTS_BUDGET_S (150)
#   bench MODEL...  ampjit-bench for the models (classifier, mlp9, resnet50) with the peers;
#                   BENCH_ARGS replaces the default "--levels O0,O1,O2 --dtypes f16,bf16 --peer-compile",
#                   BENCH_TIMEOUT_S (560) bounds each model
#   profile MODEL LEVELS  one warm step per level launch by launch (AMPJIT_PROFILE), no peers
#   crash MODEL LEVELS    the benchmark alone, and under cuda-gdb if it dies of a signal
#   train           the main job (ampjit-train) at O2 f16 on synthetic digits, and at O1
#                   with AdamW, a cosine schedule and clipping
#   defer-ab MODEL...  O1/O2 f16 with the optimizer update deferred into the next step and not,
#                   no peers: what deferring buys (TraceOptions::defer_updates)
#   priority-ab MODEL...  O1/O2 f16, deferred, with the side stream at a lower priority than the
#                   step and with both equal (AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES=1), no peers
#   vector-ab MODEL...  O1/O2 f16 with SGD and with AdamW (--optimizer adamw), each with the
#                   16-byte update kernels and element by element (AMPJIT_CUDA_VECTOR_UPDATES=0), no
#                   peers, one process each
#   side-ab MODEL...  O1/O2 f16 with the plan side steps (weight gradients, large bias gradients) on
#                   the side stream and in line (AMPJIT_CUDA_SIDE_STEPS_IN_LINE=1), no peers
#   reserve-ab MODEL...  O1 f16 with 0, 16, 32 and 48 SMs that GEMMs beside the deferred update
#                   leave to it (AMPJIT_CUDA_GEMM_SM_RESERVE), no peers, one process each
#   overlap-ab MODEL...  O1 f16 with the side stream's overlaps as they are, with the deferred update
#                   in line (AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE=1), with the finiteness check in line
#                   (AMPJIT_CUDA_FINITE_CHECK_IN_LINE=1), and with both, each with the evict-first
#                   hints and without (AMPJIT_CUDA_CACHE_HINTS=0), no peers
#   speculate-ab MODEL...  O1 and O2 f16 with the update deferred, folded into the
#                   weight gradients' GEMMs (AMPJIT_CUDA_GEMM_FOLDED_UPDATE=1) with 0 and 16 SMs left
#                   to the rest, and speculative (AMPJIT_CUDA_SPECULATIVE_UPDATE=1) with 0 and 16
#                   SMs that GEMMs beside it leave to it (AMPJIT_CUDA_GEMM_SM_RESERVE); folded and
#                   deferred also with GEMM algorithms chosen by timing (AMPJIT_CUDA_GEMM_TUNING=1)
#                   (folded-16-tuned: the check after each folded update held to the 16 SMs),
#                   folded-0-tuned32 with 32 candidates asked of the heuristic instead of 8
#                   (AMPJIT_CUDA_GEMM_TUNING_CANDIDATES); no peers, one process each;
#                   SPECULATE_VARIANTS replaces the list (folded-0-tuned is the backend's
#                   default since 2026-11-27)
#   bench-best MODEL...  bench (BENCH_ARGS, default "--levels O1,O2 --dtypes f16 --peer-compile")
#                   under the switches of the variant speculate-ab found fastest for the model
#                   (its fastest level), in the same call: no second machine start
#   timeline MODEL...  O1 f16, one replayed step with each launch stamped on its stream
#                   (AMPJIT_TIMELINE): deferred, folded (and with GEMM tuning: the defaults), speculative with 0 and 16 SMs left to it,
#                   with 16 SMs left to the deferred update, and with the update in line, no peers;
#                   timeline-MODEL-VARIANT.jsonl in timelines-MODEL.tar.gz, summaries in summary.txt
# speculate-ab and bench also write a "step parity:" line per configuration to summary.txt: the
# median of its odd and of its even timed steps. A speculating backend replays two graphs in turn
# (the same work on the other buffers: EmulatedBackendTest.ASpeculatingStepsTwoGraphsDoTheSameWork...).
# mlp9's fastest step lies up to 1.3 ms under its median on both cards, with one graph (deferred,
# H100 2026-11-26) as with two (H200 2026-11-27); the step lists say whether that is a parity,
# a trend (clocks) or a few odd steps.
# Device time is short: each stage is bounded (speculate-ab and timeline by STAGE_BUDGET_S, 240 s each), and every result is appended as it comes, so a
# command stopped at its limit still returns what finished. Logs, JSON and summary.txt go to $OUT.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out" "$here/run"
# PyTorch, which the benchmark starts for its peers, loads the cuDNN and cuBLAS
# it was built with; the folders put first below for ampjit's binaries must
# not reach it (on 2026-11-26 they made it load the image's cuDNN 9.14 instead
# of its own 9.19). The benchmark finds this python3 first on PATH.
peer_library_path=${LD_LIBRARY_PATH:-}
real_python=$(command -v python3 || true)
if [ -n "$real_python" ]; then
  mkdir -p "$here/run/peer-bin"
  printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\nexec %q "$@"\n' "$peer_library_path" "$real_python" \
    > "$here/run/peer-bin/python3"
  chmod +x "$here/run/peer-bin/python3"
  export PATH="$here/run/peer-bin:$PATH"
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export AMPJIT_KERNEL_CACHE="$here/run/kernel-cache"
stamp() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$out/summary.txt"; }
for compressed in "$here"/bin/*.xz; do
  binary="$here/run/$(basename "$compressed" .xz)"
  [ -x "$binary" ] || { xz -T0 -dc "$compressed" > "$binary" && chmod +x "$binary"; }
done
echo "commit $(cat "$here/COMMIT")" | tee -a "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$out/summary.txt"

# The SM clock, power and the driver's clock-event reasons every 200 ms, into
# clocks.csv, summarised at exit over the samples at >= 90% utilization. A
# replayed mlp9 step's GEMMs ran 15% slower than the same GEMMs launch by
# launch (2026-11-29): this says whether the card lowers its clock under
# sustained load. The stamps' times line the samples up with the stages.
clock_log_pid=""
summarize_clocks() {
  [ -n "$clock_log_pid" ] || return 0
  kill "$clock_log_pid" 2> /dev/null || true
  wait "$clock_log_pid" 2> /dev/null || true
  local busy="$out/clocks-busy.tmp"
  awk -F', *' '$2 + 0 >= 90' "$out/clocks.csv" > "$busy"
  if [ ! -s "$busy" ]; then
    echo "clocks: no sample at >= 90% utilization" | tee -a "$out/summary.txt"
  else
    column_stats() {
      cut -d, -f"$1" "$busy" | tr -d ' ' | sort -n |
        awk '{ v[NR] = $1 } END { printf "min %s, median %s, max %s", v[1], v[int((NR + 1) / 2)], v[NR] }'
    }
    echo "clocks at >= 90% utilization ($(wc -l < "$busy") samples): SM MHz $(column_stats 3); memory MHz" \
      "$(column_stats 4); power W $(column_stats 5); temperature C $(column_stats 6)" | tee -a "$out/summary.txt"
    if [ "$(head -n 1 "$busy" | awk -F, '{ print NF }')" -ge 7 ]; then
      echo "clock event reasons at >= 90% utilization (count, mask): $(cut -d, -f7 "$busy" | tr -d ' ' | sort |
        uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? "; " : ""), $1, $2 }')" | tee -a "$out/summary.txt"
    fi
  fi
  rm -f "$busy"
}
for clock_fields in timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
                    timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu; do
  if nvidia-smi --query-gpu="$clock_fields" --format=csv,noheader,nounits > /dev/null 2>&1; then
    nvidia-smi --query-gpu="$clock_fields" --format=csv,noheader,nounits -lms 200 > "$out/clocks.csv" 2> /dev/null &
    clock_log_pid=$!
    trap summarize_clocks EXIT
    break
  fi
done

# The binaries were linked on the build machine; this image may keep cuBLASLt, cuDNN or NVRTC
# elsewhere (PyTorch's wheels carry them). Find each missing library and put its folder first.
resolve_libraries() {
  local binary missing lib found
  for binary in "$here"/run/ampjit-*; do
    for lib in $(ldd "$binary" | awk '/not found/ {print $1}'); do
      found=$(find /usr/local /opt /usr/lib -name "$lib" \( -type f -o -type l \) 2>/dev/null | head -n 1)
      if [ -n "$found" ]; then
        export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
        echo "found $lib at $found" | tee -a "$out/summary.txt"
      fi
    done
  done
  for binary in "$here"/run/ampjit-*; do
    missing=$(ldd "$binary" | grep 'not found' || true)
    [ -z "$missing" ] || echo "$(basename "$binary") misses: $missing" | tee -a "$out/summary.txt"
  done
  # Generated kernels include cuda_fp16.h and cuda_bf16.h from /usr/local/cuda/include.
  if [ ! -f /usr/local/cuda/include/cuda_fp16.h ] && [ -f "$here/cuda-include.tar.xz" ]; then
    mkdir -p /usr/local/cuda/include && tar -xJf "$here/cuda-include.tar.xz" -C /usr/local/cuda/include \
      && echo "unpacked the carried CUDA headers into /usr/local/cuda/include" | tee -a "$out/summary.txt"
  fi
}
resolve_libraries

run_probe() {
  {
    nvidia-smi
    python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())'
    ls -la /usr/local/cuda/ /usr/local/cuda/lib64/ 2>&1 | head -40
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for binary in "$here"/run/ampjit-*; do echo "== $binary"; ldd "$binary"; done
  } > "$out/probe.log" 2>&1
  stamp "probe done"
}

run_one_test() { # name -> appends its log; prints "status name"
  local test=$1 log status
  log=$(timeout 120 "$here/run/ampjit-gpu-tests" --gtest_filter="$test" 2>&1)
  status=$?
  if [ $status -eq 0 ] && grep -q '^\[  SKIPPED \]' <<< "$log"; then status=skip; fi
  printf '=== %s (exit %s)\n%s\n' "$test" "$status" "$log" > "$here/run/tests/$test.log"
  echo "$status $test"
}
export -f run_one_test
export here

run_tests() {
  local jobs=${1:-6} budget=${TESTS_BUDGET_S:-150} deadline results passed skipped failed crashed
  mkdir -p "$here/run/tests"
  deadline=$((SECONDS + budget))
  "$here/run/ampjit-gpu-tests" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}' \
    > "$here/run/test-names"
  # A fresh process per test; stop starting new ones once the budget is spent.
  results=$(timeout "$budget" xargs -P "$jobs" -I{} bash -c 'run_one_test "$@"' _ {} < "$here/run/test-names")
  # Failures and crashes alone once more: a test that passes alone only failed under load.
  local again=()
  while read -r status test; do
    case $status in 0|skip) ;; *) again+=("$test") ;; esac
  done <<< "$results"
  local alone=""
  for test in "${again[@]}"; do
    [ $SECONDS -lt $((deadline + 60)) ] || break
    alone+="$(run_one_test "$test")"$'\n'
    cp "$here/run/tests/$test.log" "$here/run/tests/$test.alone.log"
  done
  cat "$here"/run/tests/*.log > "$out/gpu-tests.log" 2>/dev/null
  passed=$(grep -c '^0 ' <<< "$results"); skipped=$(grep -c '^skip ' <<< "$results")
  failed=$(awk '$1 == 1 {print $2}' <<< "$results" | tr '\n' ' ')
  crashed=$(awk '$1 != 0 && $1 != 1 && $1 != "skip" {print $2 "(" $1 ")"}' <<< "$results" | tr '\n' ' ')
  stamp "gpu tests: $(wc -l < "$here/run/test-names") listed, $(grep -c . <<< "$results") ran: $passed passed, $skipped skipped"
  [ -z "$failed" ] || stamp "  failed: $failed"
  [ -z "$crashed" ] || stamp "  crashed or timed out: $crashed"
  [ -z "$alone" ] || stamp "  alone again: $(tr '\n' ' ' <<< "$alone")"
}

# Each GEMM tuning entry the kernel cache gained, as one summary line: the list length asked
# for, the problem, the candidates offered, the choice and every candidate's milliseconds
# (the finalists' trials, the others' screen). The device tool returns few files: these are
# the per-algorithm times of mlp9's GEMMs, folded ones included.
report_gemm_tuning() {
  local entry
  for entry in "$here"/run/kernel-cache/*.gemm; do
    [ -f "$entry" ] || continue
    grep -qxF "$entry" "$here/run/gemm-reported.txt" 2>/dev/null && continue
    echo "$entry" >> "$here/run/gemm-reported.txt"
    awk '/^key / { n = split(substr($0, 5), part, " [|] "); printf "gemm tuning: %s | %s |", part[n - 1], part[n] }
         /^(candidates|choice) / { printf " %s", $0 }
         /^milliseconds/ { print " " $0 }' "$entry" >> "$out/summary.txt"
  done
}

report_step_parity() { # LABEL LINES: per configuration, the median of its odd and of its even timed steps:
  # a speculating backend alternates two captured graphs, so a gap between them is one graph's
  printf '%s\n' "$2" | awk -v label="$1" '
    function median(list, n,   i, j, swap) { # as ampjit-bench takes it: the upper middle of an even count
      for (i = 2; i <= n; ++i)
        for (j = i; j > 1 && list[j - 1] > list[j]; --j) { swap = list[j]; list[j] = list[j - 1]; list[j - 1] = swap }
      return list[int(n / 2) + 1]
    }
    function field(name,   found) {
      found = match($0, "\"" name "\":\"[^\"]*\"")
      return found ? substr($0, RSTART + length(name) + 4, RLENGTH - length(name) - 5) : "?"
    }
    match($0, /"ms_per_step":\[[^]]*\]/) {
      count = split(substr($0, RSTART + 15, RLENGTH - 16), times, ",")
      if (count < 2) next
      split("", odd); split("", even); odds = evens = 0
      for (i = 1; i <= count; ++i) if (i % 2) odd[++odds] = times[i] + 0; else even[++evens] = times[i] + 0
      printf "step parity: %s %s %s: odd steps %.3f ms (%d), even steps %.3f ms (%d)\n", label, field("level"),
        field("dtype"), median(odd, odds), odds, median(even, evens), evens
    }' >> "$out/summary.txt"
}

run_bench() {
  local model=$1 earlier
  earlier=$(cat "$out/bench.jsonl" 2>/dev/null | wc -l)
  timeout "${BENCH_TIMEOUT_S:-560}" "$here/run/ampjit-bench" --model "$model" --backend cuda \
    ${BENCH_ARGS:---levels O0,O1,O2 --dtypes f16,bf16 --peer-compile} \
    --peer-script "$here/bench/torch_peers.py" >> "$out/bench.jsonl" 2>> "$out/bench.log"
  stamp "bench $model: exit $?"
  tail -n 1 "$out/bench.jsonl" >> "$out/summary.txt"
  report_step_parity "$model bench" "$(tail -n +$((earlier + 1)) "$out/bench.jsonl")"
  report_gemm_tuning
}

run_defer_ab() {
  local model=$1 mode
  for mode in on off; do
    timeout 280 "$here/run/ampjit-bench" --model "$model" --backend cuda --levels O1,O2 --dtypes f16 --no-peer \
      --defer-updates "$mode" >> "$out/defer-ab.jsonl" 2>> "$out/bench.log"
    stamp "defer-ab $model $mode: exit $?"
    tail -n 1 "$out/defer-ab.jsonl" >> "$out/summary.txt"
  done
}

run_priority_ab() {
  local model=$1 equal
  for equal in 0 1; do
    AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES=$equal timeout 280 "$here/run/ampjit-bench" --model "$model" --backend cuda \
      --levels O1,O2 --dtypes f16 --no-peer --defer-updates on >> "$out/priority-ab.jsonl" 2>> "$out/bench.log"
    stamp "priority-ab $model equal=$equal: exit $?"
    tail -n 1 "$out/priority-ab.jsonl" >> "$out/summary.txt"
  done
}

run_side_ab() { # MODEL: side steps beside the backward and in line (AMPJIT_CUDA_SIDE_STEPS_IN_LINE)
  local model=$1 inline
  for inline in 0 1; do
    AMPJIT_CUDA_SIDE_STEPS_IN_LINE=$inline timeout 280 "$here/run/ampjit-bench" --model "$model" --backend cuda \
      --levels O1,O2 --dtypes f16 --no-peer >> "$out/side-ab.jsonl" 2>> "$out/bench.log"
    stamp "side-ab $model in-line=$inline: exit $?"
    tail -n 1 "$out/side-ab.jsonl" >> "$out/summary.txt"
  done
}

run_vector_ab() { # MODEL: SGD and AdamW with the 16-byte update kernels and without (AMPJIT_CUDA_VECTOR_UPDATES)
  local model=$1 optimizer vector
  for optimizer in sgd adamw; do
    for vector in 1 0; do
      AMPJIT_CUDA_VECTOR_UPDATES=$vector timeout 200 "$here/run/ampjit-bench" --model "$model" --backend cuda \
        --levels O1,O2 --dtypes f16 --optimizer $optimizer --no-peer --no-fresh-process \
        >> "$out/vector-ab.jsonl" 2>> "$out/bench.log"
      stamp "vector-ab $model $optimizer vector=$vector: exit $?"
      tail -n 1 "$out/vector-ab.jsonl" >> "$out/summary.txt"
    done
  done
}

run_reserve_ab() { # MODEL: GEMMs beside the deferred update leaving it SMs (AMPJIT_CUDA_GEMM_SM_RESERVE)
  local model=$1 reserve
  for reserve in 0 16 32 48; do
    AMPJIT_CUDA_GEMM_SM_RESERVE=$reserve timeout 120 "$here/run/ampjit-bench" --model "$model" --backend cuda \
      --levels O1 --dtypes f16 --no-peer --no-fresh-process >> "$out/reserve-ab.jsonl" 2>> "$out/bench.log"
    stamp "reserve-ab $model reserve=$reserve: exit $?"
    tail -n 1 "$out/reserve-ab.jsonl" >> "$out/summary.txt"
  done
}

run_overlap_ab() { # MODEL: the deferred update and the finiteness check on the side stream or in line,
  # each with the evict-first hints and without
  local model=$1 update check hints
  for update in 0 1; do
    for check in 0 1; do
      for hints in 1 0; do
        AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE=$update AMPJIT_CUDA_FINITE_CHECK_IN_LINE=$check \
          AMPJIT_CUDA_CACHE_HINTS=$hints timeout 120 "$here/run/ampjit-bench" --model "$model" --backend cuda \
          --levels O1 --dtypes f16 --no-peer --no-fresh-process >> "$out/overlap-ab.jsonl" 2>> "$out/bench.log"
        stamp "overlap-ab $model update-in-line=$update check-in-line=$check cache-hints=$hints: exit $?"
        tail -n 1 "$out/overlap-ab.jsonl" >> "$out/summary.txt"
      done
    done
  done
}

# Seconds a variant of an A/B stage may still run: at most `cap`, and none once the stage's
# budget (STAGE_BUDGET_S, 240 s from `start`) is spent, so one hung variant cannot take the
# call's time from the stages after it.
variant_seconds() {
  local start=$1 cap=$2 left
  left=$((start + ${STAGE_BUDGET_S:-240} - SECONDS))
  [ $left -gt $cap ] && left=$cap
  echo $((left > 0 ? left : 0))
}

# The switches of one speculate-ab variant, as NAME=VALUE words: deferred, folded-N or
# speculative-N (N SMs left beside the GEMMs), each with "-tuned" for GEMM tuning, or
# "-tunedC" for tuning that asks cuBLASLt's heuristic for C candidates instead of 8.
variant_switches() {
  local variant=$1 base=${1%-tuned*} speculate=1 fold=0 reserve tune=0 candidates
  [ "$base" != "$variant" ] && tune=1
  candidates=${variant#"$base"}
  candidates=${candidates#-tuned}
  reserve=${base##*-}
  [ "$base" = deferred ] && speculate=0 reserve=0
  case "$base" in folded*) fold=1 ;; esac
  echo "AMPJIT_CUDA_SPECULATIVE_UPDATE=$speculate AMPJIT_CUDA_GEMM_FOLDED_UPDATE=$fold" \
    "AMPJIT_CUDA_GEMM_SM_RESERVE=$reserve AMPJIT_CUDA_GEMM_TUNING=$tune" \
    "AMPJIT_CUDA_GEMM_TUNING_CANDIDATES=${candidates:-8}"
}

run_speculate_ab() { # MODEL: the update deferred, folded into the GEMMs, or speculative beside GEMMs leaving
  # it 0 or 16 SMs; "-tuned": GEMM algorithms chosen by timing (AMPJIT_CUDA_GEMM_TUNING), "-tuned32"
  # from 32 candidates; SPECULATE_VARIANTS replaces the list
  local model=$1 variant status start=$SECONDS seconds
  for variant in ${SPECULATE_VARIANTS:-deferred folded-0 folded-0-tuned folded-0-tuned32 deferred-tuned speculative-16 speculative-0 folded-16-tuned}; do
    local lines
    seconds=$(variant_seconds $start 90)
    [ "$seconds" -gt 0 ] || { stamp "speculate-ab $model: budget spent before $variant"; break; }
    lines=$(env $(variant_switches "$variant") timeout "$seconds" \
      "$here/run/ampjit-bench" --model "$model" --backend cuda --levels O1,O2 --dtypes f16 --no-peer \
      --no-fresh-process 2>> "$out/bench.log")
    status=$?
    printf '%s\n' "$lines" >> "$out/speculate-ab.jsonl"
    stamp "speculate-ab $model $variant: exit $status"
    printf '%s\n' "$lines" | tail -n 2 >> "$out/summary.txt"
    report_step_parity "$model $variant" "$lines"
    # For bench-best: the variant and its levels' medians, where it finished.
    [ $status -eq 0 ] && echo "$model $variant $(grep -o '"ms_per_step_median":[0-9.]*' <<< "$lines" |
      cut -d: -f2 | tr '\n' ' ')" >> "$here/run/variants.txt"
    report_gemm_tuning
  done
}

run_bench_best() { # MODEL: bench with the peers under the switches of speculate-ab's fastest variant
  local model=$1 best
  best=$(awk -v model="$model" '$1 == model && NF > 2 {
           fastest = $3; for (i = 4; i <= NF; ++i) if ($i < fastest) fastest = $i
           if (best == "" || fastest < bestMs) { best = $2; bestMs = fastest } }
         END { print best }' "$here/run/variants.txt" 2>/dev/null)
  [ -n "$best" ] || { stamp "bench-best $model: no speculate-ab result; the defaults"; best=deferred; }
  stamp "bench-best $model: $best ($(variant_switches "$best"))"
  (
    export $(variant_switches "$best") BENCH_ARGS="${BENCH_ARGS:---levels O1,O2 --dtypes f16 --peer-compile}"
    run_bench "$model"
  )
}

run_timeline() { # MODEL: when each launch of a replayed step ran, on which stream (AMPJIT_TIMELINE)
  local model=$1 variant start=$SECONDS seconds
  for variant in deferred folded folded-tuned speculative speculative-reserve-16 reserve-16 update-in-line; do
    local reserve=0 inline=0 speculate=0 fold=0 tune=0
    seconds=$(variant_seconds $start 60)
    [ "$seconds" -gt 0 ] || { stamp "timeline $model: budget spent before $variant"; break; }
    case "$variant" in *reserve-16) reserve=16 ;; esac
    case "$variant" in speculative*|folded*) speculate=1 ;; esac
    case "$variant" in folded*) fold=1 ;; esac
    [ "$variant" = folded-tuned ] && tune=1
    [ "$variant" = update-in-line ] && inline=1
    AMPJIT_TIMELINE="$out/timeline-$model-$variant.jsonl" AMPJIT_CUDA_GEMM_SM_RESERVE=$reserve \
      AMPJIT_CUDA_SPECULATIVE_UPDATE=$speculate AMPJIT_CUDA_GEMM_FOLDED_UPDATE=$fold AMPJIT_CUDA_GEMM_TUNING=$tune \
      AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE=$inline timeout "$seconds" "$here/run/ampjit-bench" --model "$model" \
      --backend cuda --levels O1 --dtypes f16 --no-peer --no-fresh-process --steps 10 --warmup 3 \
      >> "$out/timeline-runs.jsonl" 2>> "$out/bench.log"
    stamp "timeline $model $variant: exit $?"
    grep timeline_launches "$out/timeline-$model-$variant.jsonl" | tail -n 1 >> "$out/summary.txt"
  done
  # The device tool returns at most 8 files from $OUT: the variants' timelines travel as one.
  (cd "$out" && tar -czf "timelines-$model.tar.gz" timeline-"$model"-*.jsonl timeline-runs.jsonl &&
    rm -f timeline-"$model"-*.jsonl timeline-runs.jsonl)
}

run_train() { # the main job on the GPU, on synthetic digits (the machine has no dataset)
  timeout 90 "$here/run/ampjit-train" --backend cuda --data synthetic --amp O2 --dtype f16 --epochs 3 --json \
    > "$out/train.jsonl" 2>&1
  stamp "train: exit $?"
  tail -n 1 "$out/train.jsonl" >> "$out/summary.txt"
  # AMP's usual recipe: AdamW, the lr written from the host before every
  # replayed step (warmup, then cosine), clipping after unscale_ in the step.
  timeout 90 "$here/run/ampjit-train" --backend cuda --data synthetic --amp O1 --dtype f16 --epochs 3 --json \
    --optimizer adamw --schedule cosine --warmup-steps 10 --clip-grad-norm 1.0 > "$out/train-adamw-cosine-clip.jsonl" 2>&1
  stamp "train (adamw, cosine, clipping): exit $?"
  tail -n 1 "$out/train-adamw-cosine-clip.jsonl" >> "$out/summary.txt"
}

run_profile() { # MODEL LEVELS: one warm step of each level's plan, launch by launch (AMPJIT_PROFILE)
  local model=$1 levels=$2
  AMPJIT_PROFILE="$out/profile-$model.jsonl" timeout 150 "$here/run/ampjit-bench" --model "$model" --backend cuda \
    --levels "$levels" --dtypes f16 --no-peer --no-fresh-process --steps 10 --warmup 3 >> "$out/profile-runs.jsonl" 2>> "$out/bench.log"
  stamp "profile $model $levels: exit $?"
}

run_crash() { # MODEL LEVELS: the benchmark alone; if it dies of a signal, again under cuda-gdb for a backtrace
  local model=$1 levels=$2 status
  timeout 100 "$here/run/ampjit-bench" --model "$model" --backend cuda --levels "$levels" --no-peer \
    --no-fresh-process --steps 10 --warmup 3 >> "$out/crash.log" 2>&1
  status=$?
  stamp "crash check $model $levels: exit $status"
  if [ $status -gt 128 ] && [ $status -ne 137 ] && command -v cuda-gdb > /dev/null; then
    local debug="$here/run/ampjit-bench"
    [ -f "$here/ampjit-bench-debug.xz" ] && { xz -T0 -dc "$here/ampjit-bench-debug.xz" > "$here/run/ampjit-bench-debug"; chmod +x "$here/run/ampjit-bench-debug"; debug="$here/run/ampjit-bench-debug"; }
    timeout 150 cuda-gdb -batch -ex run -ex bt -ex "info registers rip" --args "$debug" --model "$model" \
      --backend cuda --levels "$levels" --no-peer --no-fresh-process --steps 10 --warmup 3 >> "$out/crash.log" 2>&1
    stamp "cuda-gdb: exit $?"
  fi
}

is_stage() { [ "$1" = profile ] || [ "$1" = crash ] || [ "$1" = train ] || [ "$1" = probe ] || [ "$1" = tests ] || [ "$1" = bench ] || [ "$1" = defer-ab ] || [ "$1" = priority-ab ] || [ "$1" = side-ab ] || [ "$1" = vector-ab ] || [ "$1" = reserve-ab ] || [ "$1" = overlap-ab ] || [ "$1" = speculate-ab ] || [ "$1" = bench-best ] || [ "$1" = timeline ]; }

[ $# -gt 0 ] || set -- tests bench classifier
while [ $# -gt 0 ]; do
  case $1 in
    probe) run_probe; shift ;;
    train) run_train; shift ;;
    profile) run_profile "$2" "$3"; shift 3 ;;
    crash) run_crash "$2" "$3"; shift 3 ;;
    tests) shift; if [[ ${1:-} =~ ^[0-9]+$ ]]; then run_tests "$1"; shift; else run_tests; fi ;;
    bench) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_bench "$1"; shift; done ;;
    defer-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_defer_ab "$1"; shift; done ;;
    priority-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_priority_ab "$1"; shift; done ;;
    side-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_side_ab "$1"; shift; done ;;
    vector-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_vector_ab "$1"; shift; done ;;
    reserve-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_reserve_ab "$1"; shift; done ;;
    overlap-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_overlap_ab "$1"; shift; done ;;
    speculate-ab) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_speculate_ab "$1"; shift; done ;;
    bench-best) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_bench_best "$1"; shift; done ;;
    timeline) shift; while [ $# -gt 0 ] && ! is_stage "$1"; do run_timeline "$1"; shift; done ;;
    *) echo "run.sh: unknown stage '$1' (probe, profile, crash, train, tests [JOBS], bench MODEL..., defer-ab MODEL..., priority-ab MODEL..., side-ab MODEL..., vector-ab MODEL..., reserve-ab MODEL..., overlap-ab MODEL..., speculate-ab MODEL..., bench-best MODEL..., timeline MODEL...)" | tee -a "$out/summary.txt"
       exit 2 ;;
  esac
done
RUN
chmod +x gpu-bundle/run.sh
du -sh gpu-bundle
