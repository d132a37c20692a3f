// The CUDA pipeline's batch-norm epilogues on a residual block's tail
// (NHWC, f16 activations, f32 statistics): relu(batch_norm(x) + z) becomes
// one batch_norm step with activation=add_relu, and relu_grad followed by
// batch_norm_grad one batch_norm_grad step that also writes the residual's
// gradient (dz); relu(batch_norm(x)) likewise with activation=relu. Nothing
// fuses when an intermediate has another reader, and without the flag. A
// saved plan keeps the epilogues.
// RUN: ampjit-run %s --function=add_relu --jit-fuse-batch-norm-epilogues --print-plan --steps=1 --print-results --emit-plan=%t.plan | FileCheck %s --check-prefix=ADD
// RUN: ampjit-run %s --load-plan=%t.plan --print-plan --steps=1 --print-results | FileCheck %s --check-prefix=ADD
// RUN: ampjit-run %s --function=add_relu --print-plan | FileCheck %s --check-prefix=OFF
// RUN: ampjit-run %s --function=relu --jit-fuse-batch-norm-epilogues --jit-fuse-elementwise --print-plan --steps=1 --print-results | FileCheck %s --check-prefix=RELU
// RUN: ampjit-run %s --function=normalised_read_twice --jit-fuse-batch-norm-epilogues --print-plan | FileCheck %s --check-prefix=READ-TWICE
// RUN: ampjit-run %s --function=gradient_read_twice --jit-fuse-batch-norm-epilogues --print-plan | FileCheck %s --check-prefix=GRAD-READ-TWICE
// RUN: ampjit-run %s --function=cast_between --jit-fuse-batch-norm-epilogues --print-plan | FileCheck %s --check-prefix=CAST

// ADD-LABEL: plan @add_relu
// ADD: step 0: batch_norm axis=3 eps=1e-05 momentum=0.1 activation=add_relu f16, f32, f32, f32, f32, f16 -> f16, f32, f32, f32, f32 (compute f32) x=%0 weight=%3 bias=%4 running_mean=%5 running_var=%6 z=%1 y=[[Y:%[0-9]+]] save_mean=[[MEAN:%[0-9]+]] save_invstd=[[INVSTD:%[0-9]+]] new_running_mean=%5 new_running_var=%6  // jit.batch_norm + jit.add + jit.relu
// ADD-NEXT: step 1: batch_norm_grad axis=3 activation=add_relu f16, f16, f32, f32, f32, f16, f32 -> f16, f32, f32, f16 (compute f32) dy=%2 x=%0 save_mean=[[MEAN]] save_invstd=[[INVSTD]] weight=%3 y=[[Y]] bias=%4 dx={{%[0-9]+}} dweight={{%[0-9]+}} dbias={{%[0-9]+}} dz={{%[0-9]+}}  // jit.relu_grad + jit.batch_norm_grad
// ADD-NOT: step 2
// It runs on the CPU; where the relu cut y to 0, the residual's gradient
// dz (result 4) is 0 too.
// ADD: result 0: f16[2x4x4x8] [{{[^,]+}}, {{[^,]+}}, {{[^,]+}}, 0, 0, {{[^,]+}}, ...]
// ADD: result 4: f16[2x4x4x8] [{{[^,]+}}, {{[^,]+}}, {{[^,]+}}, 0, 0, {{[^,]+}}, ...]

// OFF-LABEL: plan @add_relu
// OFF-NOT: activation=
// OFF: step 0: batch_norm axis=3
// OFF-NEXT: step 1: elementwise add
// OFF-NEXT: step 2: elementwise relu
// OFF-NEXT: step 3: elementwise relu_grad
// OFF-NEXT: step 4: batch_norm_grad axis=3 f16

// A plain relu: the gradient g feeds only the batch_norm_grad and is gone;
// the elementwise fusion after it finds nothing left to take.
// RELU-LABEL: plan @relu
// RELU: step 0: batch_norm axis=3 eps=1e-05 momentum=0.1 activation=relu {{.*}}  // jit.batch_norm + jit.relu
// RELU-NEXT: step 1: batch_norm_grad axis=3 activation=relu f16, f16, f32, f32, f32, f16, f32 -> f16, f32, f32 (compute f32) {{.*}}  // jit.relu_grad + jit.batch_norm_grad
// RELU-NOT: step 2
// RELU: result 3: f32[8]

// The normalised output is also returned: nothing fuses.
// READ-TWICE-LABEL: plan @normalised_read_twice
// READ-TWICE-NOT: activation=
// READ-TWICE: step 1: elementwise add
// READ-TWICE: step 4: batch_norm_grad axis=3 f16

// A plain relu whose gradient has another reader: the forward fuses, the
// backward cannot (a relu-only batch_norm_grad has no dz to hand g to).
// GRAD-READ-TWICE-LABEL: plan @gradient_read_twice
// GRAD-READ-TWICE: step 0: batch_norm axis=3 eps=1e-05 momentum=0.1 activation=relu
// GRAD-READ-TWICE-NEXT: step 1: elementwise relu_grad
// GRAD-READ-TWICE-NEXT: step 2: batch_norm_grad axis=3 f16

