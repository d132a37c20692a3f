#!/usr/bin/env bash
# The GPU bundle's run.sh (scripts/gpu-bundle.sh writes it) without a GPU: it
# parses, each speculate-ab variant sets the switches its name says, each run's
# odd and even steps are summarised apart, a variant
# that fails or runs past the stage's budget is left out, and bench-best runs
# the benchmark under the switches of the variant whose fastest level was
# fastest. A device session has minutes: a mistake here would cost one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_gpu_bundle: $*" >&2; exit 1; }

sed -n "/^cat > gpu-bundle\/run.sh <<'RUN'/,/^RUN$/p" "$here/scripts/gpu-bundle.sh" | sed '1d;$d' > "$work/run.sh"
[ -s "$work/run.sh" ] || fail "no run.sh in scripts/gpu-bundle.sh"
bash -n "$work/run.sh" || fail "run.sh does not parse"

# A benchmark that prints each level's median from the switches it was given:
# folding saves 1.5 ms, tuning 0.3 ms more, 32 candidates 0.1 ms more, O2 is
# 0.05 ms slower; a reserve of 16 SMs crashes; tuning without folding hangs.
mkdir -p "$work/run" "$work/out"
cat > "$work/run/ampjit-bench" <<'BENCH'
#!/usr/bin/env bash
[ "$AMPJIT_CUDA_GEMM_SM_RESERVE" = 16 ] && exit 139
[ -n "${AMPJIT_TIMELINE:-}" ] && echo '{"timeline_launches":3}' > "$AMPJIT_TIMELINE"
[ "$AMPJIT_CUDA_GEMM_TUNING" = 1 ] && [ "$AMPJIT_CUDA_GEMM_FOLDED_UPDATE" = 0 ] && sleep 30
ms=$(awk -v fold="$AMPJIT_CUDA_GEMM_FOLDED_UPDATE" -v tune="$AMPJIT_CUDA_GEMM_TUNING" \
  -v wide="$([ "$AMPJIT_CUDA_GEMM_TUNING_CANDIDATES" = 32 ] && echo 1 || echo 0)" \
  'BEGIN { printf "%.2f", 13.5 - 1.5 * fold - 0.3 * tune - 0.1 * wide }')
switches="$AMPJIT_CUDA_SPECULATIVE_UPDATE$AMPJIT_CUDA_GEMM_FOLDED_UPDATE$AMPJIT_CUDA_GEMM_SM_RESERVE$AMPJIT_CUDA_GEMM_TUNING/$AMPJIT_CUDA_GEMM_TUNING_CANDIDATES"
echo "{\"level\":\"O1\",\"ms_per_step_median\":$ms,\"switches\":\"$switches\",\"args\":\"$*\",\"dtype\":\"f16\",\"ms_per_step\":[12.5,10.75,12.25,10.5,12.75]}"
echo "{\"level\":\"O2\",\"ms_per_step_median\":$(awk -v ms="$ms" 'BEGIN { printf "%.2f", ms + 0.05 }')}"
BENCH
chmod +x "$work/run/ampjit-bench"

# Two tuning entries in the kernel cache, as GemmTuning.cpp writes them: each
# becomes one summary line, once.
mkdir -p "$work/run/kernel-cache"
for k in 8 32; do
  printf 'ampjit-gemm-tuning 1\nkey sm_90 sms=132 l2=52428800 bus=6144 cublasLt=130000 | up to %s candidates | f16[2048x8192] x f16[2048x8192] -> f32 added to f32 in f32 AtB align=64 none folded-update m=8192 n=8192 k=2048 calls=1 workspace=33554432\ncandidates %s\nchoice 3\nmilliseconds 0.57 0.6 refused 0.52\nchecksum 0123456789abcdef\n' \
    "$k" "$k" > "$work/run/kernel-cache/entry$k.gemm"
done

