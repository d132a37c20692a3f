// At O2 the report names each low-precision copy amp-master-weights added and
// its master: by argument number and by name (a framework's location name,
// else argN, as plans name them); the summary counts them.
// RUN: amp-opt %s --amp-pipeline="level=O2 dtype=bf16 report=%t.json" -o /dev/null
// RUN: FileCheck %s < %t.json

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"},
                %w: tensor<8x8xf32> {jit.role = "param"} loc("fc1.weight"),
                %v: tensor<8x8xf32> {jit.role = "param"}) -> tensor<f32> {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %m2 = jit.matmul %m, %v : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = jit.sum %m2 axes = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// CHECK: "master_weights": [
// CHECK-NEXT: {
// CHECK-NEXT: "copy": {
// CHECK-NEXT: "argument": 3,
// CHECK-NEXT: "name": "fc1.weight.bf16",
// CHECK-NEXT: "type": "tensor<8x8xbf16>"
// CHECK-NEXT: },
// CHECK-NEXT: "function": "step",
// CHECK-NEXT: "master": {
// CHECK-NEXT: "argument": 1,
// CHECK-NEXT: "name": "fc1.weight"
// CHECK-NEXT: }
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "copy": {
// CHECK-NEXT: "argument": 4,
// CHECK-NEXT: "name": "arg4",
// CHECK-NEXT: "type": "tensor<8x8xbf16>"
// CHECK-NEXT: },
// CHECK-NEXT: "function": "step",
// CHECK-NEXT: "master": {
// CHECK-NEXT: "argument": 2,
// CHECK-NEXT: "name": "arg2"
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: ],
// CHECK: "master_weight_copies": 2,
