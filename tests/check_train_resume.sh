#!/usr/bin/env bash
# ampjit-train --checkpoint / --resume: a run stopped after epoch 2 and
# resumed from its checkpoint prints, for epoch 3, exactly what the run that
# never stopped prints (loss, held-out accuracy, loss scale, skipped steps),
# for the classifier (O2-f16) and mlp9 (O1-bf16) with SGD, and with AdamW
# and Adam, whose running averages and step counts the checkpoint must carry,
# RAdam under OneCycleLR, NAdam, whose product of momenta it must carry, and
# RMSprop and Adagrad.
# So does a run with a cosine schedule, warmup and gradient clipping, whose
# schedule's place the checkpoint must carry: that run's first part stops by
# --max-steps, since the schedule spans --epochs. A resume that leaves no
# epoch to train, a checkpoint of another model, of another optimizer or with
# other settings, and a resume with other flags, are clear errors.
set -euo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# check NAME [--stop-by-steps N] FLAGS...: the first part is 2 epochs, or
# --epochs 3 stopped after N steps (2 epochs of them).
check() {
  local name=$1
  shift
  local first_part=(--epochs 2)
  if [ "$1" = --stop-by-steps ]; then
    first_part=(--epochs 3 --max-steps "$2")
    shift 2
  fi
  "$train" "$@" --epochs 3 --json --no-progress >"$dir/$name.full"
  "$train" "$@" "${first_part[@]}" --json --no-progress --checkpoint "$dir/$name.ampjit" >"$dir/$name.first"
  "$train" "$@" --epochs 3 --json --no-progress --resume "$dir/$name.ampjit" >"$dir/$name.rest"
  python3 - "$name" "$dir/$name.full" "$dir/$name.first" "$dir/$name.rest" <<'PY'
import json, sys
name, full, first, rest = sys.argv[1:]
def epochs(path):
    lines = [json.loads(line) for line in open(path) if line.strip()]
    return [{k: v for k, v in line.items() if k != "seconds"} for line in lines if "epoch" in line]
full, first, rest = epochs(full), epochs(first), epochs(rest)
assert [e["epoch"] for e in first] == [1, 2], first
assert [e["epoch"] for e in rest] == [3], rest
assert first == full[:2], (first, full[:2])
if rest != full[2:]:
    sys.exit(f"{name}: the resumed epoch 3 {rest} differs from the uninterrupted {full[2:]}")
print(f"ok: {name} resumed after epoch 2 gives epoch 3 = {rest[0]}")
PY
}

check classifier --data synthetic --backend cpu --amp O2 --dtype f16 --seed 3
check mlp9 --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O1 --dtype bf16
check classifier-adamw --data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 --optimizer adamw
check mlp9-adam --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O2 --dtype f16 \
  --optimizer adam --weight-decay 1e-4
# 1600 synthetic training digits: 25 steps an epoch.
check classifier-scheduled --stop-by-steps 50 --data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 \
  --optimizer adamw --lr 1e-4 --schedule cosine --warmup-steps 10 --clip-grad-norm 1.0
# RAdam's step count decides where its rectified updates start; OneCycleLR's
# place is the schedule's epoch.
check classifier-radam-onecycle --stop-by-steps 50 --data synthetic --backend cpu --amp O2 --dtype bf16 --seed 3 \
  --optimizer radam --lr 3e-3 --schedule onecycle
check mlp9-nadam --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O1 --dtype f16 \
  --optimizer nadam
# RMSprop's square average and Adagrad's sum of squares; Adagrad's lr_decay
# term counts its steps.
check mlp9-rmsprop --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O2 --dtype bf16 \
  --optimizer rmsprop --lr 1e-3
check classifier-adagrad --data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 --optimizer adagrad
# Adamax's infinity norm, a running max, and its bias correction's step count.
check mlp9-adamax --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O2 --dtype f16 \
  --optimizer adamax
# Adadelta's two running averages, of g^2 and of the steps' squares.
check mlp9-adadelta --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O1 --dtype bf16 \
  --optimizer adadelta
# Adafactor's factored row and column averages, its vectors' full averages
# and the step count its beta2 and rho follow.
check mlp9-adafactor --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu --amp O2 --dtype f16 \
  --optimizer adafactor
# LAMB's moments and step count, and its global gradient norm and trust
# ratios, which a resumed run recomputes from the loaded state.
check classifier-lamb --data synthetic --backend cpu --amp O1 --dtype bf16 --seed 3 --optimizer lamb --lr 1e-2
# The weight average and its count: SWA from epoch 2, so the file holds one
# epoch's average and the resumed epoch 3 averages two.
check classifier-swa --data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 --swa-start 2
grep -q '"swa_held_out_accuracy"' "$dir/classifier-swa.rest" || { echo "FAIL: classifier-swa: no SWA accuracy in epoch 3"; exit 1; }
check mlp9-warmup --stop-by-steps 10 --model mlp9 --width 64 --batch-size 32 --steps-per-epoch 5 --backend cpu \
  --amp O1 --dtype f16 --warmup-steps 7 --clip-grad-norm 0.5

# expect_resume_error FILE PATTERN FLAGS...: resuming FILE with FLAGS fails, saying PATTERN.
expect_resume_error() {
  local file=$1 pattern=$2
  shift 2
  if message=$("$train" "$@" --resume "$dir/$file" --no-progress 2>&1); then
    echo "FAIL: resumed $file with $*"; exit 1
  fi
  grep -qF -- "$pattern" <<<"$message" || { echo "FAIL: $*: expected '$pattern' in: $message"; exit 1; }
}
classifier=(--data synthetic --backend cpu --amp O2 --dtype f16 --seed 3)
expect_resume_error classifier.ampjit "leaves none to train" "${classifier[@]}" --epochs 2
expect_resume_error mlp9.ampjit "was saved by a run with --model mlp9, not classifier: give the flags it ran with" \
  "${classifier[@]}" --epochs 3
expect_resume_error classifier.ampjit "part 'optimizer': the file holds state saved by SGD, not by AdamW" \
  "${classifier[@]}" --epochs 3 --optimizer adamw
expect_resume_error classifier-adamw.ampjit "optimizer setting 'weight_decay' is 0.01 in the file but 0.1 here" \
  --data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 --epochs 3 --optimizer adamw --weight-decay 0.1
expect_resume_error classifier.ampjit "with --amp O2, not O1" --data synthetic --backend cpu --amp O1 --seed 3 --epochs 3
scheduled=(--data synthetic --backend cpu --amp O1 --dtype f16 --seed 3 --optimizer adamw --lr 1e-4)
expect_resume_error classifier-scheduled.ampjit "with --schedule cosine, not constant" "${scheduled[@]}" --epochs 3 \
  --warmup-steps 10 --clip-grad-norm 1.0
expect_resume_error classifier-scheduled.ampjit "with --clip-grad-norm 1, not off" "${scheduled[@]}" --epochs 3 \
  --schedule cosine --warmup-steps 10
expect_resume_error classifier-scheduled.ampjit "with --epochs 3, not 4 (the lr schedule spans the run's epochs" \
  "${scheduled[@]}" --epochs 4 --schedule cosine --warmup-steps 10 --clip-grad-norm 1.0
expect_resume_error classifier-scheduled.ampjit "with --seed 3, not 0" --data synthetic --backend cpu --amp O1 \
  --optimizer adamw --lr 1e-4 --epochs 3 --schedule cosine --warmup-steps 10 --clip-grad-norm 1.0
echo "ok: bad resumes are clear errors"
