#!/usr/bin/env bash
# ampjit-bench prints one JSON object per configuration and a summary: every
# configuration ran compiled (one trace), has positive median and first-step
# times (in process and in a fresh process, with its GEMM tuning's cost) and names the AMPJIT_* variables
# it ran under, and the summary says why no peer ran on the CPU. With
# --optimizer, the step runs that optimizer (its losses are not SGD's) and
# the JSON says which; an unknown one is a usage error. Tiny sizes: this
# checks the tool, it measures nothing.
set -euo pipefail
bench=$1
output=$(AMPJIT_CUDA_CACHE_HINTS=0 "$bench" --backend cpu --model classifier,resnet18 --levels O0,O2 --dtypes bf16 --steps 3 --warmup 1 --batch-size 4)
echo "$output"
adamw=$("$bench" --backend cpu --model classifier --levels O2 --dtypes bf16 --optimizer adamw --steps 3 --warmup 1 \
  --batch-size 4 --no-fresh-process)
echo "$adamw"
if unknown=$("$bench" --optimizer lamb 2>&1); then
  echo "ampjit-bench accepted --optimizer lamb" >&2; exit 1
fi
grep -q "unknown optimizer 'lamb' (sgd, adam or adamw)" <<<"$unknown" || { echo "$unknown" >&2; exit 1; }
python3 - "$output" "$adamw" <<'PY'
import json, sys
lines = [json.loads(line) for line in sys.argv[1].splitlines() if line.strip()]
configs, summary = lines[:-1], lines[-1]
expected = {("classifier", "O0", "f32"), ("classifier", "O2", "bf16"), ("resnet18", "O0", "f32"), ("resnet18", "O2", "bf16")}
got = {(c["model"], c["level"], c["dtype"]) for c in configs}
assert got == expected, f"configurations {got}, expected {expected}"
for c in configs:
    assert c["traces"] == 1, c
    assert 0 < c["ms_per_step_min"] <= c["ms_per_step_median"] <= c["ms_per_step_max"], c
    # Every timed step, in order, to the microsecond.
    assert len(c["ms_per_step"]) == c["steps"] == 3, c
    step_times = sorted(c["ms_per_step"])
    assert all(abs(ms - exact) <= 0.0006 for ms, exact in
               zip(step_times, (c["ms_per_step_min"], c["ms_per_step_median"], c["ms_per_step_max"]))), c
    assert c["time_to_first_step_in_process_s"] > 0, c
    # On the CPU a call is the whole step.
    assert c["host_ms_per_call_median"] == c["ms_per_step_median"], c
    assert c["fresh_process"].get("time_to_first_step_s", 0) > 0, c
    # What GEMM tuning cost the fresh process (nothing on the CPU).
    assert c["fresh_process"].get("device_gemm_tuning_ms") == 0, c
    assert c["fresh_process"].get("device_gemm_tuning_candidates_screened") == 0, c
    assert c["peak_host_rss_mb"] > 0, c
    # Which f16/bf16 conversion code the CPU ran (LowPrecision.h).
    assert c["cpu_conversions"] in ("portable", "avx2", "avx2+f16c"), c
    assert isinstance(c["cpu_gemm_kernels"], str) and c["cpu_gemm_kernels"], c  # OpenBLAS's core name
    # The AMPJIT_* variables it ran under, and no others.
    assert c["environment"].get("AMPJIT_CUDA_CACHE_HINTS") == "0", c["environment"]
    assert all(name.startswith("AMPJIT_") for name in c["environment"]), c["environment"]
assert summary["peer"]["ran"] is False and "CPU" in summary["peer"]["reason"], summary
assert len(summary["summary"]) == 4
assert all(c["optimizer"] == "sgd" for c in configs + summary["summary"]), configs
adamw = [json.loads(line) for line in sys.argv[2].splitlines() if line.strip()]
assert len(adamw) == 2 and adamw[0]["optimizer"] == "adamw" and adamw[1]["summary"][0]["optimizer"] == "adamw", adamw
assert adamw[0]["traces"] == 1 and adamw[0]["ms_per_step_median"] > 0, adamw[0]
sgd = next(c for c in configs if (c["model"], c["level"]) == ("classifier", "O2"))
# The same model, batch and seed: only the optimizer differs.
assert adamw[0]["final_loss"] != sgd["final_loss"], (adamw[0]["final_loss"], sgd["final_loss"])
print("ampjit-bench JSON ok")
PY
