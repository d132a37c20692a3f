// --jit-fuse-elementwise first moves each scalar step up ahead of the tensor
// steps it does not depend on: an update that interleaves functions of a step
// count with its tensor arithmetic becomes one scalar program and one tensor
// program instead of five runs. The results are the unfused plan's bits.
// RUN: ampjit-run %s --function=update --jit-fuse-elementwise --print-plan | FileCheck %s
// RUN: ampjit-run %s --function=update --steps=3 --arg=1=0.5 --print-results > %t.plain
// RUN: ampjit-run %s --function=update --jit-fuse-elementwise --steps=3 --arg=1=0.5 --print-results > %t.fused
// RUN: diff %t.plain %t.fused
// RUN: ampjit-run %s --function=read_before_write --jit-fuse-elementwise --print-plan | FileCheck %s --check-prefix=WAR
// RUN: ampjit-run %s --function=read_before_write --steps=3 --print-results > %t.war.plain
// RUN: ampjit-run %s --function=read_before_write --jit-fuse-elementwise --steps=3 --print-results > %t.war.fused
// RUN: diff %t.war.plain %t.war.fused

// The step count's increment (written in place) and 1/t run first, as one
// program; then the three tensor ops as another, reading 1/t.
// CHECK-LABEL: plan @update
// CHECK: step 0: fused_elementwise f32, f32 -> f32, f32 (compute f32) in0=%2 in1=[[ONE:%[0-9]+]] out0=%2 out1=[[INV:%[0-9]+]]  // fused: jit.add into 'arg2', jit.div
// CHECK-NEXT: r0 = load in0 : f32
// CHECK-NEXT: r1 = load in1 : f32
// CHECK-NEXT: r2 = add r0, r1 : f32
// CHECK-NEXT: r3 = div r1, r2 : f32
// CHECK-NEXT: out0 = r2
// CHECK-NEXT: out1 = r3
// CHECK-NEXT: step 1: fused_elementwise f32, f32, f32, f32 -> f32, f32 (compute f32) in0=%1 in1=%3 in2=[[INV]] in3=%0 out0=%1 out1=%0  // fused: jit.mul into 'arg1', jit.mul, jit.sub into 'arg0'
// CHECK-NOT: step 2:
func.func @update(%p: tensor<8xf32> {jit.role = "param"}, %m: tensor<8xf32> {jit.role = "opt_state"},
                  %t: tensor<f32> {jit.role = "opt_state"}, %g: tensor<8xf32> {jit.role = "input"})
    -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<8xf32> {jit.tied = 1 : i64}, tensor<f32> {jit.tied = 2 : i64}) {
  %one = jit.constant dense<1.0> : tensor<f32>
  %m2 = jit.mul %m, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %t2 = jit.add %t, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %inv = jit.div %one, %t2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %u = jit.mul %m2, %inv : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %p2 = jit.sub %p, %u : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %p2, %m2, %t2 : tensor<8xf32>, tensor<8xf32>, tensor<f32>
}

// A tensor step that reads the old count keeps the in-place increment after
// it: the scalar may not move ahead of a reader of what it overwrites.
// WAR-LABEL: plan @read_before_write
// WAR: step 0: {{.*}}elementwise {{.*}}// {{.*}}jit.mul
// WAR: step 1: elementwise add f32, f32 -> f32 (compute f32) lhs=%1 rhs=%{{[0-9]+}} out=%1  // jit.add into 'arg1'
// WAR-NOT: step 2:
func.func @read_before_write(%p: tensor<8xf32> {jit.role = "param"}, %t: tensor<f32> {jit.role = "opt_state"})
    -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<f32> {jit.tied = 1 : i64}) {
  %one = jit.constant dense<1.0> : tensor<f32>
  %p2 = jit.mul %p, %t : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %t2 = jit.add %t, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %p2, %t2 : tensor<8xf32>, tensor<f32>
}
