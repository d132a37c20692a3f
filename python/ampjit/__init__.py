"""ampjit from Python: compile a training step written in the jit dialect with
automatic mixed precision, and run it in a session that keeps its state.

A thin layer over the C API (<ampjit-c/Ampjit.h>) through ctypes: no build
step, and nothing outside Python's standard library. Values cross as bytes in
the argument's dtype (any C-contiguous object with the buffer protocol:
array.array, bytes, bytearray, memoryview), whose elements must be the
value's dtype or raw bytes. On a "cuda" session they may also be device
arrays with __cuda_array_interface__ (CuPy, Numba, PyTorch CUDA tensors),
copied on the device in the order of the array's stream, never through the
host. Every failure raises ampjit.Error with the library's message, which
names the call, the argument or the source line.

    import ampjit
    plan = ampjit.compile(open("step.mlir").read(), "step.mlir",
                          amp="level=O1 dtype=f16", options="fuse-elementwise")
    session = plan.session("cpu")          # or "cuda", "cuda:1"
    session.write(2, array.array("f", w1)) # argument 2: plan.arguments[2]
    session.fill(15, 65536.0)              # the loss scale
    session.run()
    print(session.result_value(0))         # the loss
"""

import ctypes
import os
import struct

__all__ = ["Error", "HostCopy", "Library", "Plan", "Session", "ValueInfo", "compile", "cuda_device_count", "load_plan",
           "library"]


class Error(RuntimeError):
    """A call into ampjit failed; the message is the library's."""


class ValueInfo:
    """An argument or result of a plan (ampjit_value_info)."""

    def __init__(self, kind, index, name, role, dtype, shape, byte_size, tied_argument, derived_from):
        self.kind, self.index, self.name, self.role, self.dtype = kind, index, name, role, dtype
        self.shape, self.byte_size = shape, byte_size
        self.tied_argument, self.derived_from = tied_argument, derived_from

    def __repr__(self):
        extra = ""
        if self.tied_argument >= 0:
            extra += ", updates argument %d" % self.tied_argument
        if self.derived_from >= 0:
            extra += ", derived from argument %d" % self.derived_from
        return "ValueInfo(%s %d %s: %s %s%s%s)" % (self.kind, self.index, self.name, self.role, self.dtype,
                                                     list(self.shape), extra)


class _CValueInfo(ctypes.Structure):
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


def _default_library_path():
    # Installed as P/lib/python3/site-packages/ampjit beside P/lib/libampjit.so.
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "libampjit.so"))


