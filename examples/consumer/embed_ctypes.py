#!/usr/bin/env python3
"""A Python framework's way in: ampjit's C API through ctypes, with nothing
but the standard library and the installed libampjit.so.

The step is jit-dialect MLIR text (examples/mnist_train_step.mlir: the MNIST
classifier with SGD and a dynamic loss scaler). ampjit compiles it at O1 with
f16 and at O0, and a session runs each plan on the CPU with state that the
session holds from step to step.

Checks what such a framework relies on: the plan's arguments come back with
their names, roles, dtypes and shapes; the O1-f16 plan's first loss is the
fp32 plan's within f16 rounding; training lowers the loss; a mistake is an
error raised with ampjit's message. Exits non-zero, saying why, when any of
that fails.

Usage: embed_ctypes.py LIBAMPJIT.so STEP.mlir
"""

import array
import ctypes
import math
import random
import sys


class ValueInfo(ctypes.Structure):
    """ampjit_value_info (ampjit-c/Ampjit.h)."""
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("role", ctypes.c_int),
        ("rank", ctypes.c_size_t),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("byte_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("tied_argument", ctypes.c_int64),
        ("derived_from", ctypes.c_int64),
    ]


class AmpjitError(RuntimeError):
    pass


class Ampjit:
    """The C API's declarations, and its errors turned into exceptions."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        handle, status, size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        declarations = {
            "ampjit_version": (ctypes.c_char_p, []),
            "ampjit_last_error": (ctypes.c_char_p, []),
            "ampjit_role_name": (ctypes.c_char_p, [ctypes.c_int]),
            "ampjit_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
            "ampjit_compile_module": (handle, [ctypes.c_char_p, size, ctypes.c_char_p, ctypes.c_char_p,
                                               ctypes.c_char_p]),
            "ampjit_plan_destroy": (None, [handle]),
            "ampjit_plan_argument_count": (size, [handle]),
            "ampjit_plan_argument": (status, [handle, size, ctypes.POINTER(ValueInfo)]),
            "ampjit_session_create": (handle, [handle, ctypes.c_char_p]),
            "ampjit_session_destroy": (None, [handle]),
            "ampjit_session_write": (status, [handle, size, ctypes.c_void_p, size]),
            "ampjit_session_fill": (status, [handle, size, ctypes.c_double]),
            "ampjit_session_read": (status, [handle, size, ctypes.c_void_p, size]),
            "ampjit_session_run": (status, [handle]),
            "ampjit_session_read_result": (status, [handle, size, ctypes.c_void_p, size]),
        }
        for name, (result, arguments) in declarations.items():
            function = getattr(lib, name)
            function.restype = result
            function.argtypes = arguments
        self.lib = lib

    def error(self):
        return AmpjitError(self.lib.ampjit_last_error().decode())

    def compile(self, text, source_name, amp_pipeline, plan_options=""):
        data = text.encode()
        plan = self.lib.ampjit_compile_module(data, len(data), source_name.encode(), amp_pipeline.encode(),
                                              plan_options.encode())
        if not plan:
            raise self.error()
        return Plan(self, plan)


class Plan:
    def __init__(self, api, handle):
        self.api, self.handle = api, handle

    def __del__(self):
        self.api.lib.ampjit_plan_destroy(self.handle)

    def arguments(self):
        described = []
        for index in range(self.api.lib.ampjit_plan_argument_count(self.handle)):
            info = ValueInfo()
            if self.api.lib.ampjit_plan_argument(self.handle, index, ctypes.byref(info)) != 0:
                raise self.api.error()
            described.append({
                "name": info.name.decode(),
                "role": self.api.lib.ampjit_role_name(info.role).decode(),
                "dtype": self.api.lib.ampjit_dtype_name(info.dtype).decode(),
                "shape": [info.shape[d] for d in range(info.rank)],
                "bytes": info.byte_size,
                "derived_from": info.derived_from,
            })
        return described

    def session(self, backend="cpu"):
        handle = self.api.lib.ampjit_session_create(self.handle, backend.encode())
        if not handle:
            raise self.api.error()
        return Session(self.api, handle, self)


class Session:
    def __init__(self, api, handle, plan):
        self.api, self.handle, self.plan = api, handle, plan

    def __del__(self):
        self.api.lib.ampjit_session_destroy(self.handle)

    def write(self, index, values):
        """values: an array.array of the argument's element type."""
        address, count = values.buffer_info()
        if self.api.lib.ampjit_session_write(self.handle, index, address, count * values.itemsize) != 0:
            raise self.api.error()

    def fill(self, index, value):
        if self.api.lib.ampjit_session_fill(self.handle, index, value) != 0:
            raise self.api.error()

    def run(self):
        if self.api.lib.ampjit_session_run(self.handle) != 0:
            raise self.api.error()

    def loss(self):
        value = ctypes.c_float()
        if self.api.lib.ampjit_session_read_result(self.handle, 0, ctypes.byref(value), 4) != 0:
            raise self.api.error()
        return value.value


