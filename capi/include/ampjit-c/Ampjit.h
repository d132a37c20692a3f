/*===- ampjit-c/Ampjit.h - ampjit's C API -----------------------*- C -*-===*\
|*                                                                          *|
|* The way in for a framework or language that is not C++: a training step  *|
|* as MLIR text in the jit dialect (state as `jit.role` arguments, each new *|
|* value a result `jit.tied` to its argument, as in                         *|
|* examples/mnist_train_step.mlir) is compiled with AMP into a plan, and a  *|
|* session runs the plan on a backend with state it holds from step to      *|
|* step. Plain C with opaque handles and byte buffers, so ctypes, cffi or   *|
|* any FFI can call it (python/ampjit: the Python package over it).        *|
|*                                                                          *|
|* Errors: a call that fails returns AMPJIT_ERROR (or NULL) and changes     *|
|* nothing (ampjit_session_run aside: see there); ampjit_last_error() then  *|
|* says what failed and where, naming the call, the argument or the source  *|
|* line. No call aborts the process.                                        *|
|* Handles may be used from any thread, one call at a time per handle.      *|
|*                                                                          *|
|* Data crosses as little-endian bytes in row-major order: f32, f64 and i64 *|
|* as themselves, f16 and bf16 as their 16-bit patterns, i1 as one byte (0  *|
|* or 1) per element. ampjit_value_info.byte_size is the size of a value.   *|
|*                                                                          *|
\*===--------------------------------------------------------------------===*/

#ifndef AMPJIT_C_AMPJIT_H
#define AMPJIT_C_AMPJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a declaration here changes incompatibly. */
#define AMPJIT_C_API_VERSION 1

typedef enum ampjit_status { AMPJIT_OK = 0, AMPJIT_ERROR = 1 } ampjit_status;

/* The element types, numbered as the runtime's DType. */
typedef enum ampjit_dtype {
  AMPJIT_DTYPE_F32 = 0,
  AMPJIT_DTYPE_F64 = 1,
  AMPJIT_DTYPE_F16 = 2,
  AMPJIT_DTYPE_BF16 = 3,
  AMPJIT_DTYPE_I64 = 4,
  AMPJIT_DTYPE_I1 = 5
} ampjit_dtype;

/* What a value is to the step: an argument's `jit.role`, or for a result
   that updates no argument, AMPJIT_ROLE_OUTPUT. */
typedef enum ampjit_role {
  AMPJIT_ROLE_INPUT = 0,        /* data fed each step */
  AMPJIT_ROLE_PARAM = 1,        /* a model parameter */
  AMPJIT_ROLE_GRAD = 2,         /* an accumulated gradient */
  AMPJIT_ROLE_OPT_STATE = 3,    /* an optimizer buffer or step count */
  AMPJIT_ROLE_SCALER_STATE = 4, /* the loss scale and the scaler's counters */
  AMPJIT_ROLE_HYPER = 5,        /* the learning rate and the like */
  AMPJIT_ROLE_OUTPUT = 8        /* a result that is not state (the loss) */
} ampjit_role;

typedef struct ampjit_plan ampjit_plan;
typedef struct ampjit_session ampjit_session;

/* An argument or a result of a plan. The pointers stay valid while the plan
   (or the session it was read from) lives. */
typedef struct ampjit_value_info {
  ampjit_dtype dtype;
  ampjit_role role;
  size_t rank;
  const int64_t* shape;  /* rank extents */
  size_t byte_size;      /* what ampjit_session_read and _write move */
  const char* name;      /* an argument's name location in the IR
                            (`loc("fc1.weight")`), else "argN"; a
                            result's plan buffer name */
  int64_t tied_argument; /* a result: the argument it updates in place; else -1 */
  int64_t derived_from;  /* an argument a pass added (O2's f16 copy of a
                            parameter): its source argument; else -1 */
} ampjit_value_info;

/* "0.1.0": the library's version. */
const char* ampjit_version(void);
/* The message of the last call on this thread that failed ("" if none).
   Valid until the next failing call on this thread. */