class Library:
    """libampjit.so, loaded, with the C API's signatures declared."""

    def __init__(self, path=None):
        self.path = path or _default_library_path()
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as error:
            raise Error("cannot load %s: %s" % (self.path, error)) from None
        handle, status, size, text = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
        info = ctypes.POINTER(_CValueInfo)
        for name, result, arguments in [
            ("ampjit_version", text, []),
            ("ampjit_last_error", text, []),
            ("ampjit_dtype_name", text, [ctypes.c_int]),
            ("ampjit_role_name", text, [ctypes.c_int]),
            ("ampjit_cuda_backend_built", ctypes.c_int, []),
            ("ampjit_cuda_device_count", ctypes.c_int, []),
            ("ampjit_compile_module", handle, [ctypes.c_void_p, size, text, text, text]),
            ("ampjit_plan_load", handle, [text]),
            ("ampjit_plan_save", status, [handle, text]),
            ("ampjit_plan_destroy", None, [handle]),
            ("ampjit_plan_argument_count", size, [handle]),
            ("ampjit_plan_result_count", size, [handle]),
            ("ampjit_plan_argument", status, [handle, size, info]),
            ("ampjit_plan_result", status, [handle, size, info]),
            ("ampjit_plan_find_argument", status, [handle, text, ctypes.POINTER(size)]),
            ("ampjit_plan_to_text", ctypes.c_void_p, [handle]),
            ("ampjit_free", None, [ctypes.c_void_p]),
            ("ampjit_session_create", handle, [handle, text]),
            ("ampjit_session_destroy", None, [handle]),
            ("ampjit_session_write", status, [handle, size, ctypes.c_void_p, size]),
            ("ampjit_session_fill", status, [handle, size, ctypes.c_double]),
            ("ampjit_session_write_values", status, [handle, size, ctypes.POINTER(ctypes.c_double), size]),
            ("ampjit_session_read_values", status, [handle, size, ctypes.POINTER(ctypes.c_double), size]),
            ("ampjit_session_read", status, [handle, size, ctypes.c_void_p, size]),
            ("ampjit_session_run", status, [handle]),
            ("ampjit_session_read_result", status, [handle, size, ctypes.c_void_p, size]),
            ("ampjit_session_steps", ctypes.c_uint64, [handle]),
            ("ampjit_session_write_device", status, [handle, size, ctypes.c_void_p, size, ctypes.c_void_p]),
            ("ampjit_session_read_device", status, [handle, size, ctypes.c_void_p, size, ctypes.c_void_p]),
            ("ampjit_session_read_result_device", status, [handle, size, ctypes.c_void_p, size, ctypes.c_void_p]),
            ("ampjit_session_read_async", handle, [handle, size]),
            ("ampjit_session_read_result_async", handle, [handle, size]),
            ("ampjit_host_copy_ready", ctypes.c_int, [handle]),
            ("ampjit_host_copy_wait", status, [handle, ctypes.c_void_p, size]),
            ("ampjit_host_copy_destroy", None, [handle]),
            ("ampjit_session_stream", ctypes.c_void_p, [handle]),
            ("ampjit_session_synchronize", status, [handle]),
        ]:
            function = getattr(lib, name)
            function.restype, function.argtypes = result, arguments
        self.c = lib
        self.version = lib.ampjit_version().decode()
        self.cuda_backend_built = bool(lib.ampjit_cuda_backend_built())

    def cuda_device_count(self):
        """The CUDA devices a "cuda:N" session may use (0 without a driver)."""
        return self.c.ampjit_cuda_device_count()

    def error(self):
        return Error(self.c.ampjit_last_error().decode())

    def check(self, status):
        if status != 0:
            raise self.error()

    def compile(self, text, source_name="<module>", amp="", options=""):
        """Compiles the module's function: `amp` is amp-opt's --amp-pipeline
        options, `options` the plan rewrites (ampjit_compile_module)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        handle = self.c.ampjit_compile_module(data, len(data), source_name.encode(), amp.encode(),
                                              options.encode())
        if not handle:
            raise self.error()
        return Plan(self, handle)

    def load_plan(self, path):
        handle = self.c.ampjit_plan_load(os.fsencode(path))
        if not handle:
            raise self.error()
        return Plan(self, handle)


_library = None


def library(path=None):
    """The process's Library: loaded on first use, from `path` or from beside
    this package. A later call with another path is an error."""
    global _library
    if _library is None:
        _library = Library(path)
    elif path is not None and os.path.abspath(path) != os.path.abspath(_library.path):
        raise Error("ampjit is loaded from %s already, not %s" % (_library.path, path))
    return _library


def cuda_device_count():
    return library().cuda_device_count()


def compile(text, source_name="<module>", amp="", options=""):
    return library().compile(text, source_name, amp, options)


def load_plan(path):
    return library().load_plan(path)


class Plan:
    """A compiled step (ampjit_plan)."""

    def __init__(self, lib, handle):
        self._lib, self._handle = lib, handle
        self.arguments = [self._describe("argument", i, lib.c.ampjit_plan_argument)
                          for i in range(lib.c.ampjit_plan_argument_count(handle))]
        self.results = [self._describe("result", i, lib.c.ampjit_plan_result)
                        for i in range(lib.c.ampjit_plan_result_count(handle))]

    def _describe(self, kind, index, function):
        info = _CValueInfo()
        self._lib.check(function(self._handle, index, ctypes.byref(info)))
        return ValueInfo(kind, index, info.name.decode(), self._lib.c.ampjit_role_name(info.role).decode(),
                         self._lib.c.ampjit_dtype_name(info.dtype).decode(),
                         tuple(info.shape[d] for d in range(info.rank)), info.byte_size, info.tied_argument,
                         info.derived_from)

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.c.ampjit_plan_destroy(self._handle)

    def __str__(self):
        text = self._lib.c.ampjit_plan_to_text(self._handle)
        if not text:
            raise self._lib.error()
        try:
            return ctypes.string_at(text).decode()
        finally:
            self._lib.c.ampjit_free(text)

    def save(self, path):
        self._lib.check(self._lib.c.ampjit_plan_save(self._handle, os.fsencode(path)))

    def argument_index(self, key):
        """The index of argument `key`: an index, or a name ("fc1.weight")."""
        if isinstance(key, str):
            index = ctypes.c_size_t()
            self._lib.check(self._lib.c.ampjit_plan_find_argument(self._handle, key.encode(), ctypes.byref(index)))
            return index.value
        return key

    def session(self, backend="cpu"):
        """The plan prepared on `backend`, with every argument zero-filled."""
        handle = self._lib.c.ampjit_session_create(self._handle, backend.encode())
        if not handle:
            raise self._lib.error()
        return Session(self._lib, handle, self)


# The buffer element formats (struct's letters) that hold each dtype's
# values, and their size: f16 and bf16 also as their 16-bit patterns. Raw
# bytes ("B", "b", "c") go into any dtype.
_ELEMENT_FORMATS = {"f32": ("f", 4), "f64": ("d", 8), "f16": ("ehH", 2), "bf16": ("hH", 2), "i64": ("qlQL", 8),
                    "i1": ("?", 1)}
_RAW_FORMATS = "Bbc"
_DTYPE_SIZES = {dtype: size for dtype, (_, size) in _ELEMENT_FORMATS.items()}
# What result_value unpacks a scalar with: each dtype's first letter, which is
# its value's own format. bf16 has none in struct (its letters are patterns).
_SCALAR_FORMATS = {dtype: "<" + letters[0] for dtype, (letters, _) in _ELEMENT_FORMATS.items() if dtype != "bf16"}


def _buffer(data, value, writable=False):
    """A ctypes view of `data` for `value` (a ValueInfo): C-contiguous, and
    of its dtype's elements or raw bytes, so that float64 data cannot pass
    for float32 data of the same size."""
    view = memoryview(data)
    what = "%s %d (%s%s)" % (value.kind, value.index, value.dtype, list(value.shape))
    if not view.c_contiguous:
        raise Error("%s: the buffer is not C-contiguous" % what)
    order, element = view.format[:-1], view.format[-1:]
    letters, size = _ELEMENT_FORMATS[value.dtype]
    if order not in ("", "@", "=", "<") or not (
            element in _RAW_FORMATS or (element in letters and view.itemsize == size)):
        raise Error("%s takes %s elements or raw bytes, not a buffer of '%s' (%d bytes each)"
                    % (what, value.dtype, view.format, view.itemsize))
    view = view.cast("B")
    if writable and view.readonly:
        raise Error("%s: the buffer to read into is read-only" % what)
    if view.readonly:
        # ctypes takes the address of a writable buffer only.
        copy = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        return copy, view.nbytes
    return (ctypes.c_char * view.nbytes).from_buffer(view), view.nbytes


# __cuda_array_interface__'s typestr for each dtype's elements; bf16, which
# no such typestr names, as 2-byte raw values.
_DEVICE_TYPESTRS = {"f32": ("<f4",), "f64": ("<f8",), "f16": ("<f2",), "bf16": ("<V2", "|V2"), "i64": ("<i8",),
                    "i1": ("|b1",)}


def _on_device(data):
    return data is not None and hasattr(data, "__cuda_array_interface__")


def _device_array(data, value, writable=False):
    """The device pointer and stream of `data`, an object with
    __cuda_array_interface__ (version 2 or 3) holding `value`'s elements:
    its shape, its dtype, C-contiguous. The stream (version 3's, or the
    legacy default stream) is the one the copy is ordered after."""
    interface = data.__cuda_array_interface__
    what = "%s %d (%s%s)" % (value.kind, value.index, value.dtype, list(value.shape))
    shape, typestr = tuple(interface["shape"]), interface["typestr"]
    if shape != tuple(value.shape) or typestr not in _DEVICE_TYPESTRS[value.dtype]:
        raise Error("%s takes a device array of shape %s and typestr %s, not %s %s"
                    % (what, list(value.shape), " or ".join(_DEVICE_TYPESTRS[value.dtype]), list(shape), typestr))
    strides = interface.get("strides")
    if strides is not None:
        contiguous, step = [], _DTYPE_SIZES[value.dtype]
        for extent in reversed(shape):
            contiguous.insert(0, step)
            step *= extent
        if tuple(strides) != tuple(contiguous) and any(extent > 1 for extent in shape):
            raise Error("%s: the device array is not C-contiguous (strides %s)" % (what, list(strides)))
    pointer, readonly = interface["data"]
    if writable and readonly:
        raise Error("%s: the device array to read into is read-only" % what)
    if not pointer and value.byte_size:
        raise Error("%s: the device array's pointer is null" % what)
    # Version 3's stream: None (nothing to wait for), 1 (the legacy default
    # stream, also what None is given as) or 2 (per-thread) or a cudaStream_t.
    stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
    return ctypes.c_void_p(pointer), value.byte_size, ctypes.c_void_p(stream or None)


def _scalar(info, data, what):
    """A scalar value's bytes as a Python number."""
    if info.shape != () or info.dtype not in _SCALAR_FORMATS:
        raise Error("%s is %s%s, not a scalar" % (what, info.dtype, list(info.shape)))
    return struct.unpack(_SCALAR_FORMATS[info.dtype], bytes(data))[0]


