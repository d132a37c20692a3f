#!/usr/bin/env bash
# ampjit-train's --schedule, --warmup-steps and --clip-grad-norm:
# - the lr each epoch ends with is the closed form of a linear warmup from
#   lr / N, then a cosine decay to 0 over the rest of --epochs (SequentialLR
#   of LinearLR and CosineAnnealingLR, stepped every step), or the warmup
#   alone, for the classifier and mlp9;
# - --schedule onecycle follows PyTorch's OneCycleLR closed form (a cosine
#   rise from lr / 25 peaking at step N - 1 for --warmup-steps N, then a
#   cosine fall to lr / 2.5e5, where the lr stays after the last step),
#   and refuses a --warmup-steps that leaves a phase no step;
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
onecycle=$(epochs_of --data synthetic --epochs 4 --lr 0.01 --schedule onecycle --warmup-steps 60)
if refusal=$("$train" --backend cpu --data synthetic --epochs 1 --schedule onecycle --warmup-steps 1 2>&1); then
  echo "FAIL: --schedule onecycle --warmup-steps 1 trained: $refusal"; exit 1
fi
case $refusal in
  *"--warmup-steps 1 with --schedule onecycle"*"must be in [2, 24]"*) ;;
  *) echo "FAIL: --warmup-steps 1 with onecycle: $refusal"; exit 1 ;;
esac
warmup=$(epochs_of --model mlp9 --width 32 --batch-size 16 --steps-per-epoch 5 --epochs 3 --lr 0.001 --warmup-steps 8)
plain=$(epochs_of --data synthetic --epochs 2)
unreached=$(epochs_of --data synthetic --epochs 2 --clip-grad-norm 1e9)
clipped=$(epochs_of --data synthetic --epochs 2 --clip-grad-norm 1e-2)
overflow=$(epochs_of --data synthetic --epochs 2 --optimizer adamw --amp O3 --dtype f16)
overflow_clipped=$(epochs_of --data synthetic --epochs 2 --optimizer adamw --amp O3 --dtype f16 --clip-grad-norm 1.0)

python3 - "$cosine" "$onecycle" "$warmup" "$plain" "$unreached" "$clipped" "$overflow" "$overflow_clipped" <<'PY'
import json, math, sys
cosine, onecycle, warmup, plain, unreached, clipped, overflow, overflow_clipped = map(json.loads, sys.argv[1:])
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

# OneCycleLR(max_lr=0.01, total_steps=100, pct_start=60/100), PyTorch's arithmetic.
peak_step, end_step = float(60 / 100 * 100) - 1, 100 - 1.0
top, initial = 0.01, 0.01 / 25
last = initial / 1e4
anneal = lambda start, end, pct: end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
for epoch in onecycle:
    t = epoch["epoch"] * 25
    if t <= peak_step:
        want = anneal(initial, top, t / peak_step)
    else:
        want = anneal(top, last, min((t - peak_step) / (end_step - peak_step), 1.0))
    if not math.isclose(epoch["lr"], want, rel_tol=1e-9, abs_tol=1e-15):
        problems.append(f"onecycle: lr {epoch['lr']} after step {t}, closed form {want}")
if not onecycle[0]["lr"] < onecycle[1]["lr"] > onecycle[2]["lr"] > onecycle[3]["lr"] == last:
    problems.append(f"onecycle: the lr does not rise then fall: {[e['lr'] for e in onecycle]}")
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
print(f"ok: cosine lrs {[e['lr'] for e in cosine]}, onecycle lrs {[e['lr'] for e in onecycle]}, warmup lrs {[e['lr'] for e in warmup]}; "
      f"clipping at 1e9 is bit for bit none; at 1e-2 loss {clipped[0]['loss']:.4f} against {plain[0]['loss']:.4f}; "
      f"overflows skipped with and without clipping ({overflow_clipped[-1]['skipped_steps']})")
PY