const char* ampjit_last_error(void);
/* "f16", "param", ...: the names the IR and the messages use. */
const char* ampjit_dtype_name(ampjit_dtype dtype);
const char* ampjit_role_name(ampjit_role role);
/* 1 when this library has the CUDA backend built in, else 0. */
int ampjit_cuda_backend_built(void);
/* The CUDA devices the runtime reports: 0 without the backend, a driver or a
   device. A session on "cuda:N" needs N below it. */
int ampjit_cuda_device_count(void);

/*--- Plans ----------------------------------------------------------------*/

/* Compiles the function of a module of the jit and amp dialects.
     text, length    the module's text (need not end in NUL)
     source_name     how messages name it ("step.mlir" gives "step.mlir:3:7")
     amp_pipeline    amp-opt's --amp-pipeline options ("level=O1 dtype=f16
                     target=cpu"); NULL or "": no AMP rewriting
     plan_options    space-separated plan rewrites, NULL or "" for none:
                     fuse-elementwise, fuse-gemm-epilogues,
                     fuse-batch-norm-epilogues, fuse-gradient-accumulation,
                     overlap-weight-gradients (the last four are the CUDA
                     backend's: its libraries run them fused),
                     defer-optimizer-updates, defer-minimum-elements=N,
                     function=NAME (the module's function to compile; by
                     default its only one).
   Returns NULL on failure: malformed IR, a broken verifier rule, bad options,
   an op the runtime cannot run. Free with ampjit_plan_destroy. */
ampjit_plan* ampjit_compile_module(const char* text, size_t length, const char* source_name,
                                   const char* amp_pipeline, const char* plan_options);
/* A plan saved by ampjit_plan_save (or `ampjit-run --emit-plan`); NULL if
   the file is missing, corrupt or of another format version. */
ampjit_plan* ampjit_plan_load(const char* path);
ampjit_status ampjit_plan_save(const ampjit_plan* plan, const char* path);
void ampjit_plan_destroy(ampjit_plan* plan);

size_t ampjit_plan_argument_count(const ampjit_plan* plan);
size_t ampjit_plan_result_count(const ampjit_plan* plan);
ampjit_status ampjit_plan_argument(const ampjit_plan* plan, size_t index, ampjit_value_info* info);
ampjit_status ampjit_plan_result(const ampjit_plan* plan, size_t index, ampjit_value_info* info);
/* The index of the argument named `name` (its location name, "fc1.weight";
   an unnamed argument is "argN"). An error when no argument, or more than
   one, has that name; the message lists the names there are. */
ampjit_status ampjit_plan_find_argument(const ampjit_plan* plan, const char* name, size_t* index);
/* The plan as `ampjit-run --print-plan` prints it; free with ampjit_free. */
char* ampjit_plan_to_text(const ampjit_plan* plan);
void ampjit_free(void* memory);

/*--- Sessions: a plan prepared on a backend, with its state ---------------*/

/* Prepares a copy of `plan` on a backend, "cpu", "cuda" or "cuda:N" (device
   N), and gives it every argument, zero-filled, in that backend's memory.
   Each session has a backend of its own (on CUDA: its streams, memory pool
   and graphs).
   Fails with the reason where the backend cannot run: a build without CUDA,
   no device, a plan it cannot prepare. Free with ampjit_session_destroy. */
ampjit_session* ampjit_session_create(const ampjit_plan* plan, const char* backend);
void ampjit_session_destroy(ampjit_session* session);
/* The session's plan, for ampjit_plan_argument and the like. */
const ampjit_plan* ampjit_session_plan(const ampjit_session* session);

/* Sets argument `index` from `bytes` bytes (exactly its byte_size). An
   argument derived from another (its derived_from) cannot be written: it
   follows its source, re-derived before the next step reads it. */
ampjit_status ampjit_session_write(ampjit_session* session, size_t index, const void* data, size_t bytes);
/* Sets every element of argument `index` to `value`, rounded to its dtype
   (a learning rate, the initial loss scale). An integer argument takes only
   a value it holds exactly (i1: 0 or 1). */
ampjit_status ampjit_session_fill(ampjit_session* session, size_t index, double value);
/* Sets argument `index` from `count` doubles (its element count), each
   rounded to its dtype to nearest even as the runtime rounds, so a caller
   without f16 or bf16 types of its own can write them. An integer argument
   takes only values it holds exactly. */
