"""ctest python-package: the `ampjit` Python package (python/ampjit) over the
build's libampjit.so. The C API's behaviour is CApi.*'s to test; these check
what the package adds: buffers of every kind in and out, scalar results as
numbers, plan files, and its own errors raised as ampjit.Error.

Usage: python3 test_ampjit_package.py LIBAMPJIT.so EXAMPLES_DIR
(with python/ on PYTHONPATH)."""

import array
import os
import struct
import sys
import tempfile
import unittest

import ampjit

LIBRARY, EXAMPLES = sys.argv[1], sys.argv[2]
del sys.argv[1:3]


def mnist_text():
    with open(os.path.join(EXAMPLES, "mnist_train_step.mlir")) as file:
        return file.read()


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ampjit.library(LIBRARY)
        cls.plan = ampjit.compile(mnist_text(), "mnist_train_step.mlir", amp="level=O2 dtype=f16 target=cpu")

    def test_the_plan_describes_its_values_as_the_c_api_does(self):
        arguments, results = self.plan.arguments, self.plan.results
        self.assertEqual(len(arguments), 26)  # 20 and O2's 6 f16 copies
        self.assertEqual((arguments[2].role, arguments[2].dtype, arguments[2].shape, arguments[2].byte_size),
                         ("param", "f32", (512, 784), 512 * 784 * 4))
        copies = [a for a in arguments if a.derived_from >= 0]
        self.assertEqual(sorted(a.derived_from for a in copies), [2, 3, 4, 5, 6, 7])
        self.assertTrue(all(a.dtype == "f16" for a in copies))
        self.assertEqual((results[0].role, results[0].shape, results[0].tied_argument), ("output", (), -1))
        self.assertEqual(results[1].tied_argument, 2)
        self.assertIn("derived from argument", repr(copies[0]))
        self.assertTrue(str(self.plan).startswith("plan @train_step\n"))

    def test_buffers_of_every_kind_go_in_and_come_out(self):
        session = self.plan.session("cpu")
        values = array.array("f", (i * 0.25 for i in range(10)))
        for data in (values, values.tobytes(), memoryview(values.tobytes()), bytearray(values.tobytes())):
            session.write(7, data)  # b3: f32[10]
            self.assertEqual(bytes(session.read(7)), values.tobytes(), type(data).__name__)
        into = array.array("f", [0.0] * 10)
        self.assertIs(session.read(7, into=into), into)
        self.assertEqual(into, values)
        with self.assertRaisesRegex(ampjit.Error, "read-only"):
            session.read(7, into=values.tobytes())
        with self.assertRaisesRegex(ampjit.Error, r"argument 7 'arg7' \(param f32\[10\]\) is 40 bytes, not 12"):
            session.write(7, array.array("f", [1.0, 2.0, 3.0]))

    def test_a_buffer_of_another_element_type_is_refused_even_at_the_right_size(self):
        # Five doubles are as many bytes as ten floats: without the check
        # they would be written as ten meaningless floats.
        session = self.plan.session("cpu")
        session.fill(7, 0.5)
        with self.assertRaisesRegex(ampjit.Error, r"^argument 7 \(f32\[10\]\) takes f32 elements or raw bytes, "
                                                  r"not a buffer of 'd' \(8 bytes each\)"):
            session.write(7, array.array("d", [1.0] * 5))
        with self.assertRaisesRegex(ampjit.Error, "not a buffer of 'd'"):
            session.read(7, into=array.array("d", [0.0] * 5))
        with self.assertRaisesRegex(ampjit.Error, "not C-contiguous"):
            session.write(7, memoryview(array.array("f", [1.0] * 20))[::2])
        self.assertEqual(array.array("f", bytes(session.read(7))), array.array("f", [0.5] * 10),
                         "the refused writes changed nothing")
        session.write(1, array.array("q", range(64)))  # i64 labels
        session.write(1, array.array("l", range(64)))  # the same on LP64
        f16_copy = [a for a in self.plan.arguments if a.derived_from == 7][0]
        self.assertEqual(len(session.read(f16_copy.index, into=array.array("H", [0] * 10))), 10,
                         "an f16 value reads into 16-bit patterns")
        with self.assertRaisesRegex(ampjit.Error, r"^result 0 \(f32\[\]\) takes f32 elements"):
            session.result(0, into=array.array("q", [0]))
        with self.assertRaisesRegex(ampjit.Error, "argument 99 does not exist: the plan has 26 arguments"):
            session.read(99)

    def test_values_go_in_as_numbers_rounded_as_the_runtime_rounds(self):
        session = self.plan.session("cpu")
        values = [0.1 * (i + 1) for i in range(10)]
        session.write_values(7, values)  # b3: f32[10], the master of an f16 copy
        as_f32 = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]
        self.assertEqual(session.read_values(7), as_f32)
        copy = [a for a in self.plan.arguments if a.derived_from == 7][0]
        self.assertEqual(session.read_values(copy.index),
                         [struct.unpack("<e", struct.pack("<e", v))[0] for v in as_f32])
        with self.assertRaisesRegex(ampjit.Error, r"\(param f32\[10\]\) has 10 elements, not 3"):
            session.write_values(7, [1.0, 2.0, 3.0])
        with self.assertRaisesRegex(ampjit.Error, r"cannot hold 0.5 \(element 1\)"):
            session.write_values(1, [1, 0.5] + [0] * 62)  # labels: i64[64]
        self.assertEqual(session.read_values(7), as_f32, "the refused writes changed nothing")

    def test_scalar_results_come_back_as_numbers(self):
        session = self.plan.session("cpu")
        session.fill(14, 0.01)
        session.fill(15, 1e30)  # every f16 gradient overflows: the step is skipped
        session.run()
        self.assertEqual(session.steps, 1)
        loss = session.result_value(0)
        self.assertIsInstance(loss, float)
        skipped = [r for r in self.plan.results if r.tied_argument == 18][0]
        self.assertEqual(session.result_value(skipped.index), 1)
        self.assertIsInstance(session.result_value(skipped.index), int)
        self.assertEqual(struct.unpack("<f", bytes(session.read(15)))[0], struct.unpack("<f", struct.pack("<f", 5e29))[0])
        weight = [r for r in self.plan.results if r.tied_argument == 2][0]
        with self.assertRaisesRegex(ampjit.Error, r"result 1 is f32\[512, 784\], not a scalar"):
            session.result_value(weight.index)

    def test_a_read_that_arrives_later_holds_the_value_it_was_asked_for(self):
        session = self.plan.session("cpu")
        session.fill(14, 0.01)
        session.fill(15, 1e30)  # the first step overflows and halves the scale
        with self.assertRaisesRegex(ampjit.Error, "^ampjit_session_read_result_async: result 0: no step has run yet"):
            session.result_async(0)
        session.run()
        loss, scale = session.result_async(0), session.read_async(15)
        self.assertTrue(loss.ready())
        session.run()
        self.assertEqual(loss.value(), session.result_value(0), "the two steps skip alike: the same loss")
        halved_once = struct.unpack("<f", struct.pack("<f", 5e29))[0]
        self.assertEqual(scale.value(), halved_once, "as it was after the first step")
        self.assertEqual(struct.unpack("<f", bytes(session.read(15)))[0], halved_once / 2)
        into = bytearray(4)
        self.assertIs(scale.wait(into), into)
        with self.assertRaisesRegex(ampjit.Error, r"argument 15 .*takes 4 bytes|4 bytes"):
            scale.wait(bytearray(8))
        del session  # a copy outlives its session
        self.assertEqual(scale.value(), halved_once)

    def test_the_library_says_what_it_has(self):
        lib = ampjit.library()
        self.assertRegex(lib.version, r"^\d+\.\d+\.\d+$")
        self.assertIsInstance(lib.cuda_backend_built, bool)
        count = ampjit.cuda_device_count()
        self.assertGreaterEqual(count, 0)
        if count == 0:
            with self.assertRaisesRegex(ampjit.Error, "^ampjit_session_create: backend 'cuda': "):
                self.plan.session("cuda")

    def test_a_saved_plan_loads_as_itself(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "step.plan")
            self.plan.save(path)
            self.assertEqual(str(ampjit.load_plan(path)), str(self.plan))
            with open(path, "wb") as file:
                file.write(b"not a plan")
            with self.assertRaisesRegex(ampjit.Error, "^ampjit_plan_load: .*step.plan"):
                ampjit.load_plan(path)

    def test_arguments_are_addressed_by_name_or_index(self):
        text = ('func.func @step(%x: tensor<2x3xf32> {jit.role = "input"} loc("batch"), '
                '%w: tensor<4x3xf32> {jit.role = "param"} loc("fc1.weight")) -> tensor<2x4xf32> {\n'
                '  %y = jit.matmul %x, %w {transpose_rhs} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>\n'
                '  return %y : tensor<2x4xf32>\n}\n')
        plan = ampjit.compile(text, "named.mlir")
        self.assertEqual((plan.argument_index("batch"), plan.argument_index("fc1.weight"), plan.argument_index(1)),
                         (0, 1, 1))
        session = plan.session("cpu")
        session.write_values("batch", [1, 2, 3, 4, 5, 6])
        session.write("fc1.weight", array.array("f", [1.0] * 12))
        session.fill("fc1.weight", 0.5)
        self.assertEqual(session.read_values(1), [0.5] * 12)
        self.assertEqual(bytes(session.read("batch")), array.array("f", [1, 2, 3, 4, 5, 6]).tobytes())
        session.run()
        self.assertEqual(array.array("f", bytes(session.result(0))).tolist(), [3.0] * 4 + [7.5] * 4)
        with self.assertRaisesRegex(ampjit.Error,
                                    "no argument named 'fc2.weight'; its arguments are 'batch', 'fc1.weight'"):
            session.fill("fc2.weight", 1.0)

    def test_device_arrays_are_checked_here_and_need_a_cuda_session(self):
        class DeviceArray:
            """What CuPy, Numba or a PyTorch CUDA tensor offers."""
            def __init__(self, shape, typestr, strides=None, readonly=False, stream=None):
                self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                                 "data": (0x7f0000001000, readonly), "version": 3,
                                                 "stream": stream}

        session = self.plan.session("cpu")
        self.assertIsNone(session.stream)
        session.synchronize()
        before = bytes(session.read(7))
        # The package's own checks, before the library is asked.
        with self.assertRaisesRegex(ampjit.Error, r"argument 7 \(f32\[10\]\) takes a device array of shape \[10\] "
                                                  r"and typestr <f4, not \[10\] <f8"):
            session.write(7, DeviceArray((10,), "<f8"))
        with self.assertRaisesRegex(ampjit.Error, r"not \[2, 5\] <f4"):
            session.write(7, DeviceArray((2, 5), "<f4"))
        with self.assertRaisesRegex(ampjit.Error, r"not C-contiguous \(strides \[8\]\)"):
            session.write(7, DeviceArray((10,), "<f4", strides=(8,)))
        with self.assertRaisesRegex(ampjit.Error, "the device array to read into is read-only"):
            session.read(7, into=DeviceArray((10,), "<f4", readonly=True))
        # Well-formed ones reach the library, which refuses a cpu session.
        for call in (lambda: session.write(7, DeviceArray((10,), "<f4", strides=(4,), stream=2)),
                     lambda: session.read("arg7", into=DeviceArray((10,), "<f4"))):
            with self.assertRaisesRegex(ampjit.Error, r'^ampjit_session_(write|read)_device: device memory needs a '
                                                      r'session on "cuda"; this one runs on "cpu"'):
                call()
        self.assertEqual(bytes(session.read(7)), before)
        with self.assertRaisesRegex(ampjit.Error, "takes a device array of shape \\[\\] and typestr <f4"):
            session.result(0, into=DeviceArray((1,), "<f4"))

    def test_mistakes_raise_the_librarys_message(self):
        with self.assertRaisesRegex(ampjit.Error, r"^ampjit_session_create: unknown backend 'tpu'"):
            self.plan.session("tpu")
        with self.assertRaisesRegex(ampjit.Error, "unknown plan option 'fuse-everything'"):
            ampjit.compile(mnist_text(), "step.mlir", options="fuse-everything")
        with self.assertRaisesRegex(ampjit.Error, "no step has run yet"):
            self.plan.session("cpu").result(0)
        with self.assertRaisesRegex(ampjit.Error, "is loaded from .* already, not /elsewhere/libampjit.so"):
            ampjit.library("/elsewhere/libampjit.so")
        with self.assertRaisesRegex(ampjit.Error, "cannot load /elsewhere/libampjit.so"):
            ampjit.Library("/elsewhere/libampjit.so")


if __name__ == "__main__":
    unittest.main(verbosity=2)
