#!/usr/bin/env python3
"""A Python framework's way in: the installed `ampjit` package (the C API
through ctypes), with nothing but Python's standard library.

The step is jit-dialect MLIR text (examples/mnist_train_step.mlir: the MNIST
classifier with SGD and a dynamic loss scaler). ampjit compiles it at O1 with
f16 and at O0, and a session runs each plan on the CPU with state that the
session holds from step to step.

Checks what such a framework relies on: the plan's arguments come back with
their roles, dtypes and shapes; the O1-f16 plan's first loss is the fp32
plan's within f16 rounding; training lowers the loss; a mistake raises
ampjit.Error with the library's message. Exits non-zero, saying why, when
any of that fails.

Usage: PYTHONPATH=P/lib/python3/site-packages embed_python.py STEP.mlir
(P the install prefix; the package loads P/lib/libampjit.so).
"""

import array
import math
import random
import sys

import ampjit

failures = 0


def expect(ok, what):
    global failures
    print(("ok" if ok else "FAILED") + ": " + what)
    failures += 0 if ok else 1


def initial_state(session, seed):
    """Learnable data (each label's images share a prototype), parameters
    uniform in +-1/sqrt(fan-in), lr 0.01, the scale 2^16; the rest zero.
    Arguments are known by position, role and type: this module gives them
    no names (`loc("fc1.weight")` would), so the plan calls them arg0, ...."""
    generator = random.Random(seed)
    prototypes = [[generator.gauss(0, 1) for _ in range(784)] for _ in range(10)]
    session.write(0, array.array("f", (prototypes[(i // 784) % 10][i % 784] + 0.5 * generator.gauss(0, 1)
                                       for i in range(64 * 784))))
    session.write(1, array.array("q", (i % 10 for i in range(64))))
    for argument in session.plan.arguments:
        if argument.role == "param" and argument.derived_from < 0:
            shape = argument.shape
            bound = 1 / math.sqrt(shape[1] if len(shape) == 2 else 512)
            session.write(argument.index,
                          array.array("f", (generator.uniform(-bound, bound) for _ in range(math.prod(shape)))))
        elif argument.role == "hyper":
            session.fill(argument.index, 0.01)
        elif argument.role == "scaler_state" and argument.dtype == "f32":
            session.fill(argument.index, 65536.0)  # the scale; its counters are i64


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: embed_python.py STEP.mlir")
    with open(sys.argv[1]) as file:
        text = file.read()
    mixed = ampjit.compile(text, sys.argv[1], amp="level=O1 dtype=f16 target=cpu", options="fuse-elementwise")
    fp32 = ampjit.compile(text, sys.argv[1], amp="level=O0")
    print("ampjit", ampjit.library().version, "from", ampjit.library().path)

    described = [(a.role, a.dtype, a.shape) for a in mixed.arguments[:3]]
    expect(described == [("input", "f32", (64, 784)), ("input", "i64", (64,)), ("param", "f32", (512, 784))],
           "the plan describes its arguments: %s" % mixed.arguments[:3])

    mixed_session, fp32_session = mixed.session("cpu"), fp32.session("cpu")
    initial_state(mixed_session, 7)
    initial_state(fp32_session, 7)
    mixed_session.run()
    fp32_session.run()
    first, reference = mixed_session.result_value(0), fp32_session.result_value(0)
    # The f16 GEMMs round the activations: a few f16 ulps of the loss.
    expect(abs(first - reference) <= 1e-2 * abs(reference),
           "the O1-f16 first loss %f is the fp32 plan's %f within f16 rounding" % (first, reference))
    for _ in range(39):
        mixed_session.run()
    loss = mixed_session.result_value(0)
    expect(loss < first / 4 and mixed_session.steps == 40, "40 steps lower the loss: %f -> %f" % (first, loss))
    weights = array.array("f", bytes(mixed_session.read(2)))
    expect(len(weights) == 512 * 784 and all(math.isfinite(w) for w in weights[:1000]),
           "the weights read back as floats: %s ..." % list(weights[:3]))

    try:
        mixed_session.write(2, array.array("f", [0.0] * 10))
        expect(False, "a short write is refused")
    except ampjit.Error as error:
        expect("is 1605632 bytes, not 40" in str(error), "a short write is refused: " + str(error))
    try:
        ampjit.compile("func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                       "  %y = jit.relu %x : tensor<4xf16>\n  return %y : tensor<4xf32>\n}\n",
                       "framework-graph.mlir")
        expect(False, "malformed IR is an error")
    except ampjit.Error as error:
        expect("framework-graph.mlir:2:" in str(error),
               "malformed IR is an error at its line: " + str(error).splitlines()[0][:120])

    print("embed_python: all checks passed" if failures == 0 else "embed_python: checks failed")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
