// Functions codegen refuses, with the reason at the op.
// RUN: not ampjit-run %s --print-plan 2>&1 | FileCheck %s --check-prefix=WHICH
// RUN: not ampjit-run %s --function=read_after_update --print-plan 2>&1 | FileCheck %s --check-prefix=HAZARD
// RUN: not ampjit-run %s --function=tied_to_another --print-plan 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not ampjit-run %s --function=missing --print-plan 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not ampjit-run %s --function=huge_argument --print-plan 2>&1 | FileCheck %s --check-prefix=HUGE

// WHICH: error: the module has several functions ('@read_after_update', '@tied_to_another', ...): say which one to compile
// MISSING: error: the module has no function '@missing'

// The update writes %w in place, then the matmul would read the new value.
// HAZARD: errors.mlir:[[# @LINE + 6]]:8: error: 'jit.matmul' op reads argument #0 after it is updated in place
// HAZARD: note: updated here, by its tied result
func.func @read_after_update(%w: tensor<8x8xf32> {jit.role = "param"}, %g: tensor<8x8xf32> {jit.role = "grad"},
                             %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<8x8xf32> {jit.tied = 0 : i64}, tensor<8x8xf32>) {
  %w_new = jit.sgd_update %w, %g lr %lr : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %m = jit.matmul %w, %g : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %w_new, %m : tensor<8x8xf32>, tensor<8x8xf32>
}

// State set to another argument is a copy made last (argument-copies.mlir);
// a swap would have to read an argument the same step overwrites.
// OTHER: error: 'func.return' op result #0 is tied to argument #0 and returns argument #1 unchanged, which the step also updates
func.func @tied_to_another(%a: tensor<4xf32> {jit.role = "param"}, %b: tensor<4xf32> {jit.role = "param"})
    -> (tensor<4xf32> {jit.tied = 0 : i64}, tensor<4xf32> {jit.tied = 1 : i64}) {
  return %b, %a : tensor<4xf32>, tensor<4xf32>
}

// An argument no op reads still needs a buffer; 2^62 x 4 elements is past what a tensor holds.
// HUGE: error: argument #0 has type 'tensor<4611686018427387904x4xf32>', which the runtime has no buffer for (it holds statically shaped tensors of at most 2^48 elements of f16, bf16, f32, f64, i64 or i1)
func.func @huge_argument(%x: tensor<4611686018427387904x4xf32> {jit.role = "input"}, %y: tensor<2xf32> {jit.role = "input"})
    -> tensor<2xf32> {
  %z = jit.neg %y : tensor<2xf32>
  return %z : tensor<2xf32>
}
