#!/usr/bin/env bash
# The main job's GPU path, on the emulated CUDA runtime (CI has no GPU): the
# same runs with --backend cuda there and --backend cpu in the real build give
# the same loss scale and skipped steps, and losses and held-out accuracy
# within what f16 products summed in another order allow, with SGD, Adam and
# AdamW, an lr schedule and gradient clipping.
set -euo pipefail
emulated=$1 cpu=$2
compare() {
  local cuda_out cpu_out
  cuda_out=$("$emulated" --backend cuda --json --no-progress "$@")
  cpu_out=$("$cpu" --backend cpu --json --no-progress "$@")
  python3 - "$cuda_out" "$cpu_out" "$*" <<'PY'
import json, math, sys
def epochs(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"epoch"' in line]
cuda, cpu, flags = epochs(sys.argv[1]), epochs(sys.argv[2]), sys.argv[3]
problems = []
if not cuda or len(cuda) != len(cpu):
    problems.append(f"{len(cuda)} epochs on cuda, {len(cpu)} on the cpu")
for on_cuda, on_cpu in zip(cuda, cpu):
    for key in ("loss_scale", "skipped_steps"):
        if on_cuda[key] != on_cpu[key]:
            problems.append(f"epoch {on_cpu['epoch']}: {key} {on_cuda[key]} on cuda, {on_cpu[key]} on the cpu")
    # The device's GEMMs accumulate in f32 in another order: the loss after a
    # handful of steps agrees to the low type's tolerance (DESIGN's rtol).
    rel_tol = 1.6e-2 if "bf16" in flags else 1e-3
    if not math.isclose(on_cuda["loss"], on_cpu["loss"], rel_tol=rel_tol, abs_tol=1e-5):
        problems.append(f"epoch {on_cpu['epoch']}: loss {on_cuda['loss']} on cuda, {on_cpu['loss']} on the cpu")
    if "held_out_accuracy" in on_cpu and abs(on_cuda["held_out_accuracy"] - on_cpu["held_out_accuracy"]) > 0.01:
        problems.append(f"epoch {on_cpu['epoch']}: accuracy {on_cuda['held_out_accuracy']} on cuda, "
                        f"{on_cpu['held_out_accuracy']} on the cpu")
print(f"{flags}: " + ("; ".join(problems) if problems else
      "losses " + ", ".join(f"{e['loss']:.6g}" for e in cuda) + " on cuda, as on the cpu"))
sys.exit(1 if problems else 0)
PY
}
compare --data synthetic --epochs 2 --max-steps 6 --amp O1 --dtype f16
compare --data synthetic --epochs 1 --max-steps 4 --amp O2 --dtype bf16
compare --model mlp9 --width 64 --batch-size 32 --epochs 2 --steps-per-epoch 3 --amp O1 --dtype f16
# Adam's and AdamW's device kernels (the 16-byte one for aligned f32 state).
compare --data synthetic --epochs 2 --max-steps 6 --amp O2 --dtype f16 --optimizer adamw
compare --model mlp9 --width 64 --batch-size 32 --epochs 2 --steps-per-epoch 3 --amp O1 --dtype bf16 --optimizer adam
# The lr a schedule writes from the host before each step, and clipping in the step.
compare --data synthetic --epochs 1 --max-steps 6 --amp O1 --dtype f16 --schedule cosine --warmup-steps 2 \
  --clip-grad-norm 0.5