# The stages' functions alone, as run.sh defines them.
functions=$(sed -n '/^report_gemm_tuning() {/,/^}/p;/^report_step_parity() {/,/^}/p;/^variant_seconds() {/,/^}/p;/^variant_switches() {/,/^}/p;/^run_speculate_ab() {/,/^}/p;/^run_bench_best() {/,/^}/p;/^run_bench() {/,/^}/p;/^run_timeline() {/,/^}/p' "$work/run.sh")
here="$work" out="$work/out" STAGE_BUDGET_S=8 bash -c "
  stamp() { echo \"\$*\" >> \"\$out/summary.txt\"; }
  $functions
  run_speculate_ab mlp9
  run_bench_best mlp9" > /dev/null 2>&1 || fail "the stages failed"

for variant in deferred folded-0 folded-0-tuned folded-0-tuned32; do
  grep -q "^mlp9 $variant " "$work/run/variants.txt" || fail "no medians recorded for $variant"
done
! grep -q "speculative-16\|folded-16" "$work/run/variants.txt" || fail "a crashed variant's medians were recorded"
grep -q "budget spent before" "$work/out/summary.txt" || fail "the hung variant did not stop the stage at its budget"
[ "$(grep -c '^gemm tuning: ' "$work/out/summary.txt")" = 2 ] ||
  fail "not one summary line per tuning entry: $(grep '^gemm tuning: ' "$work/out/summary.txt")"
grep -qF 'gemm tuning: up to 32 candidates | f16[2048x8192] x f16[2048x8192] -> f32 added to f32 in f32 AtB align=64 none folded-update m=8192 n=8192 k=2048 calls=1 workspace=33554432 | candidates 32 choice 3 milliseconds 0.57 0.6 refused 0.52' \
  "$work/out/summary.txt" || fail "a tuning entry's summary line: $(grep '^gemm tuning: ' "$work/out/summary.txt")"
# Each configuration's odd and even steps apart (a speculating backend's two graphs), each median
# taken as ampjit-bench takes its own (the upper middle of an even count); O2 has no step times,
# so no line.
grep -qxF 'step parity: mlp9 folded-0-tuned O1 f16: odd steps 12.500 ms (3), even steps 10.750 ms (2)' \
  "$work/out/summary.txt" || fail "no step parity line for folded-0-tuned: $(grep '^step parity' "$work/out/summary.txt")"
grep -qxF 'step parity: mlp9 bench O1 f16: odd steps 12.500 ms (3), even steps 10.750 ms (2)' "$work/out/summary.txt" ||
  fail "no step parity line for bench-best's run: $(grep '^step parity' "$work/out/summary.txt")"
! grep -q '^step parity: .* O2 ' "$work/out/summary.txt" || fail "a step parity line without step times"
grep -q '"switches":"0000/8"' "$work/out/speculate-ab.jsonl" || fail "deferred: not every switch off"
grep -q '"switches":"1100/8"' "$work/out/speculate-ab.jsonl" || fail "folded-0: not speculative and folded"
grep -q '"switches":"1101/8"' "$work/out/speculate-ab.jsonl" || fail "folded-0-tuned: not folded and tuned"
grep -q '"switches":"1101/32"' "$work/out/speculate-ab.jsonl" || fail "folded-0-tuned32: not tuned from 32 candidates"
grep -q "bench-best mlp9: folded-0-tuned32 " "$work/out/summary.txt" || fail "bench-best did not pick folded-0-tuned32: $(cat "$work/out/summary.txt")"
grep -q '"switches":"1101/32".*--peer-compile' "$work/out/bench.jsonl" ||
  fail "bench-best did not run the peers under folded-0-tuned32's switches: $(cat "$work/out/bench.jsonl")"
# The timeline stage leaves its variants' timelines in one archive (the device
# tool returns at most 8 files), the two whose reserve crashes left out.
mkdir -p "$work/timeline-out"
here="$work" out="$work/timeline-out" STAGE_BUDGET_S=8 bash -c "
  stamp() { echo \"\$*\" >> \"\$out/summary.txt\"; }
  $functions
  run_timeline mlp9" > /dev/null 2>&1 || fail "the timeline stage failed"
[ -z "$(ls "$work/timeline-out" | grep -v '^summary.txt$\|^timelines-mlp9.tar.gz$\|^bench.log$')" ] ||
  fail "loose files beside the timelines' archive: $(ls "$work/timeline-out")"
[ -f "$work/timeline-out/timelines-mlp9.tar.gz" ] || fail "no timelines-mlp9.tar.gz: $(ls "$work/timeline-out")"
timelines=$(tar -tzf "$work/timeline-out/timelines-mlp9.tar.gz" | sort | tr '\n' ' ')
[ "$timelines" = "timeline-mlp9-deferred.jsonl timeline-mlp9-folded-tuned.jsonl timeline-mlp9-folded.jsonl \
timeline-mlp9-speculative.jsonl timeline-mlp9-update-in-line.jsonl timeline-runs.jsonl " ] ||
  fail "the timelines' archive holds: $timelines"
# The clock log's summary: only the samples at >= 90% utilization, each
# column's median, and the clock-event reasons counted by mask.
mkdir -p "$work/clocks-out"
cat > "$work/clocks-out/clocks.csv" <<'CLOCKS'
2026/12/02 00:10:00.000, 0, 1980, 2619, 90.10, 30, 0x0000000000000001
2026/12/02 00:10:00.200, 100, 1755, 2619, 699.50, 61, 0x0000000000000004
2026/12/02 00:10:00.400, 100, 1695, 2619, 700.20, 62, 0x0000000000000004
2026/12/02 00:10:00.600, 97, 1980, 2619, 650.00, 60, 0x0000000000000000
CLOCKS
clock_summary=$(out="$work/clocks-out" bash -c "
  sleep 30 & clock_log_pid=\$!
  $(sed -n '/^summarize_clocks() {/,/^}/p' "$work/run.sh")
  summarize_clocks" 2>&1) || fail "summarize_clocks failed: $clock_summary"
grep -qxF 'clocks at >= 90% utilization (3 samples): SM MHz min 1695, median 1755, max 1980; memory MHz min 2619, median 2619, max 2619; power W min 650.00, median 699.50, max 700.20; temperature C min 60, median 61, max 62' \
  <<<"$clock_summary" || fail "the clocks' summary: $clock_summary"
grep -qxF 'clock event reasons at >= 90% utilization (count, mask): 1 0x0000000000000000; 2 0x0000000000000004' \
  <<<"$clock_summary" || fail "the clock event reasons' summary: $clock_summary"
echo "check_gpu_bundle: run.sh parses; speculate-ab and bench-best pick and run the fastest variant;" \
  "tuning entries reach the summary once; timeline archives its timelines; the clock log is summarised"