ampjit_status ampjit_session_write_values(ampjit_session* session, size_t index, const double* values,
                                          size_t count);
/* Copies argument `index`'s current value into `data` (`bytes` its
   byte_size). State holds what the last step left, its update included. */
ampjit_status ampjit_session_read(ampjit_session* session, size_t index, void* data, size_t bytes);
/* The same as `count` doubles (its element count): exact for every dtype,
   i64 up to 2^53. */
ampjit_status ampjit_session_read_values(ampjit_session* session, size_t index, double* values, size_t count);
/* Runs one step. State arguments are updated in place; a step the loss
   scaler skips (an inf or NaN gradient) is a success that leaves the
   parameters as they were. A failure inside the backend (a device error, a
   label out of range) may leave the state partly updated. */
ampjit_status ampjit_session_run(ampjit_session* session);
/* Copies result `index` of the last step into `data`. A result tied to an
   argument reads that argument. */
ampjit_status ampjit_session_read_result(ampjit_session* session, size_t index, void* data, size_t bytes);
/* Steps run so far. */
uint64_t ampjit_session_steps(const ampjit_session* session);

/*--- Reads that arrive later ----------------------------------------------*/

/* To log a loss or a weight every step without making the steps wait: the
   reads above wait for the GPU to finish the steps enqueued so far, and the
   GPU then idles while the host enqueues the next. These start the same
   read (argument `index`, or result `index` of the last step) and return at
   once. On "cuda" it is a copy into pinned host memory, enqueued after the
   steps so far; on "cpu" the value is taken at once. Later steps and writes
   do not change it. NULL on error (ampjit_last_error). Free with
   ampjit_host_copy_destroy, before or after the session. */
typedef struct ampjit_host_copy ampjit_host_copy;
ampjit_host_copy* ampjit_session_read_async(ampjit_session* session, size_t index);
ampjit_host_copy* ampjit_session_read_result_async(ampjit_session* session, size_t index);
/* 1 once the value has arrived, 0 before; never blocks. -1 for NULL. */
int ampjit_host_copy_ready(ampjit_host_copy* copy);
/* Waits for the value and copies its `bytes` (its byte size) into `data`;
   may be called again. */
ampjit_status ampjit_host_copy_wait(ampjit_host_copy* copy, void* data, size_t bytes);
/* Never waits, even for a copy that has not arrived: its pinned buffer goes
   to the next read, which lands after it. */
void ampjit_host_copy_destroy(ampjit_host_copy* copy);

/*--- Device memory: sessions on "cuda" ------------------------------------*/

/* For a framework whose tensors live on the GPU: the calls above, from and
   into device memory of the session's device (or managed memory), with no
   trip through the host. `stream` is the caller's cudaStream_t, NULL for the
   legacy default stream: the copy runs after the work enqueued there so far
   and after the session's own (the step before), and the caller's later
   work there waits for it, so it may reuse or free its memory in its own
   stream order. No call here waits on the host, and ampjit_session_run only
   enqueues, so a loop of write_device, run and read_result_device never
   synchronises. ampjit_session_run itself does not wait for the caller's
   stream: write the inputs through write_device (or synchronise) first.
   Errors: a session on "cpu"; a pointer that is host memory or another
   device's, named in the message; an i1 argument, whose bytes only the host
   path checks (use ampjit_session_write); what the host calls refuse. */
ampjit_status ampjit_session_write_device(ampjit_session* session, size_t index, const void* device_data,
                                          size_t bytes, void* stream);
ampjit_status ampjit_session_read_device(ampjit_session* session, size_t index, void* device_data, size_t bytes,
                                         void* stream);
ampjit_status ampjit_session_read_result_device(ampjit_session* session, size_t index, void* device_data,
                                                size_t bytes, void* stream);
/* The stream every step of the session runs on (a cudaStream_t), for a
   caller that orders or times its own work against it; NULL on "cpu". */
void* ampjit_session_stream(const ampjit_session* session);
/* Waits until everything the session enqueued has run (on "cpu": at once). */
ampjit_status ampjit_session_synchronize(ampjit_session* session);

#ifdef __cplusplus
}
#endif

#endif /* AMPJIT_C_AMPJIT_H */