// A cast between the batch norm and the add: the types differ, nothing fuses.
// CAST-LABEL: plan @cast_between
// CAST-NOT: activation=
// CAST: elementwise convert

func.func @add_relu(
    %x: tensor<2x4x4x8xf16> {jit.role = "input"},
    %z: tensor<2x4x4x8xf16> {jit.role = "input"},
    %dy: tensor<2x4x4x8xf16> {jit.role = "input"},
    %w: tensor<8xf32> {jit.role = "param"},
    %b: tensor<8xf32> {jit.role = "param"},
    %rm: tensor<8xf32> {jit.role = "hyper"},
    %rv: tensor<8xf32> {jit.role = "hyper"})
    -> (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<2x4x4x8xf16>,
        tensor<8xf32> {jit.tied = 5 : i64}, tensor<8xf32> {jit.tied = 6 : i64}) {
  %n, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %w bias %b running_mean %rm running_var %rv
      axis = 3 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s = jit.add %n, %z : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>) -> tensor<2x4x4x8xf16>
  %y = jit.relu %s : tensor<2x4x4x8xf16>
  %g = jit.relu_grad %dy, %y : tensor<2x4x4x8xf16>
  %dx, %dw, %db = jit.batch_norm_grad %g, %x, %mean, %invstd weight %w axis = 3
      : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>)
  return %y, %dx, %dw, %db, %g, %rm1, %rv1
      : tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<2x4x4x8xf16>,
        tensor<8xf32>, tensor<8xf32>
}

func.func @relu(
    %x: tensor<2x4x4x8xf16> {jit.role = "input"},
    %dy: tensor<2x4x4x8xf16> {jit.role = "input"},
    %w: tensor<8xf32> {jit.role = "param"},
    %b: tensor<8xf32> {jit.role = "param"},
    %rm: tensor<8xf32> {jit.role = "hyper"},
    %rv: tensor<8xf32> {jit.role = "hyper"})
    -> (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>) {
  %n, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %w bias %b running_mean %rm running_var %rv
      axis = 3 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %y = jit.relu %n : tensor<2x4x4x8xf16>
  %g = jit.relu_grad %dy, %y : tensor<2x4x4x8xf16>
  %dx, %dw, %db = jit.batch_norm_grad %g, %x, %mean, %invstd weight %w axis = 3
      : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>)
  return %y, %dx, %dw, %db : tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>
}

func.func @normalised_read_twice(
    %x: tensor<2x4x4x8xf16> {jit.role = "input"},
    %z: tensor<2x4x4x8xf16> {jit.role = "input"},
    %dy: tensor<2x4x4x8xf16> {jit.role = "input"},
    %w: tensor<8xf32> {jit.role = "param"},
    %b: tensor<8xf32> {jit.role = "param"},
    %rm: tensor<8xf32> {jit.role = "hyper"},
    %rv: tensor<8xf32> {jit.role = "hyper"})
    -> (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>) {
  %n, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %w bias %b running_mean %rm running_var %rv
      axis = 3 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s = jit.add %n, %z : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>) -> tensor<2x4x4x8xf16>
  %y = jit.relu %s : tensor<2x4x4x8xf16>
  %g = jit.relu_grad %dy, %y : tensor<2x4x4x8xf16>
  %dx, %dw, %db = jit.batch_norm_grad %g, %x, %mean, %invstd weight %w axis = 3
      : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>)
  return %n, %y, %dx : tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>
}

func.func @gradient_read_twice(
    %x: tensor<2x4x4x8xf16> {jit.role = "input"},
    %dy: tensor<2x4x4x8xf16> {jit.role = "input"},
    %w: tensor<8xf32> {jit.role = "param"},
    %b: tensor<8xf32> {jit.role = "param"},
    %rm: tensor<8xf32> {jit.role = "hyper"},
    %rv: tensor<8xf32> {jit.role = "hyper"})
    -> (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>) {
  %n, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %w bias %b running_mean %rm running_var %rv
      axis = 3 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %y = jit.relu %n : tensor<2x4x4x8xf16>
  %g = jit.relu_grad %dy, %y : tensor<2x4x4x8xf16>
  %dx, %dw, %db = jit.batch_norm_grad %g, %x, %mean, %invstd weight %w axis = 3
      : (tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>)
  return %y, %dx, %g : tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>, tensor<2x4x4x8xf16>
}

func.func @cast_between(
    %x: tensor<2x4x4x8xf16> {jit.role = "input"},
    %z: tensor<2x4x4x8xf32> {jit.role = "input"},
    %w: tensor<8xf32> {jit.role = "param"},
    %b: tensor<8xf32> {jit.role = "param"},
    %rm: tensor<8xf32> {jit.role = "hyper"},
    %rv: tensor<8xf32> {jit.role = "hyper"})
    -> tensor<2x4x4x8xf32> {
  %n, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %w bias %b running_mean %rm running_var %rv
      axis = 3 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x4x4x8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %c = amp.cast %n : tensor<2x4x4x8xf16> to tensor<2x4x4x8xf32>
  %s = jit.add %c, %z : (tensor<2x4x4x8xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x4x8xf32>
  %y = jit.relu %s : tensor<2x4x4x8xf32>
  return %y : tensor<2x4x4x8xf32>
}
