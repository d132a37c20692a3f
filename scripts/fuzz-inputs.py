#!/usr/bin/env python3
"""Mutation fuzzing of what users hand to ampjit's tools.

Each campaign edits a known-good input at random and runs a tool on it. A
clean error (a non-zero exit with "error" in its output) or a successful run
passes; a signal, a sanitizer report, an LLVM fatal error, a silent non-zero
exit or a hang is a finding, kept in the output folder with the command that
showed it. Run it against the sanitized build (scripts/run-sanitized-tests.sh
builds build-asan), where undefined behaviour becomes a report:

  scripts/fuzz-inputs.py ir     --count 2000 --seed 1
  scripts/fuzz-inputs.py policy --count 500
  scripts/fuzz-inputs.py plan   --count 1000

- ir: the jit/amp MLIR of examples/ and tests/lit with types, dimensions,
  operands, attributes and roles changed, through amp-opt's AMP pipeline and,
  where that accepts it, compiled and run by ampjit-run (a quarter of the
  inputs go through one of amp-opt's other passes alone instead);
- policy: the built-in policy YAML files edited line by line, as amp-opt's
  policy= file;
- plan: plans ampjit-run emits, with bytes edited and the checksum recomputed
  (so the decoder and the verifier are what must refuse them), loaded and run.

Not part of CI: the campaigns are random and long. Findings become tests.
"""

import argparse
import glob
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINDING_MARKS = ('AddressSanitizer', 'LeakSanitizer', 'runtime error:', 'LLVM ERROR', 'Assertion',
                 'Stack dump', 'PLEASE submit', 'terminate called', 'Segmentation fault')
TIMEOUT_S = 60