failures = 0


def expect(ok, what):
    global failures
    print(("ok" if ok else "FAILED") + ": " + what)
    failures += 0 if ok else 1


def initial_state(session, arguments, seed):
    """Learnable data (each label's images share a prototype), parameters
    uniform in +-1/sqrt(fan-in), lr 0.01, the scale 2^16; the rest zero.
    Arguments are known by position, role and type: the plan names them
    arg0, arg1, ... (MLIR's parser keeps no SSA names)."""
    generator = random.Random(seed)
    prototypes = [[generator.gauss(0, 1) for _ in range(784)] for _ in range(10)]
    images = array.array("f", (prototypes[(i // 784) % 10][i % 784] + 0.5 * generator.gauss(0, 1)
                               for i in range(64 * 784)))
    session.write(0, images)
    session.write(1, array.array("q", (i % 10 for i in range(64))))
    for index, argument in enumerate(arguments):
        if argument["role"] == "param" and argument["derived_from"] < 0:
            shape = argument["shape"]
            bound = 1 / math.sqrt(shape[1] if len(shape) == 2 else 512)
            count = math.prod(shape)
            session.write(index, array.array("f", (generator.uniform(-bound, bound) for _ in range(count))))
        elif argument["role"] == "hyper":
            session.fill(index, 0.01)
        elif argument["role"] == "scaler_state" and argument["dtype"] == "f32":
            session.fill(index, 65536.0)  # the scale; its counters are i64


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: embed_ctypes.py LIBAMPJIT.so STEP.mlir")
    api = Ampjit(sys.argv[1])
    with open(sys.argv[2]) as file:
        text = file.read()
    mixed = api.compile(text, sys.argv[2], "level=O1 dtype=f16 target=cpu", "fuse-elementwise")
    fp32 = api.compile(text, sys.argv[2], "level=O0")
    print("ampjit", api.lib.ampjit_version().decode())

    arguments = mixed.arguments()
    expect([(a["role"], a["dtype"], a["shape"]) for a in arguments[:3]] ==
           [("input", "f32", [64, 784]), ("input", "i64", [64]), ("param", "f32", [512, 784])],
           "the plan describes its arguments: " + ", ".join(
               "%s (%s %s%s)" % (a["name"], a["role"], a["dtype"], a["shape"]) for a in arguments[:3]))

    mixed_session, fp32_session = mixed.session("cpu"), fp32.session("cpu")
    initial_state(mixed_session, arguments, 7)
    initial_state(fp32_session, fp32.arguments(), 7)
    mixed_session.run()
    fp32_session.run()
    first, reference = mixed_session.loss(), fp32_session.loss()
    # The f16 GEMMs round the activations: a few f16 ulps of the loss.
    expect(abs(first - reference) <= 1e-2 * abs(reference),
           "the O1-f16 first loss %f is the fp32 plan's %f within f16 rounding" % (first, reference))
    for _ in range(39):
        mixed_session.run()
    loss = mixed_session.loss()
    expect(loss < first / 4, "40 steps lower the loss: %f -> %f" % (first, loss))

    try:
        mixed_session.write(2, array.array("f", [0.0] * 10))
        expect(False, "a short write is refused")
    except AmpjitError as error:
        expect("is 1605632 bytes, not 40" in str(error), "a short write is refused: " + str(error))
    try:
        api.compile("func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %y = jit.relu %x : tensor<4xf16>\n  return %y : tensor<4xf32>\n}\n",
                    "framework-graph.mlir", "")
        expect(False, "malformed IR is an error")
    except AmpjitError as error:
        expect("framework-graph.mlir:2:" in str(error),
               "malformed IR is an error at its line: " + str(error).splitlines()[0][:120])

    print("embed_ctypes: all checks passed" if failures == 0 else "embed_ctypes: checks failed")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
