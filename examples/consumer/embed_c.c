/* A framework's way in through the C API, in C (C11), built against the
   installed ampjit package only (examples/consumer/CMakeLists.txt). The step
   comes as jit-dialect MLIR text (examples/mnist_train_step.mlir: the MNIST
   classifier with SGD and a dynamic loss scaler); ampjit compiles it at O2
   with f16 (f32 master weights, f16 copies derived from them) and a session
   runs it on the CPU, holding the state from step to step.

   Checks what such a framework relies on: the plan describes its arguments,
   including the f16 copies O2 added, which follow their masters and cannot
   be written; training lowers the loss; a batch with a NaN is skipped by the
   loss scaler, not an error; malformed IR is an error that names the source
   and line. Exits non-zero, saying why, when any of that fails.
   Usage: embed_c STEP.mlir */

#include <ampjit-c/Ampjit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void expect(int ok, const char* what) {
  printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  failures += ok ? 0 : 1;
}

static void die(const char* what, const char* why) {
  fprintf(stderr, "embed_c: %s: %s\n", what, why);
  exit(2);
}

static char* readFile(const char* path, size_t* length) {
  FILE* file = fopen(path, "rb");
  if (!file)
    die("cannot read", path);
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char* text = malloc((size_t)size);
  if (!text || fread(text, 1, (size_t)size, file) != (size_t)size)
    die("cannot read", path);
  fclose(file);
  *length = (size_t)size;
  return text;
}

/* A small deterministic generator, uniform in [-1, 1). */
static double uniform(unsigned long long* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static size_t elements(const ampjit_value_info* info) {
  size_t count = 1;
  for (size_t d = 0; d < info->rank; ++d)
    count *= (size_t)info->shape[d];
  return count;
}

/* Images: each of the 10 labels' images share a prototype plus noise, so the
   model has something to learn; labels i % 10. */
static void writeBatch(ampjit_session* session, const ampjit_value_info* images, float nanAt) {
  static float prototypes[10][784];
  unsigned long long state = 5;
  for (int label = 0; label < 10; ++label)
    for (int pixel = 0; pixel < 784; ++pixel)
      prototypes[label][pixel] = (float)uniform(&state);
  size_t count = elements(images);
  float* pixels = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i)
    pixels[i] = prototypes[(i / 784) % 10][i % 784] + 0.5f * (float)uniform(&state);
  if (nanAt >= 0)
    pixels[(size_t)nanAt] = NAN;
  if (ampjit_session_write(session, 0, pixels, count * sizeof(float)) != AMPJIT_OK)
    die("writing the images", ampjit_last_error());
  free(pixels);
}

