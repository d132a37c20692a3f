// RUN: amp-opt %s -split-input-file -canonicalize | FileCheck %s

// The folders of the jit dialect: jit.broadcast_to, jit.reshape,
// jit.transpose and jit.convert (of integers) fold when they do not change the value (and
// broadcast_to/reshape of suitable constants fold to constants), as do a
// multiplication by one and a reduction over kept axes of size 1; jit.constant
// is ConstantLike, so equal constants are shared.

// CHECK-LABEL: func.func @broadcast_to(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-DAG:     %[[SPLAT:.*]] = jit.constant dense<2.500000e-01> : tensor<4x8xf32>
// CHECK-DAG:     %[[SPLATI:.*]] = jit.constant dense<true> : tensor<2x3xi1>
// CHECK-DAG:     %[[ROWS:.*]] = jit.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-DAG:     %[[BB:.*]] = jit.broadcast_to %[[B]] : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-DAG:     %[[BR:.*]] = jit.broadcast_to %[[ROWS]] : tensor<2xf32> -> tensor<3x2xf32>
// CHECK:         return %[[X]], %[[SPLAT]], %[[SPLATI]], %[[BB]], %[[BR]]
func.func @broadcast_to(%x: tensor<4x8xf32>, %b: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x3xi1>, tensor<4x8xf32>, tensor<3x2xf32>) {
  // To its own shape: the input itself.
  %0 = jit.broadcast_to %x : tensor<4x8xf32> -> tensor<4x8xf32>
  // A splat constant: a larger splat.
  %c = jit.constant dense<0.25> : tensor<8xf32>
  %1 = jit.broadcast_to %c : tensor<8xf32> -> tensor<4x8xf32>
  %t = jit.constant dense<true> : tensor<i1>
  %2 = jit.broadcast_to %t : tensor<i1> -> tensor<2x3xi1>
  // A real broadcast of a value, or of a non-splat constant, stays.
  %3 = jit.broadcast_to %b : tensor<8xf32> -> tensor<4x8xf32>
  %rows = jit.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %4 = jit.broadcast_to %rows : tensor<2xf32> -> tensor<3x2xf32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x3xi1>, tensor<4x8xf32>, tensor<3x2xf32>
}

// -----

// CHECK-LABEL: func.func @reshape(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x8xf32>)
// CHECK-DAG:     %[[C:.*]] = jit.constant dense<{{\[}}[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-DAG:     %[[S:.*]] = jit.constant dense<5.000000e-01> : tensor<1x1xf16>
// CHECK-DAG:     %[[R:.*]] = jit.reshape %[[X]] : tensor<2x8xf32> -> tensor<16xf32>
// CHECK:         return %[[X]], %[[C]], %[[S]], %[[R]]
func.func @reshape(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x3xi64>, tensor<1x1xf16>, tensor<16xf32>) {
  %0 = jit.reshape %x : tensor<2x8xf32> -> tensor<2x8xf32>
  // Constants keep their row-major elements under the new shape.
  %c = jit.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %1 = jit.reshape %c : tensor<6xi64> -> tensor<2x3xi64>
  %s = jit.constant dense<0.5> : tensor<f16>
  %2 = jit.reshape %s : tensor<f16> -> tensor<1x1xf16>
  %3 = jit.reshape %x : tensor<2x8xf32> -> tensor<16xf32>
  return %0, %1, %2, %3 : tensor<2x8xf32>, tensor<2x3xi64>, tensor<1x1xf16>, tensor<16xf32>
}

// -----

// CHECK-LABEL: func.func @transpose(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x3x4xf32>, %[[S:[^:]*]]: tensor<bf16>)
// CHECK-NEXT:    %[[T:.*]] = jit.transpose %[[X]] perm = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
// CHECK-NEXT:    return %[[X]], %[[S]], %[[T]]
func.func @transpose(%x: tensor<2x3x4xf32>, %s: tensor<bf16>) -> (tensor<2x3x4xf32>, tensor<bf16>, tensor<2x4x3xf32>) {
  // The identity permutation (also of a rank-0 tensor) is the input.
  %0 = jit.transpose %x perm = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %1 = jit.transpose %s perm = [] : tensor<bf16> -> tensor<bf16>
  %2 = jit.transpose %x perm = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  return %0, %1, %2 : tensor<2x3x4xf32>, tensor<bf16>, tensor<2x4x3xf32>
}

// -----