def run(command):
    """(passed, output) for one command."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors='replace', timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, None, f'no exit after {TIMEOUT_S} s'
    output = result.stderr + result.stdout[-2000:]
    crashed = result.returncode < 0 or result.returncode >= 128
    silent = result.returncode != 0 and 'error' not in output
    passed = not crashed and not silent and not any(mark in output for mark in FINDING_MARKS)
    return passed, result.returncode, output


# ----------------------------------------------------------------------------
# MLIR


def mlir_seeds():
    paths = glob.glob(f'{REPO}/examples/*.mlir') + glob.glob(f'{REPO}/tests/lit/Dialect/*/ops.mlir') + \
        glob.glob(f'{REPO}/tests/lit/Dialect/*/Transforms/*.mlir') + glob.glob(f'{REPO}/tests/lit/codegen/*.mlir')
    texts = [open(path).read() for path in sorted(paths)]
    return [text for text in texts if 'func.func' in text]


ELEMENT_TYPES = ['f32', 'f16', 'bf16', 'f64', 'i64', 'i32', 'i1', 'i8']
DIMENSIONS = [0, 1, 2, 3, 5, 7, 64, 1 << 31, (1 << 32) - 1, 1 << 40, 1 << 62, (1 << 63) - 1]
INTEGERS = [-1, 0, 1, 2, 3, 99, -99, 1 << 62]
KEYWORDS = re.compile(r'\b(transpose_rhs|transpose_lhs|momentum = [\d.e+-]+ : f64|reduction = \w+|approximate = \w+|'
                      r'axes = \[[\d, ]*\]|jit.role = "\w+"|jit.tied = \d+ : i64|jit.returned|predicate %\w+|inv_scale %\w+|'
                      r'momentum_buffer %\w+)')
ENUM_VALUES = ['input', 'param', 'opt_state', 'hyper', 'scaler_state', 'mean', 'sum', 'none', 'tanh', 'erf', 'bogus']


def replace_match(text, match, group, replacement):
    return text[:match.start(group)] + replacement + text[match.end(group):]


def mutate_mlir(rng, text):
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(10)
        lines = text.split('\n')
        line = rng.randrange(len(lines))
        if kind == 0:
            matches = list(re.finditer(r'x(f32|f16|bf16|f64|i64|i32|i1)>', text)) + \
                list(re.finditer(r'tensor<(f32|f16|bf16|f64|i64|i1)>', text))
            if matches:
                text = replace_match(text, rng.choice(matches), 1, rng.choice(ELEMENT_TYPES))
        elif kind == 1:
            matches = list(re.finditer(r'(?<=[<x])(\d+)(?=x)', text))
            if matches:
                text = replace_match(text, rng.choice(matches), 1, str(rng.choice(DIMENSIONS)))
        elif kind == 2:  # one dimension fewer or more
            matches = list(re.finditer(r'tensor<((?:\d+x)*)', text))
            if matches:
                match = rng.choice(matches)
                dims = match.group(1).split('x')[:-1]
                if dims and rng.random() < 0.5:
                    dims.pop(rng.randrange(len(dims)))
                else:
                    dims.append(str(rng.choice([1, 2, 3])))
                text = replace_match(text, match, 1, ''.join(d + 'x' for d in dims))
        elif kind == 3:
            matches = list(re.finditer(r'tensor<(\d+)x', text))
            if matches:
                text = replace_match(text, rng.choice(matches), 1, rng.choice(['?', '*']))
        elif kind in (4, 5):  # swap two operands of a line, or use another value
            uses = list(re.finditer(r'%[\w#]+', lines[line]))[1:]
            values = re.findall(r'%\w+', text)
            if kind == 4 and len(uses) >= 2:
                first, second = sorted(rng.sample(uses, 2), key=lambda m: m.start())
                s = lines[line]
                lines[line] = s[:first.start()] + second.group() + s[first.end():second.start()] + first.group() + \
                    s[second.end():]
            elif kind == 5 and uses and values:
                use = rng.choice(uses)
                lines[line] = lines[line][:use.start()] + rng.choice(values) + lines[line][use.end():]
            text = '\n'.join(lines)
        elif kind == 6:
            matches = list(re.finditer(r'(?<=[=\[ ,])(-?\d+)(?= : i64|\]|,)', text))
            if matches:
                text = replace_match(text, rng.choice(matches), 1, str(rng.choice(INTEGERS)))
        elif kind == 7 and rng.random() < 0.75:
            matches = list(KEYWORDS.finditer(text))
            if matches:
                text = replace_match(text, rng.choice(matches), 0, '')
        elif kind == 7:  # a state flag where it may not go: on a tied result, an argument, twice
            matches = list(re.finditer(r'\{(?=[^{}\n]*jit\.)', text))
            if matches:
                match = rng.choice(matches)
                text = text[:match.end()] + rng.choice(['jit.returned, ', 'jit.returned = 1 : i64, ', 'jit.tied = 0 : i64, ']) + \
                    text[match.end():]
        elif kind == 8:
            matches = list(re.finditer(r'"(input|param|opt_state|hyper|scaler_state)"|= (mean|sum|none|tanh|erf)\b', text))
            if matches:
                match = rng.choice(matches)
                text = replace_match(text, match, 1 if match.group(1) else 2, rng.choice(ENUM_VALUES))
        elif '%' in lines[line]:
            del lines[line]
            text = '\n'.join(lines)
    return text


# amp-opt's passes besides the whole pipeline, each alone on the edited IR.
SINGLE_PASSES = ['--canonicalize', '--cse', '--jit-convert-layout', '--amp-auto-cast=level=O1',
                 '--amp-auto-cast=level=O2', '--amp-auto-cast=level=O2 --amp-master-weights --amp-fuse-casts',
                 '--amp-verify']


def ir_case(rng, seeds, path, tools):
    open(path, 'w').write(mutate_mlir(rng, rng.choice(seeds)))
    pipeline = f'--amp-pipeline=level={rng.choice(["O0", "O1", "O2", "O3", "auto"])} dtype={rng.choice(["f16", "bf16"])}'
    if rng.random() < 0.25:
        command = [f'{tools}/amp-opt', path] + rng.choice(SINGLE_PASSES).split() + ['-o', os.devnull]
        passed, _, output = run(command)
        return passed, command, output
    command = [f'{tools}/amp-opt', path, pipeline, '-o', os.devnull]
    passed, rc, output = run(command)
    if not passed or rc != 0:
        return passed, command, output
    flags = [flag for flag in ['--jit-fuse-elementwise', '--jit-fuse-gemm-epilogues', '--jit-defer-optimizer-updates',
                               '--jit-overlap-weight-gradients', '--jit-fuse-batch-norm-epilogues',
                               '--jit-fuse-gradient-accumulation'] if rng.random() < 0.5]
    command = [f'{tools}/ampjit-run', path, '--steps=2', '--print-plan'] + flags + \
        ([pipeline] if rng.random() < 0.7 else [])
    passed, _, output = run(command)
    return passed, command, output


# ----------------------------------------------------------------------------
# Policy YAML

POLICY_TOKENS = ['allow', 'deny', 'infer', 'clear', 'promote', 'bogus', 'sm_70', 'sm_80', 'sm_999', 'sm_', 'true',
                 'false', '0.5', '-1', '1e999', 'nan', '{', '}', '[', ']', ':', '- ', '', 'version: 2', 'f16', 'bf16',
                 'category', 'when', 'attribute', 'equals', 'min_target', 'always_fp32', 'jit.add', 'jit.nothing',
                 '"', "'", '&a', '*a', '!!binary', '~', 'null']


def policy_case(rng, seeds, path, tools):
    lines = rng.choice(seeds).split('\n')
    for _ in range(rng.randint(1, 4)):
        line = rng.randrange(len(lines))
        kind = rng.randrange(5)
        if kind == 0:
            del lines[line]
        elif kind == 1:
            lines.insert(line, rng.choice(lines))
        elif kind == 2:
            tokens = re.split(r'(\W+)', lines[line])
            tokens[rng.randrange(len(tokens))] = rng.choice(POLICY_TOKENS)
            lines[line] = ''.join(tokens)
        elif kind == 3:
            lines[line] = ' ' * rng.randint(0, 6) + lines[line].lstrip()
        else:
            at = rng.randrange(len(lines[line]) + 1)
            lines[line] = lines[line][:at] + rng.choice(POLICY_TOKENS) + lines[line][at:]
    open(path, 'w').write('\n'.join(lines))
    options = f'level={rng.choice(["O1", "O2", "O3", "auto"])} dtype={rng.choice(["f16", "bf16"])} policy={path} ' \
        f'semantics={rng.choice(["paint", "autocast"])} target={rng.choice(["cpu", "sm_70", "sm_90"])}'
    command = [f'{tools}/amp-opt', f'{REPO}/examples/gelu_mlp_train_step.mlir', f'--amp-pipeline={options}', '-o',
               os.devnull]
    passed, _, output = run(command)
    return passed, command, output


# ----------------------------------------------------------------------------
# Plan files


def fnv1a64(data):
    """runtime/include/ampjit/runtime/Fnv1a.h, the plan file's checksum."""
    value = 0xcbf29ce484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    return value


