#!/usr/bin/env bash
# ampjit-bench's CUDA path on the emulated runtime (CI has no GPU): each
# configuration runs compiled as one replayed graph, times its steps with
# events, reports the host's time per call, the device's launches and peak
# memory, and a fresh process's first step with a cold kernel cache; with
# --optimizer adam too. Tiny sizes, emulated device: this checks the tool, it
# measures nothing.
set -euo pipefail
bench=$1
output=$("$bench" --backend cuda --model classifier --levels O1,O2 --dtypes f16,bf16 --steps 3 --warmup 2 \
  --batch-size 8 --no-peer)
adam=$("$bench" --backend cuda --model classifier --levels O1 --dtypes f16 --optimizer adam --steps 3 --warmup 2 \
  --batch-size 8 --no-peer)
echo "$output"
echo "$adam"
python3 - "$output" "$adam" <<'PY'
import json, sys
lines = [json.loads(line) for line in sys.argv[1].splitlines() if line.strip()]
configs, summary = lines[:-1], lines[-1]
expected = {("O1", "f16"), ("O1", "bf16"), ("O2", "f16"), ("O2", "bf16")}
assert {(c["level"], c["dtype"]) for c in configs} == expected, configs
adam = [json.loads(line) for line in sys.argv[2].splitlines() if line.strip()]
assert len(adam) == 2 and adam[0]["optimizer"] == "adam", adam
for c in configs + adam[:1]:
    assert c["backend"] == "cuda" and c["traces"] == 1, c
    assert c["device_graph_disabled_reason"] == "", c
    # Captured at the second call, replayed by every later one.
    assert c["device_graph_captures"] == 1 and c["device_graph_replays"] >= c["steps"], c
    assert c["device_launches_per_step"] > 0 and c["peak_device_mb"] > 0, c
    assert len(c["ms_per_step"]) == c["steps"] == 3 and c["ms_per_step_median"] > 0, c
    assert c["host_ms_per_call_median"] > 0, c
    assert "cpu_conversions" not in c and "cpu_gemm_kernels" not in c, c  # a CPU run's fields
    fresh = c["fresh_process"]
    assert fresh.get("kernel_cache") == "cold" and fresh.get("time_to_first_step_s", 0) > 0, fresh
assert summary["peer"]["ran"] is False, summary
print("ampjit-bench CUDA JSON ok")
PY