// jit.convert is the user's own conversion: only the identity of integers
// folds. An identity of floats states the precision the user wrote (a traced
// step records values in their fp32 trace types): the AMP pass must see it,
// and the AMP pipeline removes it after deciding.
// CHECK-LABEL: func.func @convert(
// CHECK-SAME:    %[[H:[^:]*]]: tensor<4xf16>, %[[M:[^:]*]]: tensor<4xi1>, %[[I:[^:]*]]: tensor<4xi64>)
// CHECK-NEXT:    %[[SAME:.*]] = jit.convert %[[H]] : tensor<4xf16> -> tensor<4xf16>
// CHECK-NEXT:    %[[F:.*]] = jit.convert %[[M]] : tensor<4xi1> -> tensor<4xf32>
// CHECK-NEXT:    %[[W:.*]] = jit.convert %[[H]] : tensor<4xf16> -> tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = jit.convert %[[W]] : tensor<4xf32> -> tensor<4xf16>
// CHECK-NEXT:    return %[[SAME]], %[[F]], %[[N]], %[[I]]
func.func @convert(%h: tensor<4xf16>, %m: tensor<4xi1>, %i: tensor<4xi64>)
    -> (tensor<4xf16>, tensor<4xf32>, tensor<4xf16>, tensor<4xi64>) {
  %0 = jit.convert %h : tensor<4xf16> -> tensor<4xf16>
  %1 = jit.convert %m : tensor<4xi1> -> tensor<4xf32>
  // Unlike amp.cast, a round trip through jit.convert is left as written.
  %2 = jit.convert %h : tensor<4xf16> -> tensor<4xf32>
  %3 = jit.convert %2 : tensor<4xf32> -> tensor<4xf16>
  %4 = jit.convert %i : tensor<4xi64> -> tensor<4xi64>
  return %0, %1, %3, %4 : tensor<4xf16>, tensor<4xf32>, tensor<4xf16>, tensor<4xi64>
}

// -----

// Equal constants become one, hoisted to the start of the function; unused
// ones disappear.
// CHECK-LABEL: func.func @constants_are_shared(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<3.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    %[[A:.*]] = jit.add %arg0, %[[C]]
// CHECK-NEXT:    %[[M:.*]] = jit.mul %[[A]], %[[C]]
// CHECK-NEXT:    return %[[M]]
func.func @constants_are_shared(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = jit.constant dense<3.0> : tensor<4xf32>
  %0 = jit.add %x, %c0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %unused = jit.constant dense<2.0> : tensor<4xf32>
  %c1 = jit.constant dense<3.0> : tensor<4xf32>
  %1 = jit.mul %0, %c1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// x * 1 is x (either side: the constant moves right); a 1 that broadcasts x
// to a larger shape, and any other constant, stay.
// CHECK-LABEL: func.func @multiplying_by_one(
// CHECK-DAG:     %[[ONES:.*]] = jit.constant dense<1.000000e+00> : tensor<2x4xf16>
// CHECK-DAG:     %[[HALF:.*]] = jit.constant dense<5.000000e-01> : tensor<4xf16>
// CHECK-DAG:     %[[B:.*]] = jit.mul %arg0, %[[ONES]] : (tensor<4xf16>, tensor<2x4xf16>) -> tensor<2x4xf16>
// CHECK-DAG:     %[[H:.*]] = jit.mul %arg0, %[[HALF]]
// CHECK:         return %arg0, %arg0, %[[B]], %[[H]]
func.func @multiplying_by_one(%x: tensor<4xf16>) -> (tensor<4xf16>, tensor<4xf16>, tensor<2x4xf16>, tensor<4xf16>) {
  %one = jit.constant dense<1.0> : tensor<f16>
  %ones = jit.constant dense<1.0> : tensor<2x4xf16>
  %half = jit.constant dense<0.5> : tensor<4xf16>
  %0 = jit.mul %x, %one : (tensor<4xf16>, tensor<f16>) -> tensor<4xf16>
  %1 = jit.mul %one, %x : (tensor<f16>, tensor<4xf16>) -> tensor<4xf16>
  %2 = jit.mul %x, %ones : (tensor<4xf16>, tensor<2x4xf16>) -> tensor<2x4xf16>
  %3 = jit.mul %x, %half : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
  return %0, %1, %2, %3 : tensor<4xf16>, tensor<4xf16>, tensor<2x4xf16>, tensor<4xf16>
}

// -----

// A sum, mean or maximum over kept axes of size 1 is its input (a global
// average pool of 1x1 maps); over a larger axis, or dropping the axes, it
// stays.
// CHECK-LABEL: func.func @reductions_of_one_element(
// CHECK:         %[[WIDE:.*]] = jit.mean %arg1 axes = [2, 3] keepdim
// CHECK:         %[[DROPPED:.*]] = jit.sum %arg0 axes = [2, 3] :
// CHECK:         return %arg0, %arg0, %arg0, %[[WIDE]], %[[DROPPED]]
func.func @reductions_of_one_element(%x: tensor<2x8x1x1xf32>, %y: tensor<2x8x2x1xf32>)
    -> (tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8xf32>) {
  %0 = jit.mean %x axes = [2, 3] keepdim : tensor<2x8x1x1xf32> -> tensor<2x8x1x1xf32>
  %1 = jit.sum %x axes = [3] keepdim : tensor<2x8x1x1xf32> -> tensor<2x8x1x1xf32>
  %2 = jit.max %x axes = [2] keepdim : tensor<2x8x1x1xf32> -> tensor<2x8x1x1xf32>
  %3 = jit.mean %y axes = [2, 3] keepdim : tensor<2x8x2x1xf32> -> tensor<2x8x1x1xf32>
  %4 = jit.sum %x axes = [2, 3] : tensor<2x8x1x1xf32> -> tensor<2x8xf32>
  return %0, %1, %2, %3, %4 : tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8x1x1xf32>, tensor<2x8xf32>
}