int main(int argc, char** argv) {
  if (argc != 2)
    die("usage", "embed_c STEP.mlir");
  size_t length;
  char* text = readFile(argv[1], &length);
  ampjit_plan* plan = ampjit_compile_module(text, length, argv[1], "level=O2 dtype=f16 target=cpu",
                                            "fuse-elementwise");
  free(text);
  if (!plan)
    die("compiling", ampjit_last_error());
  printf("ampjit %s: plan with %zu arguments, %zu results\n", ampjit_version(), ampjit_plan_argument_count(plan),
         ampjit_plan_result_count(plan));

  ampjit_session* session = ampjit_session_create(plan, "cpu");
  if (!session)
    die("creating the session", ampjit_last_error());

  /* The state: parameters uniform in +-1/sqrt(fan-in), optimizer state and
     the scaler's counters zero (as created), lr 0.01, the scale 2^16. */
  unsigned long long state = 11;
  size_t derived = 0, derivedIndex = 0;
  ampjit_value_info images;
  if (ampjit_plan_argument(plan, 0, &images) != AMPJIT_OK)
    die("describing argument 0", ampjit_last_error());
  for (size_t i = 0; i < ampjit_plan_argument_count(plan); ++i) {
    ampjit_value_info info;
    if (ampjit_plan_argument(plan, i, &info) != AMPJIT_OK)
      die("describing an argument", ampjit_last_error());
    if (info.derived_from >= 0) {
      derived += 1;
      derivedIndex = i;
    }
    if (info.role == AMPJIT_ROLE_PARAM && info.derived_from < 0) {
      size_t count = elements(&info);
      double bound = 1.0 / sqrt(info.rank == 2 ? (double)info.shape[1] : 512.0);
      float* values = malloc(count * sizeof(float));
      for (size_t e = 0; e < count; ++e)
        values[e] = (float)(bound * uniform(&state));
      if (ampjit_session_write(session, i, values, info.byte_size) != AMPJIT_OK)
        die("writing a parameter", ampjit_last_error());
      free(values);
    }
  }
  if (ampjit_session_fill(session, 14, 0.01) != AMPJIT_OK || ampjit_session_fill(session, 15, 65536.0) != AMPJIT_OK)
    die("writing lr and the scale", ampjit_last_error());
  int64_t labels[64];
  for (int i = 0; i < 64; ++i)
    labels[i] = i % 10;
  if (ampjit_session_write(session, 1, labels, sizeof labels) != AMPJIT_OK)
    die("writing the labels", ampjit_last_error());

  ampjit_value_info copy;
  ampjit_plan_argument(plan, derivedIndex, &copy);
  expect(derived == 6 && copy.dtype == AMPJIT_DTYPE_F16 && copy.role == AMPJIT_ROLE_PARAM,
         "O2 added an f16 copy of each of the 6 parameters, derived from its f32 master");
  void* zeros = calloc(1, copy.byte_size);
  expect(ampjit_session_write(session, derivedIndex, zeros, copy.byte_size) == AMPJIT_ERROR &&
             strstr(ampjit_last_error(), "is derived from argument") != NULL,
         "writing a derived copy is refused: it follows its master");
  free(zeros);

  writeBatch(session, &images, -1);
  float first = 0, loss = 0;
  for (int step = 0; step < 40; ++step) {
    if (ampjit_session_run(session) != AMPJIT_OK)
      die("running a step", ampjit_last_error());
    if (ampjit_session_read_result(session, 0, &loss, sizeof loss) != AMPJIT_OK)
      die("reading the loss", ampjit_last_error());
    if (step == 0)
      first = loss;
  }
  char line[200];
  snprintf(line, sizeof line, "40 steps at O2-f16 lower the loss: %f -> %f", first, loss);
  expect(loss < first / 4, line);

  float scaleBefore, scaleAfter;
  int64_t skipped = 0;
  ampjit_session_read(session, 15, &scaleBefore, sizeof scaleBefore);
  writeBatch(session, &images, 100);
  expect(ampjit_session_run(session) == AMPJIT_OK, "a batch with a NaN runs");
  ampjit_session_read(session, 15, &scaleAfter, sizeof scaleAfter);
  ampjit_session_read(session, 18, &skipped, sizeof skipped);
  snprintf(line, sizeof line, "and the scaler skips it: skipped steps %lld, the scale %g -> %g", (long long)skipped,
           scaleBefore, scaleAfter);
  expect(skipped == 1 && scaleAfter == scaleBefore / 2, line);

  const char* broken = "func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                       "  %y = jit.relu %x : tensor<4xf16>\n"
                       "  return %y : tensor<4xf32>\n}\n";
  ampjit_plan* none = ampjit_compile_module(broken, strlen(broken), "framework-graph.mlir", NULL, NULL);
  snprintf(line, sizeof line, "malformed IR is an error at its source line: %.120s", ampjit_last_error());
  expect(none == NULL && strstr(ampjit_last_error(), "framework-graph.mlir:2:") != NULL, line);

  ampjit_session_destroy(session);
  ampjit_plan_destroy(plan);
  printf("%s\n", failures == 0 ? "embed_c: all checks passed" : "embed_c: checks failed");
  return failures == 0 ? 0 : 1;
}