class HostCopy:
    """A read that arrives later (ampjit_host_copy), from Session.read_async
    or Session.result_async: on "cuda" a copy into pinned memory enqueued
    after the steps so far, on "cpu" the value taken at once. Later steps do
    not change it. It may outlive its session."""

    def __init__(self, lib, handle, info, what):
        self._lib, self._handle, self._info, self._what = lib, handle, info, what

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.c.ampjit_host_copy_destroy(self._handle)

    def ready(self):
        """Whether the value has arrived; never blocks."""
        return self._lib.c.ampjit_host_copy_ready(self._handle) == 1

    def wait(self, into=None):
        """Waits for the value: its bytes (or into `into`, a writable buffer)."""
        target = into if into is not None else bytearray(self._info.byte_size)
        buffer, size = _buffer(target, self._info, writable=True)
        self._lib.check(self._lib.c.ampjit_host_copy_wait(self._handle, buffer, size))
        return target

    def value(self):
        """Waits for a scalar value (the loss) and gives it as a Python number."""
        return _scalar(self._info, self.wait(), self._what)


class Session:
    """A plan prepared on a backend with its state (ampjit_session). An
    argument is given by its index or its name (Plan.argument_index)."""

    def __init__(self, lib, handle, plan):
        self._lib, self._handle, self.plan = lib, handle, plan

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.c.ampjit_session_destroy(self._handle)

    @property
    def steps(self):
        return self._lib.c.ampjit_session_steps(self._handle)

    @property
    def stream(self):
        """The cudaStream_t every step runs on, as an int (None on "cpu")."""
        return self._lib.c.ampjit_session_stream(self._handle)

    def synchronize(self):
        """Waits until everything the session enqueued has run."""
        self._lib.check(self._lib.c.ampjit_session_synchronize(self._handle))

    def write(self, index, data):
        """Sets argument `index` from a buffer of exactly its byte size, or
        from a device array of its shape and dtype."""
        index = self.plan.argument_index(index)
        if _on_device(data):
            pointer, size, stream = _device_array(data, self._argument(index))
            self._lib.check(self._lib.c.ampjit_session_write_device(self._handle, index, pointer, size, stream))
            return
        buffer, size = _buffer(data, self._argument(index))
        self._lib.check(self._lib.c.ampjit_session_write(self._handle, index, buffer, size))

    def _argument(self, index):
        if not 0 <= index < len(self.plan.arguments):
            raise Error("argument %d does not exist: the plan has %d arguments" % (index, len(self.plan.arguments)))
        return self.plan.arguments[index]

    def _result(self, index):
        if not 0 <= index < len(self.plan.results):
            raise Error("result %d does not exist: the plan has %d results" % (index, len(self.plan.results)))
        return self.plan.results[index]

    def fill(self, index, value):
        """Sets every element of argument `index` to `value`."""
        index = self.plan.argument_index(index)
        self._lib.check(self._lib.c.ampjit_session_fill(self._handle, index, float(value)))

    def write_values(self, index, values):
        """Sets argument `index` from Python numbers, one per element in
        row-major order, each rounded to its dtype as the runtime rounds
        (f16 and bf16 included)."""
        index = self.plan.argument_index(index)
        values = (ctypes.c_double * len(values))(*values) if not isinstance(values, ctypes.Array) else values
        self._lib.check(self._lib.c.ampjit_session_write_values(self._handle, index, values, len(values)))

    def read_values(self, index):
        """Argument `index`'s elements as Python floats, in row-major order."""
        index = self.plan.argument_index(index)
        count = self._argument(index).byte_size // _DTYPE_SIZES[self._argument(index).dtype]
        values = (ctypes.c_double * count)()
        self._lib.check(self._lib.c.ampjit_session_read_values(self._handle, index, values, count))
        return list(values)

    def read(self, index, into=None):
        """Argument `index`'s bytes: into the writable buffer or device array
        `into`, or new."""
        index = self.plan.argument_index(index)
        if _on_device(into):
            pointer, size, stream = _device_array(into, self._argument(index), writable=True)
            self._lib.check(self._lib.c.ampjit_session_read_device(self._handle, index, pointer, size, stream))
            return into
        target = into if into is not None else bytearray(self._argument(index).byte_size)
        buffer, size = _buffer(target, self._argument(index), writable=True)
        self._lib.check(self._lib.c.ampjit_session_read(self._handle, index, buffer, size))
        return target

    def run(self):
        """One step; state is updated inside the session."""
        self._lib.check(self._lib.c.ampjit_session_run(self._handle))

    def result(self, index, into=None):
        """Result `index` of the last step, as bytes (or into `into`, a
        buffer or a device array)."""
        if _on_device(into):
            pointer, size, stream = _device_array(into, self._result(index), writable=True)
            self._lib.check(self._lib.c.ampjit_session_read_result_device(self._handle, index, pointer, size, stream))
            return into
        target = into if into is not None else bytearray(self._result(index).byte_size)
        buffer, size = _buffer(target, self._result(index), writable=True)
        self._lib.check(self._lib.c.ampjit_session_read_result(self._handle, index, buffer, size))
        return target

    def result_value(self, index):
        """A scalar result of the last step (the loss) as a Python number."""
        info = self._result(index)
        return _scalar(info, self.result(index) if info.shape == () else b"", "result %d" % index)

    def read_async(self, index):
        """Argument `index`, read without waiting for the steps enqueued so
        far: a HostCopy to wait for later."""
        index = self.plan.argument_index(index)
        info = self._argument(index)
        return self._host_copy(self._lib.c.ampjit_session_read_async(self._handle, index), info,
                               "argument %d" % index)

    def result_async(self, index):
        """Result `index` of the last step (the loss), read without waiting
        for the steps enqueued so far: a HostCopy to wait for later."""
        info = self._result(index)
        return self._host_copy(self._lib.c.ampjit_session_read_result_async(self._handle, index), info,
                               "result %d" % index)

    def _host_copy(self, handle, info, what):
        if not handle:
            raise self._lib.error()
        return HostCopy(self._lib, handle, info, what)
