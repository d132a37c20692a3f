// RUN: amp-opt %s | FileCheck %s
// RUN: amp-opt %s | amp-opt | FileCheck %s
// RUN: amp-opt %s --mlir-print-op-generic | amp-opt | FileCheck %s

// Round trip of every jit op in its custom syntax, and of the state-model
// attributes (jit.role, jit.tied, jit.returned, jit.derived_from, jit.op_id,
// jit.vjp_of).
// The three RUN lines check that the printed form parses back to itself and
// that the generic form parses back to the same custom form. Attributes at
// their default value are elided by the printer; the checks pin that down too.

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary(
// CHECK-SAME:    %arg0: tensor<4x8xf32>, %arg1: tensor<3xf16>, %arg2: tensor<bf16>, %arg3: tensor<2x2xf64>)
func.func @unary(%x: tensor<4x8xf32>, %h: tensor<3xf16>, %b: tensor<bf16>, %d: tensor<2x2xf64>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xf16>, tensor<bf16>, tensor<2x2xf64>,
        tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[NEG:.*]] = jit.neg %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: %[[RELU:.*]] = jit.relu %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: %[[TANH:.*]] = jit.tanh %arg1 : tensor<3xf16>
  // CHECK-NEXT: %[[SIG:.*]] = jit.sigmoid %arg2 : tensor<bf16>
  // CHECK-NEXT: %[[EXP:.*]] = jit.exp %arg3 : tensor<2x2xf64>
  // CHECK-NEXT: %[[LOG:.*]] = jit.log %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: %[[SQRT:.*]] = jit.sqrt %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: %[[RSQRT:.*]] = jit.rsqrt %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: return %[[NEG]], %[[RELU]], %[[TANH]], %[[SIG]], %[[EXP]], %[[LOG]], %[[SQRT]], %[[RSQRT]]
  %0 = jit.neg %x : tensor<4x8xf32>
  %1 = jit.relu %x : tensor<4x8xf32>
  %2 = jit.tanh %h : tensor<3xf16>
  %3 = jit.sigmoid %b : tensor<bf16>
  %4 = jit.exp %d : tensor<2x2xf64>
  %5 = jit.log %x : tensor<4x8xf32>
  %6 = jit.sqrt %x : tensor<4x8xf32>
  %7 = jit.rsqrt %x : tensor<4x8xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7
      : tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xf16>, tensor<bf16>, tensor<2x2xf64>,
        tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @gelu(
func.func @gelu(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[EXACT:.*]] = jit.gelu %arg0 approximate = none : tensor<4x8xf32>
  // CHECK-NEXT: %[[TANH:.*]] = jit.gelu %arg0 approximate = tanh : tensor<4x8xf32>
  // CHECK-NEXT: return %[[EXACT]], %[[TANH]]
  %0 = jit.gelu %x approximate = none : tensor<4x8xf32>
  %1 = jit.gelu %x approximate = tanh : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @pow(
func.func @pow(%x: tensor<4x8xf32>, %h: tensor<8xf16>) -> (tensor<4x8xf32>, tensor<8xf16>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[SQ:.*]] = jit.pow %arg0 exponent = 2.000000e+00 : tensor<4x8xf32>
  // CHECK-NEXT: %[[HALF:.*]] = jit.pow %arg1 exponent = 5.000000e-01 : tensor<8xf16>
  // CHECK-NEXT: %[[NEG:.*]] = jit.pow %arg0 exponent = -1.000000e+00 : tensor<4x8xf32>
  // CHECK-NEXT: return %[[SQ]], %[[HALF]], %[[NEG]]
  %0 = jit.pow %x exponent = 2.0 : tensor<4x8xf32>
  %1 = jit.pow %h exponent = 0.5 : tensor<8xf16>
  %2 = jit.pow %x exponent = -1.0 : tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<8xf16>, tensor<4x8xf32>
}

//===----------------------------------------------------------------------===//
// Elementwise binary with broadcasting
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @binary_same_shape(
func.func @binary_same_shape(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[ADD:.*]] = jit.add %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[SUB:.*]] = jit.sub %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[MUL:.*]] = jit.mul %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[DIV:.*]] = jit.div %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]]
  %0 = jit.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = jit.sub %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = jit.mul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = jit.div %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Trailing-dimension bias, scalar operand, both sides stretching a 1, and a
// rank-extending broadcast on the left.
// CHECK-LABEL: func.func @binary_broadcast(
// CHECK-SAME:    %arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>, %arg2: tensor<f32>, %arg3: tensor<4x1xbf16>, %arg4: tensor<1x8xbf16>, %arg5: tensor<2x1x8xf64>, %arg6: tensor<3x1xf64>)
func.func @binary_broadcast(%x: tensor<4x8xf32>, %bias: tensor<8xf32>, %s: tensor<f32>,
                            %col: tensor<4x1xbf16>, %row: tensor<1x8xbf16>,
                            %d3: tensor<2x1x8xf64>, %d2: tensor<3x1xf64>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<2x3x8xf64>) {
  // CHECK-NEXT: %[[A:.*]] = jit.add %arg0, %arg1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.sub %arg2, %arg0 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[C:.*]] = jit.mul %arg3, %arg4 : (tensor<4x1xbf16>, tensor<1x8xbf16>) -> tensor<4x8xbf16>
  // CHECK-NEXT: %[[D:.*]] = jit.div %arg5, %arg6 : (tensor<2x1x8xf64>, tensor<3x1xf64>) -> tensor<2x3x8xf64>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]]
  %0 = jit.add %x, %bias : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = jit.sub %s, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = jit.mul %col, %row : (tensor<4x1xbf16>, tensor<1x8xbf16>) -> tensor<4x8xbf16>
  %3 = jit.div %d3, %d2 : (tensor<2x1x8xf64>, tensor<3x1xf64>) -> tensor<2x3x8xf64>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<2x3x8xf64>
}