def plan_seeds(tools, scratch):
    """Plans of the two examples at O0-O2 and of the codegen lit steps."""
    plans = []
    sources = [(f'{REPO}/examples/{name}.mlir', f'--amp-pipeline=level={level} dtype=f16')
               for name in ('mnist_train_step', 'gelu_mlp_train_step') for level in ('O0', 'O1', 'O2')]
    sources += [(path, None) for path in sorted(glob.glob(f'{REPO}/tests/lit/codegen/*.mlir'))]
    for index, (source, pipeline) in enumerate(sources):
        plan = os.path.join(scratch, f'seed{index}.plan')
        command = [f'{tools}/ampjit-run', source, '--steps=1', '--label-range=4', '--jit-fuse-elementwise',
                   '--jit-fuse-gemm-epilogues', '--jit-defer-optimizer-updates', f'--emit-plan={plan}']
        subprocess.run(command + ([pipeline] if pipeline else []), capture_output=True)
        if os.path.exists(plan):
            plans.append(open(plan, 'rb').read())
    return plans


def plan_case(rng, seeds, path, tools):
    data = bytearray(rng.choice(seeds)[:-8])
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(24, len(data))  # past the magic, version and header
        kind = rng.randrange(5)
        if kind == 0:
            data[at] = rng.randrange(256)
        elif kind == 1:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 2:
            data[at] = (data[at] + rng.choice([1, 255])) & 255
        elif kind == 3 and at + 8 <= len(data):
            data[at:at + 8] = struct.pack('<q', rng.choice([0, 1, -1, 2, 7, 1 << 31, 1 << 62, -(1 << 62)]))
        elif at + 4 <= len(data):
            data[at:at + 4] = struct.pack('<i', rng.choice([0, 1, -1, 2, 3, 1 << 30, -(1 << 31)]))
    data += struct.pack('<Q', fnv1a64(data))
    open(path, 'wb').write(data)
    command = [f'{tools}/ampjit-run', os.devnull, f'--load-plan={path}', '--steps=2', '--label-range=4',
               '--print-results']
    passed, _, output = run(command)
    return passed, command, output


