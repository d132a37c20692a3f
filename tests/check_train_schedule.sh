#!/usr/bin/env bash
# ampjit-train's --schedule, --warmup-steps and --clip-grad-norm:
# - the lr each epoch ends with is the closed form of a linear warmup from
#   lr / N, then a cosine decay to 0 over the rest of --epochs (SequentialLR
#   of LinearLR and CosineAnnealingLR, stepped every step), or the warmup
#   alone, for the classifier and mlp9;
# - clipping at a norm the gradients never reach trains bit for bit as no
#   clipping (unscale_ then step is step, as in PyTorch), and a small norm
#   slows the descent;
# - an overflowing step under clipping is still skipped, as without it.
set -euo pipefail
train=$1

epochs_of() {
  "$train" --backend cpu --json --no-progress "$@" | python3 -c '
import json, sys
print(json.dumps([json.loads(line) for line in sys.stdin if "\"epoch\"" in line]))'
}

# 1600 synthetic training digits: 25 steps an epoch, 75 in 3 epochs.
cosine=$(epochs_of --data synthetic --epochs 3 --lr 0.01 --schedule cosine --warmup-steps 5)
warmup=$(epochs_of --model mlp9 --width 32 --batch-size 16 --steps-per-epoch 5 --epochs 3 --lr 0.001 --warmup-steps 8)
plain=$(epochs_of --data synthetic --epochs 2)
unreached=$(epochs_of --data synthetic --epochs 2 --clip-grad-norm 1e9)
clipped=$(epochs_of --data synthetic --epochs 2 --clip-grad-norm 1e-2)
overflow=$(epochs_of --data synthetic --epochs 2 --optimizer adamw --amp O3 --dtype f16)
overflow_clipped=$(epochs_of --data synthetic --epochs 2 --optimizer adamw --amp O3 --dtype f16 --clip-grad-norm 1.0)

python3 - "$cosine" "$warmup" "$plain" "$unreached" "$clipped" "$overflow" "$overflow_clipped" <<'PY'
import json, math, sys
cosine, warmup, plain, unreached, clipped, overflow, overflow_clipped = map(json.loads, sys.argv[1:])
problems = []

def expect_lrs(name, epochs, lr, warmup_steps, steps_per_epoch, total, decays):
    for epoch in epochs:
        t = epoch["epoch"] * steps_per_epoch  # steps taken: the lr printed is the next step's
        if t < warmup_steps or not decays:
            factor = 1 / warmup_steps + (1 - 1 / warmup_steps) * min(t, warmup_steps) / warmup_steps
            want = lr * factor
        else:
            want = lr * (1 + math.cos(math.pi * (t - warmup_steps) / (total - warmup_steps))) / 2
        if not math.isclose(epoch["lr"], want, rel_tol=1e-9, abs_tol=1e-15):
            problems.append(f"{name}: lr {epoch['lr']} after step {t}, closed form {want}")

expect_lrs("cosine", cosine, 0.01, 5, 25, 75, True)
expect_lrs("warmup", warmup, 0.001, 8, 5, 15, False)
if cosine[-1]["lr"] != 0.0:
    problems.append(f"the cosine run ends at lr {cosine[-1]['lr']}, not 0")

strip = lambda epochs: [{k: v for k, v in e.items() if k != "seconds"} for e in epochs]
if strip(unreached) != strip(plain):
    problems.append(f"clipping at 1e9 changed the run: {strip(unreached)} against {strip(plain)}")
if not clipped[0]["loss"] > plain[0]["loss"] + 0.5:
    problems.append(f"clipping at 1e-2 left the loss at {clipped[0]['loss']} (unclipped {plain[0]['loss']})")
for name, run in (("overflow", overflow), ("overflow clipped", overflow_clipped)):
    if run[-1]["skipped_steps"] < 1 or not math.isfinite(run[-1]["loss"]):
        problems.append(f"{name}: {run[-1]}")
if overflow_clipped[-1]["skipped_steps"] != overflow[-1]["skipped_steps"]:
    problems.append(f"clipping changed the skipped steps: {overflow_clipped[-1]} against {overflow[-1]}")
if problems:
    sys.exit("FAIL: " + "; ".join(problems))
print(f"ok: cosine lrs {[e['lr'] for e in cosine]}, warmup lrs {[e['lr'] for e in warmup]}; "
      f"clipping at 1e9 is bit for bit none; at 1e-2 loss {clipped[0]['loss']:.4f} against {plain[0]['loss']:.4f}; "
      f"overflows skipped with and without clipping ({overflow_clipped[-1]['skipped_steps']})")
PY