// CHECK-LABEL: func.func @compare(
func.func @compare(%x: tensor<4x8xf32>, %t: tensor<f32>, %i: tensor<4xi64>, %j: tensor<4xi64>,
                   %p: tensor<2x1xi1>, %q: tensor<3xi1>)
    -> (tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4xi1>, tensor<4xi1>,
        tensor<2x3xi1>) {
  // CHECK-NEXT: %[[EQ:.*]] = jit.compare eq, %arg0, %arg1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  // CHECK-NEXT: %[[NE:.*]] = jit.compare ne, %arg0, %arg1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  // CHECK-NEXT: %[[LT:.*]] = jit.compare lt, %arg1, %arg0 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  // CHECK-NEXT: %[[LE:.*]] = jit.compare le, %arg0, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  // CHECK-NEXT: %[[GT:.*]] = jit.compare gt, %arg2, %arg3 : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  // CHECK-NEXT: %[[GE:.*]] = jit.compare ge, %arg2, %arg3 : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  // CHECK-NEXT: %[[BOOL:.*]] = jit.compare eq, %arg4, %arg5 : (tensor<2x1xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK-NEXT: return %[[EQ]], %[[NE]], %[[LT]], %[[LE]], %[[GT]], %[[GE]], %[[BOOL]]
  %0 = jit.compare eq, %x, %t : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %1 = jit.compare ne, %x, %t : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %2 = jit.compare lt, %t, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %3 = jit.compare le, %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %4 = jit.compare gt, %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  %5 = jit.compare ge, %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  %6 = jit.compare eq, %p, %q : (tensor<2x1xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  return %0, %1, %2, %3, %4, %5, %6
      : tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4x8xi1>, tensor<4xi1>, tensor<4xi1>,
        tensor<2x3xi1>
}

// CHECK-LABEL: func.func @select(
func.func @select(%m: tensor<4x8xi1>, %x: tensor<4x8xf32>, %zero: tensor<f32>,
                  %c: tensor<4x1xi1>, %i: tensor<8xi64>, %j: tensor<4x1xi64>)
    -> (tensor<4x8xf32>, tensor<4x8xi64>) {
  // CHECK-NEXT: %[[A:.*]] = jit.select %arg0, %arg1, %arg2 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.select %arg3, %arg4, %arg5 : (tensor<4x1xi1>, tensor<8xi64>, tensor<4x1xi64>) -> tensor<4x8xi64>
  // CHECK-NEXT: return %[[A]], %[[B]]
  %0 = jit.select %m, %x, %zero : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = jit.select %c, %i, %j : (tensor<4x1xi1>, tensor<8xi64>, tensor<4x1xi64>) -> tensor<4x8xi64>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xi64>
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul(
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bt: tensor<16x8xf32>, %at: tensor<8x4xf32>)
    -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  // CHECK-NEXT: %[[NN:.*]] = jit.matmul %arg0, %arg1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: %[[NT:.*]] = jit.matmul %arg0, %arg2 {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: %[[TN:.*]] = jit.matmul %arg3, %arg1 {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: %[[TT:.*]] = jit.matmul %arg3, %arg2 {transpose_lhs, transpose_rhs} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: return %[[NN]], %[[NT]], %[[TN]], %[[TT]]
  %0 = jit.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = jit.matmul %a, %bt {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %2 = jit.matmul %at, %b {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %3 = jit.matmul %at, %bt {transpose_lhs, transpose_rhs} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  return %0, %1, %2, %3 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// Batch dimensions broadcast: [2,1] x [3] -> [2,3]; a plain matrix against a batch.
// CHECK-LABEL: func.func @matmul_batched(
func.func @matmul_batched(%a: tensor<2x1x4x8xf16>, %b: tensor<3x8x5xf16>, %w: tensor<8x5xbf16>,
                          %x: tensor<6x4x8xbf16>)
    -> (tensor<2x3x4x5xf16>, tensor<6x4x5xbf16>, tensor<6x8x8xbf16>) {
  // CHECK-NEXT: %[[A:.*]] = jit.matmul %arg0, %arg1 : (tensor<2x1x4x8xf16>, tensor<3x8x5xf16>) -> tensor<2x3x4x5xf16>
  // CHECK-NEXT: %[[B:.*]] = jit.matmul %arg3, %arg2 : (tensor<6x4x8xbf16>, tensor<8x5xbf16>) -> tensor<6x4x5xbf16>
  // CHECK-NEXT: %[[C:.*]] = jit.matmul %arg3, %arg3 {transpose_lhs} : (tensor<6x4x8xbf16>, tensor<6x4x8xbf16>) -> tensor<6x8x8xbf16>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.matmul %a, %b : (tensor<2x1x4x8xf16>, tensor<3x8x5xf16>) -> tensor<2x3x4x5xf16>
  %1 = jit.matmul %x, %w : (tensor<6x4x8xbf16>, tensor<8x5xbf16>) -> tensor<6x4x5xbf16>
  %2 = jit.matmul %x, %x {transpose_lhs} : (tensor<6x4x8xbf16>, tensor<6x4x8xbf16>) -> tensor<6x8x8xbf16>
  return %0, %1, %2 : tensor<2x3x4x5xf16>, tensor<6x4x5xbf16>, tensor<6x8x8xbf16>
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reductions(
func.func @reductions(%x: tensor<2x3x4xf32>, %s: tensor<f16>)
    -> (tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<1x3x1xf32>, tensor<f32>,
        tensor<1x1x1xf32>, tensor<f16>, tensor<f16>, tensor<f16>) {
  // CHECK-NEXT: %[[S:.*]] = jit.sum %arg0 axes = [1] : tensor<2x3x4xf32> -> tensor<2x4xf32>
  // CHECK-NEXT: %[[SK:.*]] = jit.sum %arg0 axes = [1] keepdim : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  // CHECK-NEXT: %[[M:.*]] = jit.mean %arg0 axes = [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
  // CHECK-NEXT: %[[MK:.*]] = jit.mean %arg0 axes = [0, 2] keepdim : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  // CHECK-NEXT: %[[X:.*]] = jit.max %arg0 axes = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  // CHECK-NEXT: %[[XK:.*]] = jit.max %arg0 axes = [0, 1, 2] keepdim : tensor<2x3x4xf32> -> tensor<1x1x1xf32>
  // CHECK-NEXT: %[[S0:.*]] = jit.sum %arg1 axes = [] : tensor<f16> -> tensor<f16>
  // CHECK-NEXT: %[[M0:.*]] = jit.mean %arg1 axes = [] keepdim : tensor<f16> -> tensor<f16>
  // CHECK-NEXT: %[[X0:.*]] = jit.max %arg1 axes = [] : tensor<f16> -> tensor<f16>
  // CHECK-NEXT: return %[[S]], %[[SK]], %[[M]], %[[MK]], %[[X]], %[[XK]], %[[S0]], %[[M0]], %[[X0]]
  %0 = jit.sum %x axes = [1] : tensor<2x3x4xf32> -> tensor<2x4xf32>
  %1 = jit.sum %x axes = [1] keepdim : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  %2 = jit.mean %x axes = [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
  %3 = jit.mean %x axes = [0, 2] keepdim : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  %4 = jit.max %x axes = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  %5 = jit.max %x axes = [0, 1, 2] keepdim : tensor<2x3x4xf32> -> tensor<1x1x1xf32>
  %6 = jit.sum %s axes = [] : tensor<f16> -> tensor<f16>
  %7 = jit.mean %s axes = [] keepdim : tensor<f16> -> tensor<f16>
  %8 = jit.max %s axes = [] : tensor<f16> -> tensor<f16>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8
      : tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<3xf32>, tensor<1x3x1xf32>, tensor<f32>,
        tensor<1x1x1xf32>, tensor<f16>, tensor<f16>, tensor<f16>
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @broadcast_to(
func.func @broadcast_to(%bias: tensor<8xf32>, %col: tensor<4x1xi64>, %s: tensor<i1>, %x: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<2x4x8xi64>, tensor<3x2xi1>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.broadcast_to %arg0 : tensor<8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.broadcast_to %arg1 : tensor<4x1xi64> -> tensor<2x4x8xi64>
  // CHECK-NEXT: %[[C:.*]] = jit.broadcast_to %arg2 : tensor<i1> -> tensor<3x2xi1>
  // CHECK-NEXT: %[[D:.*]] = jit.broadcast_to %arg3 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]]
  %0 = jit.broadcast_to %bias : tensor<8xf32> -> tensor<4x8xf32>
  %1 = jit.broadcast_to %col : tensor<4x1xi64> -> tensor<2x4x8xi64>
  %2 = jit.broadcast_to %s : tensor<i1> -> tensor<3x2xi1>
  %3 = jit.broadcast_to %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<2x4x8xi64>, tensor<3x2xi1>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @reshape(
func.func @reshape(%img: tensor<2x1x4x4xf32>, %s: tensor<f16>, %v: tensor<1xi64>)
    -> (tensor<2x16xf32>, tensor<1x1xf16>, tensor<i64>) {
  // CHECK-NEXT: %[[A:.*]] = jit.reshape %arg0 : tensor<2x1x4x4xf32> -> tensor<2x16xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.reshape %arg1 : tensor<f16> -> tensor<1x1xf16>
  // CHECK-NEXT: %[[C:.*]] = jit.reshape %arg2 : tensor<1xi64> -> tensor<i64>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.reshape %img : tensor<2x1x4x4xf32> -> tensor<2x16xf32>
  %1 = jit.reshape %s : tensor<f16> -> tensor<1x1xf16>
  %2 = jit.reshape %v : tensor<1xi64> -> tensor<i64>
  return %0, %1, %2 : tensor<2x16xf32>, tensor<1x1xf16>, tensor<i64>
}

// CHECK-LABEL: func.func @transpose(
func.func @transpose(%w: tensor<4x8xf32>, %t: tensor<2x3x4xi1>, %s: tensor<bf16>)
    -> (tensor<8x4xf32>, tensor<4x2x3xi1>, tensor<bf16>) {
  // CHECK-NEXT: %[[A:.*]] = jit.transpose %arg0 perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.transpose %arg1 perm = [2, 0, 1] : tensor<2x3x4xi1> -> tensor<4x2x3xi1>
  // CHECK-NEXT: %[[C:.*]] = jit.transpose %arg2 perm = [] : tensor<bf16> -> tensor<bf16>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.transpose %w perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = jit.transpose %t perm = [2, 0, 1] : tensor<2x3x4xi1> -> tensor<4x2x3xi1>
  %2 = jit.transpose %s perm = [] : tensor<bf16> -> tensor<bf16>
  return %0, %1, %2 : tensor<8x4xf32>, tensor<4x2x3xi1>, tensor<bf16>
}

// CHECK-LABEL: func.func @constant(
func.func @constant()
    -> (tensor<4x8xf32>, tensor<2x2xf32>, tensor<3xi64>, tensor<i64>, tensor<2xi1>, tensor<4xi1>,
        tensor<2xbf16>, tensor<2x1xf16>, tensor<f64>) {
  // CHECK-NEXT: %[[ZEROS:.*]] = jit.constant dense<0.000000e+00> : tensor<4x8xf32>
  // CHECK-NEXT: %[[MAT:.*]] = jit.constant dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
  // CHECK-NEXT: %[[I64:.*]] = jit.constant dense<[-1, 0, 7]> : tensor<3xi64>
  // CHECK-NEXT: %[[SCALAR:.*]] = jit.constant dense<-100> : tensor<i64>
  // CHECK-NEXT: %[[TRUE:.*]] = jit.constant dense<true> : tensor<2xi1>
  // CHECK-NEXT: %[[MASK:.*]] = jit.constant dense<[true, false, false, true]> : tensor<4xi1>
  // CHECK-NEXT: %[[BF16:.*]] = jit.constant dense<[1.500000e+00, -2.500000e-01]> : tensor<2xbf16>
  // CHECK-NEXT: %[[F16:.*]] = jit.constant dense<6.550400e+04> : tensor<2x1xf16>
  // CHECK-NEXT: %[[F64:.*]] = jit.constant dense<1.000000e-01> : tensor<f64>
  // CHECK-NEXT: return %[[ZEROS]], %[[MAT]], %[[I64]], %[[SCALAR]], %[[TRUE]], %[[MASK]], %[[BF16]], %[[F16]], %[[F64]]
  %0 = jit.constant dense<0.0> : tensor<4x8xf32>
  %1 = jit.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %2 = jit.constant dense<[-1, 0, 7]> : tensor<3xi64>
  %3 = jit.constant dense<-100> : tensor<i64>
  %4 = jit.constant dense<true> : tensor<2xi1>
  %5 = jit.constant dense<[true, false, false, true]> : tensor<4xi1>
  %6 = jit.constant dense<[1.5, -0.25]> : tensor<2xbf16>
  %7 = jit.constant dense<65504.0> : tensor<2x1xf16>
  %8 = jit.constant dense<0.1> : tensor<f64>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8
      : tensor<4x8xf32>, tensor<2x2xf32>, tensor<3xi64>, tensor<i64>, tensor<2xi1>, tensor<4xi1>,
        tensor<2xbf16>, tensor<2x1xf16>, tensor<f64>
}

// CHECK-LABEL: func.func @convert(
func.func @convert(%m: tensor<4x8xi1>, %x: tensor<4x8xf32>, %i: tensor<3xi64>, %h: tensor<f16>)
    -> (tensor<4x8xf32>, tensor<4x8xi64>, tensor<3xf64>, tensor<f16>, tensor<4x8xbf16>, tensor<4x8xi1>) {
  // CHECK-NEXT: %[[A:.*]] = jit.convert %arg0 : tensor<4x8xi1> -> tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.convert %arg1 : tensor<4x8xf32> -> tensor<4x8xi64>
  // CHECK-NEXT: %[[C:.*]] = jit.convert %arg2 : tensor<3xi64> -> tensor<3xf64>
  // CHECK-NEXT: %[[D:.*]] = jit.convert %arg3 : tensor<f16> -> tensor<f16>
  // CHECK-NEXT: %[[E:.*]] = jit.convert %arg1 : tensor<4x8xf32> -> tensor<4x8xbf16>
  // CHECK-NEXT: %[[F:.*]] = jit.convert %arg1 : tensor<4x8xf32> -> tensor<4x8xi1>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]], %[[E]], %[[F]]
  %0 = jit.convert %m : tensor<4x8xi1> -> tensor<4x8xf32>
  %1 = jit.convert %x : tensor<4x8xf32> -> tensor<4x8xi64>
  %2 = jit.convert %i : tensor<3xi64> -> tensor<3xf64>
  %3 = jit.convert %h : tensor<f16> -> tensor<f16>
  %4 = jit.convert %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %5 = jit.convert %x : tensor<4x8xf32> -> tensor<4x8xi1>
  return %0, %1, %2, %3, %4, %5
      : tensor<4x8xf32>, tensor<4x8xi64>, tensor<3xf64>, tensor<f16>, tensor<4x8xbf16>, tensor<4x8xi1>
}

// The reference gives the element type only: its shape is free.
// CHECK-LABEL: func.func @type_as(
func.func @type_as(%x: tensor<4x8xf32>, %h: tensor<2xf16>, %w: tensor<8xf32>)
    -> (tensor<4x8xf16>, tensor<2xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.type_as %arg0, %arg1 : tensor<4x8xf32>, tensor<2xf16> -> tensor<4x8xf16>
  // CHECK-NEXT: %[[B:.*]] = jit.type_as %arg1, %arg2 : tensor<2xf16>, tensor<8xf32> -> tensor<2xf32>
  // CHECK-NEXT: %[[C:.*]] = jit.type_as %arg0, %arg2 : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.type_as %x, %h : tensor<4x8xf32>, tensor<2xf16> -> tensor<4x8xf16>
  %1 = jit.type_as %h, %w : tensor<2xf16>, tensor<8xf32> -> tensor<2xf32>
  %2 = jit.type_as %x, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xf16>, tensor<2xf32>, tensor<4x8xf32>
}

//===----------------------------------------------------------------------===//
// Normalisation, activations with axes, dropout
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @softmax(
func.func @softmax(%x: tensor<4x10xf32>, %h: tensor<2x3x5xf16>)
    -> (tensor<4x10xf32>, tensor<2x3x5xf16>, tensor<4x10xf32>, tensor<2x3x5xf16>) {
  // CHECK-NEXT: %[[A:.*]] = jit.softmax %arg0 axis = 1 : tensor<4x10xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.softmax %arg1 axis = 0 : tensor<2x3x5xf16>
  // CHECK-NEXT: %[[C:.*]] = jit.log_softmax %arg0 axis = 1 : tensor<4x10xf32>
  // CHECK-NEXT: %[[D:.*]] = jit.log_softmax %arg1 axis = 2 : tensor<2x3x5xf16>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]]
  %0 = jit.softmax %x axis = 1 : tensor<4x10xf32>
  %1 = jit.softmax %h axis = 0 : tensor<2x3x5xf16>
  %2 = jit.log_softmax %x axis = 1 : tensor<4x10xf32>
  %3 = jit.log_softmax %h axis = 2 : tensor<2x3x5xf16>
  return %0, %1, %2, %3 : tensor<4x10xf32>, tensor<2x3x5xf16>, tensor<4x10xf32>, tensor<2x3x5xf16>
}

// CHECK-LABEL: func.func @layer_norm(
func.func @layer_norm(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                      %h: tensor<2x3x8xf16>, %hg: tensor<3x8xf16>, %d: tensor<4x8xf64>)
    -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x8xf16>, tensor<2xf32>, tensor<2xf32>,
        tensor<2x3x8xf16>, tensor<2x3xf32>, tensor<4x8xf64>, tensor<4xf64>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[Y0:.*]], %[[M0:.*]], %[[R0:.*]] = jit.layer_norm %arg0 weight %arg1 bias %arg2 axis = 1 eps = 1.000000e-05 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  // CHECK-NEXT: %[[Y1:.*]], %[[M1:.*]], %[[R1:.*]] = jit.layer_norm %arg3 weight %arg4 axis = 1 eps = 1.000000e-03 : (tensor<2x3x8xf16>, tensor<3x8xf16>) -> (tensor<2x3x8xf16>, tensor<2xf32>, tensor<2xf32>)
  // CHECK-NEXT: %[[Y2:.*]], %[[M2:.*]], %{{.*}} = jit.layer_norm %arg3 axis = 2 eps = 1.000000e-05 : (tensor<2x3x8xf16>) -> (tensor<2x3x8xf16>, tensor<2x3xf32>, tensor<2x3xf32>)
  // CHECK-NEXT: %[[Y3:.*]], %[[M3:.*]], %{{.*}} = jit.layer_norm %arg5 axis = 1 eps = 1.000000e-05 : (tensor<4x8xf64>) -> (tensor<4x8xf64>, tensor<4xf64>, tensor<4xf64>)
  // CHECK-NEXT: %[[Y4:.*]], %{{.*}}, %{{.*}} = jit.layer_norm %arg0 bias %arg2 axis = 1 eps = 1.000000e-05 : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  // CHECK-NEXT: return %[[Y0]], %[[M0]], %[[R0]], %[[Y1]], %[[M1]], %[[R1]], %[[Y2]], %[[M2]], %[[Y3]], %[[M3]], %[[Y4]]
  %y0, %m0, %r0 = jit.layer_norm %x weight %g bias %b axis = 1 eps = 1.0e-05
      : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %y1, %m1, %r1 = jit.layer_norm %h weight %hg axis = 1 eps = 1.0e-03
      : (tensor<2x3x8xf16>, tensor<3x8xf16>) -> (tensor<2x3x8xf16>, tensor<2xf32>, tensor<2xf32>)
  %y2, %m2, %r2 = jit.layer_norm %h axis = 2 eps = 1.0e-05
      : (tensor<2x3x8xf16>) -> (tensor<2x3x8xf16>, tensor<2x3xf32>, tensor<2x3xf32>)
  %y3, %m3, %r3 = jit.layer_norm %d axis = 1 eps = 1.0e-05
      : (tensor<4x8xf64>) -> (tensor<4x8xf64>, tensor<4xf64>, tensor<4xf64>)
  %y4, %m4, %r4 = jit.layer_norm %x bias %b axis = 1 eps = 1.0e-05
      : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return %y0, %m0, %r0, %y1, %m1, %r1, %y2, %m2, %y3, %m3, %y4
      : tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x8xf16>, tensor<2xf32>, tensor<2xf32>,
        tensor<2x3x8xf16>, tensor<2x3xf32>, tensor<4x8xf64>, tensor<4xf64>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @dropout(
func.func @dropout(%x: tensor<4x8xf32>, %rng: tensor<2xi64>, %h: tensor<3xbf16>)
    -> (tensor<4x8xf32>, tensor<4x8xi1>, tensor<2xi64>, tensor<3xbf16>, tensor<3xi1>) {
  // CHECK-NEXT: %[[Y:.*]], %[[MASK:.*]], %[[RNG:.*]] = jit.dropout %arg0, %arg1 p = 1.000000e-01 : (tensor<4x8xf32>, tensor<2xi64>) -> (tensor<4x8xf32>, tensor<4x8xi1>, tensor<2xi64>)
  // CHECK-NEXT: %[[Y1:.*]], %[[MASK1:.*]], %{{.*}} = jit.dropout %arg2, %[[RNG]] p = 0.000000e+00 : (tensor<3xbf16>, tensor<2xi64>) -> (tensor<3xbf16>, tensor<3xi1>, tensor<2xi64>)
  // CHECK-NEXT: return %[[Y]], %[[MASK]], %[[RNG]], %[[Y1]], %[[MASK1]]
  %y, %mask, %rng1 = jit.dropout %x, %rng p = 1.0e-01
      : (tensor<4x8xf32>, tensor<2xi64>) -> (tensor<4x8xf32>, tensor<4x8xi1>, tensor<2xi64>)
  %y1, %mask1, %rng2 = jit.dropout %h, %rng1 p = 0.0
      : (tensor<3xbf16>, tensor<2xi64>) -> (tensor<3xbf16>, tensor<3xi1>, tensor<2xi64>)
  return %y, %mask, %rng1, %y1, %mask1 : tensor<4x8xf32>, tensor<4x8xi1>, tensor<2xi64>, tensor<3xbf16>, tensor<3xi1>
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @mse_loss(
func.func @mse_loss(%y: tensor<4x8xf32>, %t: tensor<4x8xf32>)
    -> (tensor<f32>, tensor<f32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[MEAN:.*]] = jit.mse_loss %arg0, %arg1 reduction = mean : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  // CHECK-NEXT: %[[SUM:.*]] = jit.mse_loss %arg0, %arg1 reduction = sum : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  // CHECK-NEXT: %[[NONE:.*]] = jit.mse_loss %arg0, %arg1 reduction = none : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[MEAN]], %[[SUM]], %[[NONE]]
  %0 = jit.mse_loss %y, %t reduction = mean : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  %1 = jit.mse_loss %y, %t reduction = sum : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  %2 = jit.mse_loss %y, %t reduction = none : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @cross_entropy(
func.func @cross_entropy(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %h: tensor<4x10xbf16>)
    -> (tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<bf16>, tensor<f32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.cross_entropy %arg0, %arg1 reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK-NEXT: %[[B:.*]] = jit.cross_entropy %arg0, %arg1 reduction = sum {ignore_index = 0 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK-NEXT: %[[C:.*]] = jit.cross_entropy %arg0, %arg1 reduction = none {label_smoothing = 1.000000e-01 : f64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  // CHECK-NEXT: %[[D:.*]] = jit.cross_entropy %arg2, %arg1 reduction = mean {ignore_index = -1 : i64, label_smoothing = 2.500000e-01 : f64} : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<bf16>
  // Explicit defaults are elided.
  // CHECK-NEXT: %[[E:.*]] = jit.cross_entropy %arg0, %arg1 reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]], %[[E]]
  %0 = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %1 = jit.cross_entropy %logits, %labels reduction = sum {ignore_index = 0 : i64}
      : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %2 = jit.cross_entropy %logits, %labels reduction = none {label_smoothing = 0.1}
      : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  %3 = jit.cross_entropy %h, %labels reduction = mean {ignore_index = -1 : i64, label_smoothing = 0.25}
      : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<bf16>
  %4 = jit.cross_entropy %logits, %labels reduction = mean {ignore_index = -100 : i64, label_smoothing = 0.0}
      : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %0, %1, %2, %3, %4 : tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<bf16>, tensor<f32>
}

// CHECK-LABEL: func.func @nll_loss(
func.func @nll_loss(%logp: tensor<4x10xf32>, %labels: tensor<4xi64>)
    -> (tensor<f32>, tensor<f32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.nll_loss %arg0, %arg1 reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK-NEXT: %[[B:.*]] = jit.nll_loss %arg0, %arg1 reduction = sum {ignore_index = 3 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK-NEXT: %[[C:.*]] = jit.nll_loss %arg0, %arg1 reduction = none : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.nll_loss %logp, %labels reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %1 = jit.nll_loss %logp, %labels reduction = sum {ignore_index = 3 : i64}
      : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %2 = jit.nll_loss %logp, %labels reduction = none : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @activation_grads(
func.func @activation_grads(%dy: tensor<4x8xf32>, %y: tensor<4x8xf32>, %dh: tensor<3xf16>, %h: tensor<3xf16>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xf16>) {
  // CHECK-NEXT: %[[A:.*]] = jit.relu_grad %arg0, %arg1 : tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.gelu_grad %arg0, %arg1 approximate = none : tensor<4x8xf32>
  // CHECK-NEXT: %[[C:.*]] = jit.gelu_grad %arg2, %arg3 approximate = tanh : tensor<3xf16>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.relu_grad %dy, %y : tensor<4x8xf32>
  %1 = jit.gelu_grad %dy, %y approximate = none : tensor<4x8xf32>
  %2 = jit.gelu_grad %dh, %h approximate = tanh : tensor<3xf16>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xf16>
}

// CHECK-LABEL: func.func @softmax_grads(
func.func @softmax_grads(%dy: tensor<4x10xf32>, %y: tensor<4x10xf32>)
    -> (tensor<4x10xf32>, tensor<4x10xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.softmax_grad %arg0, %arg1 axis = 1 : tensor<4x10xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.log_softmax_grad %arg0, %arg1 axis = 0 : tensor<4x10xf32>
  // CHECK-NEXT: return %[[A]], %[[B]]
  %0 = jit.softmax_grad %dy, %y axis = 1 : tensor<4x10xf32>
  %1 = jit.log_softmax_grad %dy, %y axis = 0 : tensor<4x10xf32>
  return %0, %1 : tensor<4x10xf32>, tensor<4x10xf32>
}

// CHECK-LABEL: func.func @layer_norm_grad(
func.func @layer_norm_grad(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %mean: tensor<4xf32>,
                           %rstd: tensor<4xf32>, %g: tensor<8xf32>,
                           %dh: tensor<2x3x8xbf16>, %h: tensor<2x3x8xbf16>, %hm: tensor<2xf32>)
    -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xbf16>, tensor<3x8xbf16>, tensor<3x8xbf16>) {
  // CHECK-NEXT: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = jit.layer_norm_grad %arg0, %arg1, %arg2, %arg3 weight %arg4 axis = 1 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK-NEXT: %[[DH:.*]], %[[DHW:.*]], %[[DHB:.*]] = jit.layer_norm_grad %arg5, %arg6, %arg7, %arg7 axis = 1 : (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x3x8xbf16>, tensor<3x8xbf16>, tensor<3x8xbf16>)
  // CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]], %[[DH]], %[[DHW]], %[[DHB]]
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %rstd weight %g axis = 1
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>)
        -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dh2, %dhw, %dhb = jit.layer_norm_grad %dh, %h, %hm, %hm axis = 1
      : (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>, tensor<2xf32>, tensor<2xf32>)
        -> (tensor<2x3x8xbf16>, tensor<3x8xbf16>, tensor<3x8xbf16>)
  return %dx, %dw, %db, %dh2, %dhw, %dhb
      : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xbf16>, tensor<3x8xbf16>, tensor<3x8xbf16>
}

// CHECK-LABEL: func.func @mse_loss_grad(
func.func @mse_loss_grad(%g: tensor<f32>, %gn: tensor<4x8xf32>, %y: tensor<4x8xf32>, %t: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.mse_loss_grad %arg0, %arg2, %arg3 reduction = mean : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.mse_loss_grad %arg0, %arg2, %arg3 reduction = sum : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[C:.*]] = jit.mse_loss_grad %arg1, %arg2, %arg3 reduction = none : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = jit.mse_loss_grad %g, %y, %t reduction = mean
      : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = jit.mse_loss_grad %g, %y, %t reduction = sum
      : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = jit.mse_loss_grad %gn, %y, %t reduction = none
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @cross_entropy_grad(
func.func @cross_entropy_grad(%g: tensor<f32>, %gn: tensor<4xf16>, %logits: tensor<4x10xf32>,
                              %h: tensor<4x10xf16>, %labels: tensor<4xi64>)
    -> (tensor<4x10xf32>, tensor<4x10xf16>) {
  // CHECK-NEXT: %[[A:.*]] = jit.cross_entropy_grad %arg0, %arg2, %arg4 reduction = mean {ignore_index = 0 : i64, label_smoothing = 1.000000e-01 : f64} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.cross_entropy_grad %arg1, %arg3, %arg4 reduction = none : (tensor<4xf16>, tensor<4x10xf16>, tensor<4xi64>) -> tensor<4x10xf16>
  // CHECK-NEXT: return %[[A]], %[[B]]
  %0 = jit.cross_entropy_grad %g, %logits, %labels reduction = mean {ignore_index = 0 : i64, label_smoothing = 0.1}
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  %1 = jit.cross_entropy_grad %gn, %h, %labels reduction = none
      : (tensor<4xf16>, tensor<4x10xf16>, tensor<4xi64>) -> tensor<4x10xf16>
  return %0, %1 : tensor<4x10xf32>, tensor<4x10xf16>
}

// CHECK-LABEL: func.func @nll_loss_grad(
func.func @nll_loss_grad(%g: tensor<f32>, %gn: tensor<4xf32>, %logp: tensor<4x10xf32>, %labels: tensor<4xi64>)
    -> (tensor<4x10xf32>, tensor<4x10xf32>) {
  // CHECK-NEXT: %[[A:.*]] = jit.nll_loss_grad %arg0, %arg2, %arg3 reduction = sum {ignore_index = 7 : i64} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  // CHECK-NEXT: %[[B:.*]] = jit.nll_loss_grad %arg1, %arg2, %arg3 reduction = none : (tensor<4xf32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  // CHECK-NEXT: return %[[A]], %[[B]]
  %0 = jit.nll_loss_grad %g, %logp, %labels reduction = sum {ignore_index = 7 : i64}
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  %1 = jit.nll_loss_grad %gn, %logp, %labels reduction = none
      : (tensor<4xf32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  return %0, %1 : tensor<4x10xf32>, tensor<4x10xf32>
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @sgd_update(
func.func @sgd_update(%w: tensor<4x8xf32>, %gw: tensor<4x8xf16>, %buf: tensor<4x8xf32>,
                      %step: tensor<i64>, %lr: tensor<f32>, %inv: tensor<f32>, %ok: tensor<i1>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>,
        tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // Plain SGD (weight decay and maximize included).
  // CHECK-NEXT: %[[P0:.*]] = jit.sgd_update %arg0, %arg1 lr %arg4 : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[P1:.*]] = jit.sgd_update %arg0, %arg1 lr %arg4 {maximize, weight_decay = 1.000000e-02 : f64} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>) -> tensor<4x8xf32>
  // Momentum.
  // CHECK-NEXT: %[[P2:.*]], %[[B2:.*]] = jit.sgd_update %arg0, %arg1 momentum_buffer %arg2 lr %arg4 {momentum = 9.000000e-01 : f64} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  // Nesterov.
  // CHECK-NEXT: %[[P3:.*]], %[[B3:.*]] = jit.sgd_update %arg0, %arg1 momentum_buffer %arg2 lr %arg4 {momentum = 9.000000e-01 : f64, nesterov} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  // Dampening, which needs the step.
  // CHECK-NEXT: %[[P4:.*]], %[[B4:.*]] = jit.sgd_update %arg0, %arg1 momentum_buffer %arg2 step %arg3 lr %arg4 {dampening = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<i64>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  // Loss scaling: inv_scale and predicate, with and without a buffer.
  // CHECK-NEXT: %[[P5:.*]] = jit.sgd_update %arg0, %arg1 lr %arg4 inv_scale %arg5 predicate %arg6 : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>, tensor<f32>, tensor<i1>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[P6:.*]], %[[B6:.*]] = jit.sgd_update %arg0, %arg1 momentum_buffer %arg2 lr %arg4 inv_scale %arg5 predicate %arg6 {momentum = 9.000000e-01 : f64} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  // CHECK-NEXT: return %[[P0]], %[[P1]], %[[P2]], %[[B2]], %[[P3]], %[[B3]], %[[P4]], %[[B4]], %[[P5]], %[[P6]]
  %p0 = jit.sgd_update %w, %gw lr %lr : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>) -> tensor<4x8xf32>
  %p1 = jit.sgd_update %w, %gw lr %lr {weight_decay = 1.0e-02, maximize}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>) -> tensor<4x8xf32>
  %p2, %b2 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr {momentum = 9.0e-01}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %p3, %b3 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr {momentum = 9.0e-01, nesterov}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %p4, %b4 = jit.sgd_update %w, %gw momentum_buffer %buf step %step lr %lr {momentum = 9.0e-01, dampening = 1.0e-01}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<i64>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %p5 = jit.sgd_update %w, %gw lr %lr inv_scale %inv predicate %ok
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>, tensor<f32>, tensor<i1>) -> tensor<4x8xf32>
  %p6, %b6 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr inv_scale %inv predicate %ok {momentum = 9.0e-01}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return %p0, %p1, %p2, %b2, %p3, %b3, %p4, %b4, %p5, %p6
      : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>,
        tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @embedding(
func.func @embedding(%ids: tensor<4x6xi64>, %table: tensor<100x8xf16>, %de: tensor<4x6x8xf32>)
    -> (tensor<4x6x8xf16>, tensor<100x8xf32>) {
  // CHECK-NEXT: %[[E:.*]] = jit.embedding %arg0, %arg1 {padding_idx = 0 : i64} : (tensor<4x6xi64>, tensor<100x8xf16>) -> tensor<4x6x8xf16>
  // CHECK-NEXT: %[[G:.*]] = jit.embedding_grad %arg2, %arg0 {num_weights = 100 : i64, padding_idx = 0 : i64} : (tensor<4x6x8xf32>, tensor<4x6xi64>) -> tensor<100x8xf32>
  // CHECK-NEXT: return %[[E]], %[[G]]
  %e = jit.embedding %ids, %table {padding_idx = 0 : i64} : (tensor<4x6xi64>, tensor<100x8xf16>) -> tensor<4x6x8xf16>
  %g = jit.embedding_grad %de, %ids {num_weights = 100 : i64, padding_idx = 0 : i64}
      : (tensor<4x6x8xf32>, tensor<4x6xi64>) -> tensor<100x8xf32>
  return %e, %g : tensor<4x6x8xf16>, tensor<100x8xf32>
}

// CHECK-LABEL: func.func @adam_update(
func.func @adam_update(%w: tensor<8xf32>, %gw: tensor<8xbf16>, %m: tensor<8xf32>, %v: tensor<8xf32>,
                       %step: tensor<i64>, %lr: tensor<f32>, %inv: tensor<f32>, %ok: tensor<i1>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  // Adam with the defaults (elided), then AdamW with every attribute set, scaled and predicated.
  // CHECK-NEXT: %[[W0:.*]], %[[M0:.*]], %[[V0:.*]] = jit.adam_update %arg0, %arg1, %arg2, %arg3 step %arg4 lr %arg5 : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK-NEXT: %[[W1:.*]], %[[M1:.*]], %[[V1:.*]] = jit.adam_update %arg0, %arg1, %arg2, %arg3 step %arg4 lr %arg5 inv_scale %arg6 predicate %arg7 {beta1 = 5.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decoupled_weight_decay, eps = 1.000000e-03 : f64, maximize, weight_decay = 1.000000e-02 : f64} : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK-NEXT: return %[[W0]], %[[M0]], %[[V0]], %[[W1]], %[[M1]], %[[V1]]
  %w0, %m0, %v0 = jit.adam_update %w, %gw, %m, %v step %step lr %lr
      : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %w1, %m1, %v1 = jit.adam_update %w, %gw, %m, %v step %step lr %lr inv_scale %inv predicate %ok
      {beta1 = 0.5, beta2 = 0.75, eps = 1.0e-03, weight_decay = 1.0e-02, decoupled_weight_decay, maximize}
      : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %w0, %m0, %v0, %w1, %m1, %v1
      : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// AMSGrad's running maximum comes before O2's copy, in operands and results.
// CHECK-LABEL: func.func @adam_update_amsgrad(
func.func @adam_update_amsgrad(%w: tensor<8xf32>, %gw: tensor<8xf16>, %m: tensor<8xf32>, %v: tensor<8xf32>,
                               %vmax: tensor<8xf32>, %step: tensor<i64>, %lr: tensor<f32>, %w16: tensor<8xf16>)
    -> (tensor<8xf32>, tensor<8xf16>) {
  // CHECK-NEXT: %{{.*}}, %{{.*}}, %{{.*}}, %[[MAX:.*]], %[[COPY:.*]] = jit.adam_update %arg0, %arg1, %arg2, %arg3 max_exp_avg_sq %arg4 step %arg5 lr %arg6 param_copy %arg7 : (tensor<8xf32>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>, tensor<8xf16>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>)
  // CHECK-NEXT: return %[[MAX]], %[[COPY]]
  %w1, %m1, %v1, %vmax1, %c1 = jit.adam_update %w, %gw, %m, %v max_exp_avg_sq %vmax step %step lr %lr param_copy %w16
      : (tensor<8xf32>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>, tensor<8xf16>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>)
  return %vmax1, %c1 : tensor<8xf32>, tensor<8xf16>
}

//===----------------------------------------------------------------------===//
// State model
//===----------------------------------------------------------------------===//

// Every role; results tied to param, opt_state, scaler_state and grad
// arguments; an O2-style low-precision copy derived from its master (same
// shape, other element type); forward ops with jit.op_id and their VJP ops
// with jit.vjp_of.
// CHECK-LABEL: func.func @step(
// CHECK-SAME:    %arg0: tensor<4x8xf32> {jit.role = "input"},
// CHECK-SAME:    %arg1: tensor<8x8xf32> {jit.role = "param"},
// CHECK-SAME:    %arg2: tensor<8x8xf16> {jit.derived_from = 1 : i64, jit.role = "param"},
// CHECK-SAME:    %arg3: tensor<8x8xf32> {jit.role = "grad"},
// CHECK-SAME:    %arg4: tensor<8x8xf32> {jit.role = "opt_state"},
// CHECK-SAME:    %arg5: tensor<f32> {jit.role = "scaler_state"},
// CHECK-SAME:    %arg6: tensor<f32> {jit.role = "hyper"},
// CHECK-SAME:    %arg7: tensor<4x8xf32>)
// CHECK-SAME:    -> (tensor<f32> {jit.returned}, tensor<8x8xf32> {jit.tied = 1 : i64}, tensor<8x8xf32> {jit.tied = 4 : i64},
// CHECK-SAME:        tensor<f32> {jit.tied = 5 : i64}, tensor<8x8xf32> {jit.tied = 3 : i64})
func.func @step(%x: tensor<4x8xf32> {jit.role = "input"},
                %w: tensor<8x8xf32> {jit.role = "param"},
                %w16: tensor<8x8xf16> {jit.role = "param", jit.derived_from = 1 : i64},
                %gacc: tensor<8x8xf32> {jit.role = "grad"},
                %buf: tensor<8x8xf32> {jit.role = "opt_state"},
                %scale: tensor<f32> {jit.role = "scaler_state"},
                %lr: tensor<f32> {jit.role = "hyper"},
                %t: tensor<4x8xf32>)
    -> (tensor<f32> {jit.returned}, tensor<8x8xf32> {jit.tied = 1 : i64}, tensor<8x8xf32> {jit.tied = 4 : i64},
        tensor<f32> {jit.tied = 5 : i64}, tensor<8x8xf32> {jit.tied = 3 : i64}) {
  // CHECK-NEXT: %[[Y:.*]] = jit.matmul %arg0, %arg1 {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[L:.*]] = jit.mse_loss %[[Y]], %arg7 reduction = mean {jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  // CHECK-NEXT: %[[ONE:.*]] = jit.constant dense<1.000000e+00> : tensor<f32> {jit.vjp_of = 1 : i64}
  // CHECK-NEXT: %[[DY:.*]] = jit.mse_loss_grad %[[ONE]], %[[Y]], %arg7 reduction = mean {jit.vjp_of = 1 : i64} : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[DW:.*]] = jit.matmul %arg0, %[[DY]] {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  // CHECK-NEXT: %[[ACC:.*]] = jit.add %arg3, %[[DW]] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  // CHECK-NEXT: %[[W1:.*]], %[[B1:.*]] = jit.sgd_update %arg1, %[[ACC]] momentum_buffer %arg4 lr %arg6 {momentum = 9.000000e-01 : f64} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> (tensor<8x8xf32>, tensor<8x8xf32>)
  // CHECK-NEXT: return %[[L]], %[[W1]], %[[B1]], %arg5, %[[ACC]]
  %y = jit.matmul %x, %w {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %l = jit.mse_loss %y, %t reduction = mean {jit.op_id = 1 : i64}
      : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  %one = jit.constant dense<1.0> : tensor<f32> {jit.vjp_of = 1 : i64}
  %dy = jit.mse_loss_grad %one, %y, %t reduction = mean {jit.vjp_of = 1 : i64}
      : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dw = jit.matmul %x, %dy {transpose_lhs, jit.vjp_of = 0 : i64}
      : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %acc = jit.add %gacc, %dw : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %w1, %b1 = jit.sgd_update %w, %acc momentum_buffer %buf lr %lr {momentum = 9.0e-01}
      : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> (tensor<8x8xf32>, tensor<8x8xf32>)
  return %l, %w1, %b1, %scale, %acc
      : tensor<f32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<8x8xf32>
}

// A declaration carries the state model too (its argument types come from the
// signature: there is no entry block).
// CHECK-LABEL: func.func private @declared_step(
// CHECK-SAME:    tensor<8xf32> {jit.role = "param"}, tensor<8xbf16> {jit.derived_from = 0 : i64, jit.role = "param"})
// CHECK-SAME:    -> (tensor<8xf32> {jit.tied = 0 : i64})
func.func private @declared_step(tensor<8xf32> {jit.role = "param"},
                                 tensor<8xbf16> {jit.role = "param", jit.derived_from = 0 : i64})
    -> (tensor<8xf32> {jit.tied = 0 : i64})

// O2's master weights: the update also writes the low-precision parameter copy
// (`param_copy` in, `new_param_copy` out, after any momentum buffer), for SGD
// with and without momentum and for Adam, f16 and bf16.
// CHECK-LABEL: func.func @update_with_param_copy(
func.func @update_with_param_copy(%w: tensor<4x8xf32>, %gw: tensor<4x8xf16>, %buf: tensor<4x8xf32>,
                                  %lr: tensor<f32>, %inv: tensor<f32>, %ok: tensor<i1>,
                                  %w16: tensor<4x8xf16>, %a: tensor<8xf32>, %ga: tensor<8xbf16>,
                                  %m: tensor<8xf32>, %v: tensor<8xf32>, %step: tensor<i64>,
                                  %a16: tensor<8xbf16>)
    -> (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>,
        tensor<8xf32>, tensor<8xbf16>) {
  // CHECK-NEXT: %[[P0:.*]], %[[C0:.*]] = jit.sgd_update %arg0, %arg1 lr %arg3 param_copy %arg6 : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>, tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf16>)
  // CHECK-NEXT: %[[P1:.*]], %[[B1:.*]], %[[C1:.*]] = jit.sgd_update %arg0, %arg1 momentum_buffer %arg2 lr %arg3 inv_scale %arg4 predicate %arg5 param_copy %arg6 {momentum = 9.000000e-01 : f64} : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>)
  // CHECK-NEXT: %[[W2:.*]], %[[M2:.*]], %[[V2:.*]], %[[C2:.*]] = jit.adam_update %arg7, %arg8, %arg9, %arg10 step %arg11 lr %arg3 inv_scale %arg4 predicate %arg5 param_copy %arg12 : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>)
  // CHECK-NEXT: return %[[P0]], %[[C0]], %[[P1]], %[[B1]], %[[C1]], %[[W2]], %[[C2]]
  %p0, %c0 = jit.sgd_update %w, %gw lr %lr param_copy %w16
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<f32>, tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf16>)
  %p1, %b1, %c1 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr inv_scale %inv predicate %ok
      param_copy %w16 {momentum = 9.0e-01}
      : (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<i1>,
         tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>)
  %w2, %m2, %v2, %c2 = jit.adam_update %a, %ga, %m, %v step %step lr %lr inv_scale %inv predicate %ok
      param_copy %a16
      : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>,
         tensor<f32>, tensor<i1>, tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>)
  return %p0, %c0, %p1, %b1, %c1, %w2, %c2
      : tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>,
        tensor<8xf32>, tensor<8xbf16>
}

//===----------------------------------------------------------------------===//
// Convolutional networks
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @convolution(
func.func @convolution(%x: tensor<2x4x9x9xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>,
                       %xh: tensor<2x9x9x4xf16>, %wh: tensor<6x3x3x4xf16>)
    -> (tensor<2x6x5x5xf32>, tensor<2x9x9x6xf16>, tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>) {
  // CHECK-NEXT: %[[Y:.*]] = jit.conv2d %arg0, %arg1 bias %arg2 stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2 : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x5x5xf32>
  // CHECK-NEXT: %[[YH:.*]] = jit.conv2d %arg3, %arg4 stride = [1, 1] padding = [2, 2] dilation = [2, 2] layout = nhwc : (tensor<2x9x9x4xf16>, tensor<6x3x3x4xf16>) -> tensor<2x9x9x6xf16>
  // CHECK-NEXT: %[[DX:.*]] = jit.conv2d_grad_input %[[Y]], %arg1 stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2 : (tensor<2x6x5x5xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  // CHECK-NEXT: %[[DW:.*]] = jit.conv2d_grad_weight %[[Y]], %arg0 stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2 : (tensor<2x6x5x5xf32>, tensor<2x4x9x9xf32>) -> tensor<6x2x3x3xf32>
  // CHECK-NEXT: return %[[Y]], %[[YH]], %[[DX]], %[[DW]]
  %y = jit.conv2d %x, %w bias %b stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2
      : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x5x5xf32>
  %yh = jit.conv2d %xh, %wh stride = [1, 1] padding = [2, 2] dilation = [2, 2] groups = 1 layout = nhwc
      : (tensor<2x9x9x4xf16>, tensor<6x3x3x4xf16>) -> tensor<2x9x9x6xf16>
  %dx = jit.conv2d_grad_input %y, %w stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2
      : (tensor<2x6x5x5xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  %dw = jit.conv2d_grad_weight %y, %x stride = [2, 2] padding = [1, 1] dilation = [1, 1] groups = 2
      : (tensor<2x6x5x5xf32>, tensor<2x4x9x9xf32>) -> tensor<6x2x3x3xf32>
  return %y, %yh, %dx, %dw : tensor<2x6x5x5xf32>, tensor<2x9x9x6xf16>, tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>
}

// Low-precision activations keep f32 parameters and statistics.
// CHECK-LABEL: func.func @batch_norm(
func.func @batch_norm(%x: tensor<4x3x2x2xf16>, %g: tensor<3xf32>, %b: tensor<3xf32>, %rm: tensor<3xf32>,
                      %rv: tensor<3xf32>) -> (tensor<4x3x2x2xf16>, tensor<4x3x2x2xf16>, tensor<3xf32>) {
  // CHECK-NEXT: %[[Y:[a-z_]+]], %[[MEAN:[a-z_]+]], %[[INVSTD:[a-z_]+]], %{{[a-z_]+}}, %{{[a-z_]+}} = jit.batch_norm %arg0 weight %arg1 bias %arg2 running_mean %arg3 running_var %arg4 axis = 1 eps = 1.000000e-05 momentum = 1.000000e-01 : (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK-NEXT: %[[E:.*]] = jit.batch_norm_inference %arg0 running_mean %arg3 running_var %arg4 axis = 1 eps = 1.000000e-03 : (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>) -> tensor<4x3x2x2xf16>
  // CHECK-NEXT: %[[DX:[a-z_]+]], %[[DG:[a-z_]+]], %{{[a-z_]+}} = jit.batch_norm_grad %[[Y]], %arg0, %[[MEAN]], %[[INVSTD]] weight %arg1 axis = 1 : (tensor<4x3x2x2xf16>, tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>)
  %y, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %g bias %b running_mean %rm running_var %rv
      axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
        -> (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  %e = jit.batch_norm_inference %x running_mean %rm running_var %rv axis = 1 eps = 1.0e-03
      : (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>) -> tensor<4x3x2x2xf16>
  // CHECK-NEXT: return %[[E]], %[[DX]], %[[DG]]
  %dx, %dg, %db = jit.batch_norm_grad %y, %x, %mean, %invstd weight %g axis = 1
      : (tensor<4x3x2x2xf16>, tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
        -> (tensor<4x3x2x2xf16>, tensor<3xf32>, tensor<3xf32>)
  return %e, %dx, %dg : tensor<4x3x2x2xf16>, tensor<4x3x2x2xf16>, tensor<3xf32>
}

// CHECK-LABEL: func.func @pooling(
func.func @pooling(%x: tensor<2x3x7x7xf32>, %xn: tensor<2x8x8x3xbf16>)
    -> (tensor<2x3x7x7xf32>, tensor<2x3x4x4xf32>, tensor<2x8x8x3xbf16>) {
  // CHECK-NEXT: %[[M:.*]] = jit.max_pool2d %arg0 kernel_size = [3, 3] stride = [2, 2] padding = [1, 1] ceil_mode : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
  // CHECK-NEXT: %[[DM:.*]] = jit.max_pool2d_grad %[[M]], %arg0 kernel_size = [3, 3] stride = [2, 2] padding = [1, 1] ceil_mode : (tensor<2x3x4x4xf32>, tensor<2x3x7x7xf32>) -> tensor<2x3x7x7xf32>
  // CHECK-NEXT: %[[A:.*]] = jit.avg_pool2d %arg0 kernel_size = [2, 2] stride = [2, 2] padding = [1, 1] exclude_padding : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
  // CHECK-NEXT: %[[AN:.*]] = jit.avg_pool2d %arg1 kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] layout = nhwc : tensor<2x8x8x3xbf16> -> tensor<2x4x4x3xbf16>
  // CHECK-NEXT: %[[DA:.*]] = jit.avg_pool2d_grad %[[AN]], %arg1 kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] layout = nhwc : (tensor<2x4x4x3xbf16>, tensor<2x8x8x3xbf16>) -> tensor<2x8x8x3xbf16>
  // CHECK-NEXT: return %[[DM]], %[[A]], %[[DA]]
  %m = jit.max_pool2d %x kernel_size = [3, 3] stride = [2, 2] padding = [1, 1] ceil_mode
      : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
  %dm = jit.max_pool2d_grad %m, %x kernel_size = [3, 3] stride = [2, 2] padding = [1, 1] ceil_mode
      : (tensor<2x3x4x4xf32>, tensor<2x3x7x7xf32>) -> tensor<2x3x7x7xf32>
  %a = jit.avg_pool2d %x kernel_size = [2, 2] stride = [2, 2] padding = [1, 1] exclude_padding
      : tensor<2x3x7x7xf32> -> tensor<2x3x4x4xf32>
  %an = jit.avg_pool2d %xn kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] layout = nhwc
      : tensor<2x8x8x3xbf16> -> tensor<2x4x4x3xbf16>
  %da = jit.avg_pool2d_grad %an, %xn kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] layout = nhwc
      : (tensor<2x4x4x3xbf16>, tensor<2x8x8x3xbf16>) -> tensor<2x8x8x3xbf16>
  return %dm, %a, %da : tensor<2x3x7x7xf32>, tensor<2x3x4x4xf32>, tensor<2x8x8x3xbf16>
}