# ----------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('campaign', choices=['ir', 'policy', 'plan'])
    parser.add_argument('--count', type=int, default=1000, help='inputs to try')
    parser.add_argument('--seed', type=int, default=1, help='the random generator\'s seed')
    parser.add_argument('--tools', default=os.environ.get('AMPJIT_SANITIZED_BUILD_DIR', f'{REPO}/build-asan') + '/bin',
                        help='the folder of amp-opt and ampjit-run (the sanitized build\'s)')
    parser.add_argument('--out', default='fuzz-findings', help='where findings are kept')
    args = parser.parse_args()
    for tool in ('amp-opt', 'ampjit-run'):
        if not os.access(f'{args.tools}/{tool}', os.X_OK):
            sys.exit(f'fuzz-inputs: {args.tools}/{tool} is missing: build it (scripts/run-sanitized-tests.sh) '
                     'or pass --tools')
    os.environ.setdefault('ASAN_OPTIONS', 'halt_on_error=1:detect_leaks=1:intercept_tls_get_addr=0')  # as run-sanitized-tests.sh
    os.environ.setdefault('UBSAN_OPTIONS', 'halt_on_error=1:print_stacktrace=1')
    # A mutated dimension can ask for gigabytes of valid work (one plan
    # broadcast 50 floats to 835M, printed every one and ran past the timeout
    # under ASan): with 1 GiB allowed, such inputs are the runtime's clean
    # out-of-memory error, and a timeout is left to mean a real hang.
    os.environ.setdefault('AMPJIT_HOST_MEMORY_LIMIT', str(1 << 30))
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    findings = 0
    with tempfile.TemporaryDirectory() as scratch:
        if args.campaign == 'ir':
            seeds, case, suffix = mlir_seeds(), ir_case, 'mlir'
        elif args.campaign == 'policy':
            seeds = [open(f'{REPO}/policies/{name}.yaml').read() for name in ('default', 'pytorch')]
            case, suffix = policy_case, 'yaml'
        else:
            seeds, case, suffix = plan_seeds(args.tools, scratch), plan_case, 'plan'
        if not seeds:
            sys.exit('fuzz-inputs: no seed inputs')
        for index in range(args.count):
            path = os.path.join(scratch, f'input.{suffix}')
            passed, command, output = case(rng, seeds, path, args.tools)
            if passed:
                continue
            findings += 1
            name = f'{args.campaign}-{args.seed}-{index}'
            kept = os.path.join(args.out, f'{name}.{suffix}')
            os.replace(path, kept)
            with open(os.path.join(args.out, f'{name}.txt'), 'w') as report:
                report.write(' '.join(command).replace(path, kept) + '\n\n' + output[-8000:])
            print(f'finding: {kept}', flush=True)
    print(f'{args.campaign}: {args.count} inputs, {findings} findings' + (f' (in {args.out})' if findings else ''))
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
