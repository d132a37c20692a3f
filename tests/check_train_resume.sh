#!/usr/bin/env bash
# ampjit-train --checkpoint / --resume: a run stopped after epoch 2 and
# resumed from its checkpoint prints, for epoch 3, exactly what the run that
# never stopped prints (loss, held-out accuracy, loss scale, skipped steps),
# for the classifier (O2-f16) and mlp9 (O1-bf16) with SGD, and with AdamW
# and Adam, whose running averages and step counts the checkpoint must carry.
# A resume that leaves no epoch to train, a checkpoint of another model, and
# one of another optimizer or with other settings, are clear errors.
set -euo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

check() {
  local name=$1
  shift
  "$train" "$@" --epochs 3 --json --no-progress >"$dir/$name.full"
  "$train" "$@" --epochs 2 --json --no-progress --checkpoint "$dir/$name.ampjit" >"$dir/$name.first"
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

if message=$("$train" --data synthetic --backend cpu --epochs 2 --resume "$dir/classifier.ampjit" --no-progress 2>&1); then
  echo "FAIL: resuming after epoch 2 with --epochs 2 succeeded"; exit 1
fi
grep -q "leaves none to train" <<<"$message" || { echo "FAIL: unclear error: $message"; exit 1; }
if message=$("$train" --data synthetic --backend cpu --epochs 3 --resume "$dir/mlp9.ampjit" --no-progress 2>&1); then
  echo "FAIL: the classifier resumed from mlp9's checkpoint"; exit 1
fi
grep -q "part 'model': entry '0.weight' has shape" <<<"$message" || { echo "FAIL: unclear error: $message"; exit 1; }
if message=$("$train" --data synthetic --backend cpu --epochs 3 --resume "$dir/classifier.ampjit" --optimizer adamw \
  --no-progress 2>&1); then
  echo "FAIL: AdamW resumed from SGD's checkpoint"; exit 1
fi
grep -q "part 'optimizer': the file holds state saved by SGD, not by AdamW" <<<"$message" ||
  { echo "FAIL: unclear error: $message"; exit 1; }
if message=$("$train" --data synthetic --backend cpu --epochs 3 --resume "$dir/classifier-adamw.ampjit" \
  --optimizer adamw --weight-decay 0.1 --no-progress 2>&1); then
  echo "FAIL: AdamW with weight decay 0.1 resumed from a run with 0.01"; exit 1
fi
grep -q "optimizer setting 'weight_decay' is 0.01 in the file but 0.1 here" <<<"$message" ||
  { echo "FAIL: unclear error: $message"; exit 1; }
echo "ok: bad resumes are clear errors"
