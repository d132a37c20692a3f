//===- Passes.td - passes over the jit dialect -------------*- tablegen -*-===//
//
// Rewrites of traced steps that are not about precision: they move data, and
// the rewritten step computes exactly the values of the original.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_TD
#define AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def JitConvertLayout : Pass<"jit-convert-layout", "::mlir::ModuleOp"> {
  let summary = "Run convolutions, pooling and batch norm channels-last (NHWC)";
  let description = [{
    Traced steps are NCHW, as PyTorch records them; cuDNN is fastest on NHWC.
    With `layout=nhwc` every NCHW `jit.conv2d`, `jit.conv2d_grad_input`,
    `jit.conv2d_grad_weight`, `jit.max_pool2d(_grad)` and
    `jit.avg_pool2d(_grad)` becomes its `layout = nhwc` form (activations
    [N, H, W, C], filters [O, KH, KW, C/groups]), and every batch-norm op on
    a rank-4 value with `axis = 1` takes `axis = 3`, with `jit.transpose` ops
    (perm [0, 2, 3, 1] in, [0, 3, 1, 2] out) around each. The transposes
    between two such ops then cancel: transposes compose, sink through
    elementwise ops (`op(T(a), T(b))` becomes `T(op(a, b))`), are absorbed by
    `jit.sum`/`jit.mean`/`jit.max` over the spatial axes and move into the
    small input of `jit.broadcast_to`. What remains sits at the edges of the
    convolutional part: the network input, each filter, each filter's
    gradient, and any value that leaves through an op with no NHWC form
    (e.g. a `jit.reshape` to a classifier). The function's signature is not
    changed, and every value it computes is bit for bit the original's.

    `layout=nchw` leaves the module alone, so pipelines can always list the
    pass and choose the layout by target.

    ```
    amp-opt --jit-convert-layout="layout=nhwc" step.mlir
    ```
  }];
  let dependentDialects = ["::ampjit::ir::JitDialect"];
  let options = [
    Option<"layout", "layout", "std::string", /*default=*/"\"nhwc\"",
           "The activation layout to run in: nhwc (convert) or nchw (leave as traced)">,
  ];
}

#endif // AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_TD
