//===- JitOps.td - ops of the jit dialect --------------------*- tablegen -*-===//
//
// One op per function of the eager API. Adding an op: see DESIGN.md,
// "Conventions" (frontend, ODS, policy YAML, codegen, runtime, tests).
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_JITOPS_TD
#define AMPJIT_DIALECT_JIT_IR_JITOPS_TD

include "ampjit/Dialect/Jit/IR/JitBase.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

class Jit_UnaryOp<string mnemonic, string formula, list<Trait> traits = []>
    : Jit_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let summary = "elementwise " # formula;
  let description = !strconcat("Computes `", formula, "` elementwise.\n\n",
    "```mlir\n%y = jit.", mnemonic, " %x : tensor<64x512xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$input);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Jit_NegOp : Jit_UnaryOp<"neg", "-x">;
def Jit_ReluOp : Jit_UnaryOp<"relu", "max(x, 0)">;
def Jit_TanhOp : Jit_UnaryOp<"tanh", "tanh(x)">;
def Jit_SigmoidOp : Jit_UnaryOp<"sigmoid", "1 / (1 + exp(-x))">;
def Jit_ExpOp : Jit_UnaryOp<"exp", "exp(x)">;
def Jit_LogOp : Jit_UnaryOp<"log", "log(x)">;
def Jit_SqrtOp : Jit_UnaryOp<"sqrt", "sqrt(x)">;
def Jit_RsqrtOp : Jit_UnaryOp<"rsqrt", "1 / sqrt(x)">;

def Jit_GeluOp : Jit_Op<"gelu", [Pure, SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `x * Phi(x)`, with `Phi` the standard normal CDF evaluated exactly through
    `erf` (`approximate = none`) or with PyTorch's tanh approximation
    (`approximate = tanh`). The approximation is an attribute because library
    GEMM epilogues implement only the tanh form.

    ```mlir
    %y = jit.gelu %x approximate = tanh : tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input,
                       DefaultValuedAttr<Jit_GeluApproximate, "::ampjit::ir::GeluApproximate::none">:$approximate);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `approximate` `=` $approximate attr-dict `:` type($input)";
}

def Jit_PowOp : Jit_Op<"pow", [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise power by a scalar exponent";
  let description = [{
    `x ^ exponent` with a compile-time exponent (a C++ number read during
    tracing is a constant of that trace).

    ```mlir
    %y = jit.pow %x exponent = 2.0 : tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, F64Attr:$exponent);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `exponent` `=` $exponent attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Elementwise binary with numpy broadcasting
//===----------------------------------------------------------------------===//

class Jit_BroadcastBinaryOp<string mnemonic, string formula, list<Trait> traits = []>
    : Jit_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let summary = "elementwise " # formula # " with numpy broadcasting";
  let description = !strconcat("Computes `", formula, "` elementwise. The operands ",
    "have the same element type; their shapes broadcast as in numpy (dimensions ",
    "aligned from the right, each pair equal or one of them 1).\n\n",
    "```mlir\n%y = jit.", mnemonic,
    " %a, %b : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$lhs, Jit_FloatTensor:$rhs);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Jit_AddOp : Jit_BroadcastBinaryOp<"add", "lhs + rhs", [Commutative]>;
def Jit_SubOp : Jit_BroadcastBinaryOp<"sub", "lhs - rhs">;
def Jit_MulOp : Jit_BroadcastBinaryOp<"mul", "lhs * rhs", [Commutative]> {
  // x * 1 is x, bit for bit (a mean's gradient over one element).
  let hasFolder = 1;
}
def Jit_DivOp : Jit_BroadcastBinaryOp<"div", "lhs / rhs">;

def Jit_CompareOp : Jit_Op<"compare", [Pure, InferTypeOpAdaptor]> {
  let summary = "elementwise comparison with numpy broadcasting";
  let description = [{
    Compares `lhs` and `rhs` (same element type, broadcast shapes) and yields
    an i1 tensor.

    ```mlir
    %m = jit.compare gt, %x, %t : (tensor<64x512xf32>, tensor<f32>) -> tensor<64x512xi1>
    ```
  }];
  let arguments = (ins Jit_ComparePredicate:$predicate, Jit_Tensor:$lhs, Jit_Tensor:$rhs);
  let results = (outs Jit_BoolTensor:$result);
  let assemblyFormat = "$predicate `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Jit_SelectOp : Jit_Op<"select", [Pure, InferTypeOpAdaptor]> {
  let summary = "elementwise choice with numpy broadcasting";
  let description = [{
    `condition ? true_value : false_value` elementwise; all three operands
    broadcast to the result shape.

    ```mlir
    %y = jit.select %m, %x, %zero
        : (tensor<64x512xi1>, tensor<64x512xf32>, tensor<f32>) -> tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_BoolTensor:$condition, Jit_Tensor:$true_value, Jit_Tensor:$false_value);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$condition `,` $true_value `,` $false_value attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

def Jit_MatmulOp : Jit_Op<"matmul", [Pure, InferTypeOpAdaptor]> {
  let summary = "matrix product with transpose flags and broadcast batch dimensions";
  let description = [{
    `op(lhs) @ op(rhs)` where `op` transposes the last two dimensions when
    `transpose_lhs`/`transpose_rhs` is set. Both operands have rank >= 2 and
    the same element type; leading (batch) dimensions broadcast. Accumulation
    precision is the backend's business (fp32 for low-precision inputs).

    ```mlir
    // x @ W^T, as nn.Linear computes it with W in PyTorch's [out, in] layout.
    %y = jit.matmul %x, %w {transpose_rhs}
        : (tensor<64x784xf32>, tensor<512x784xf32>) -> tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$lhs, Jit_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Jit_ReductionOp<string mnemonic, string what>
    : Jit_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let summary = what # " over axes";
  let description = !strconcat("Reduces `input` to its ", what, " over `axes` ",
    "(strictly increasing, each in [0, rank)). Reduced dimensions are removed, or ",
    "kept with size 1 under `keepdim`. Reducing a rank-0 tensor takes `axes = []`.\n\n",
    "```mlir\n%s = jit.", mnemonic,
    " %x axes = [1] keepdim : tensor<64x10xf32> -> tensor<64x1xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$input, DenseI64ArrayAttr:$axes, UnitAttr:$keepdim);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `axes` `=` $axes (`keepdim` $keepdim^)? attr-dict `:` type($input) `->` type($result)";
  // Over axes of size 1 with keepdim: the input itself.
  let hasFolder = 1;
}

def Jit_SumOp : Jit_ReductionOp<"sum", "sum">;
def Jit_MeanOp : Jit_ReductionOp<"mean", "mean">;
def Jit_MaxOp : Jit_ReductionOp<"max", "maximum">;

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

def Jit_BroadcastToOp : Jit_Op<"broadcast_to", [Pure]> {
  let summary = "broadcast to a larger shape";
  let description = [{
    Expands `input` to the result shape by numpy rules: the input's dimensions
    align with the result's trailing ones and each is 1 or equal.

    ```mlir
    %b = jit.broadcast_to %bias : tensor<512xf32> -> tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_Tensor:$input);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Jit_ReshapeOp : Jit_Op<"reshape", [Pure]> {
  let summary = "reinterpret the shape, keeping the elements in row-major order";
  let description = [{
    ```mlir
    %flat = jit.reshape %img : tensor<64x1x28x28xf32> -> tensor<64x784xf32>
    ```
  }];
  let arguments = (ins Jit_Tensor:$input);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Jit_TransposeOp : Jit_Op<"transpose", [Pure, InferTypeOpAdaptor]> {
  let summary = "permute dimensions";
  let description = [{
    Result dimension `i` is input dimension `perm[i]`. The eager API's
    `transpose(x, d0, d1)` and `permute(x, perm)` both record this op.

    ```mlir
    %t = jit.transpose %w perm = [1, 0] : tensor<512x784xf32> -> tensor<784x512xf32>
    ```
  }];
  let arguments = (ins Jit_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

def Jit_ConstantOp : Jit_Op<"constant", [ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "a tensor constant (full, zeros and ones record splats)";
  let description = [{
    ```mlir
    %zeros = jit.constant dense<0.0> : tensor<64x512xf32>
    %w = jit.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Jit_ConvertOp : Jit_Op<"convert", [Pure]> {
  let summary = "element type conversion the user asked for (`Tensor::to`)";
  let description = [{
    Converts every element to the result's element type, keeping the shape
    (float to float rounds to nearest even; float to i64 truncates toward zero;
    to i1 tests for non-zero). This is the user's conversion: AMP's own casts
    are `amp.cast`, which passes may move, share or fold; `jit.convert` they
    leave alone.

    ```mlir
    %f = jit.convert %mask : tensor<64x512xi1> -> tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_Tensor:$input);
  let results = (outs Jit_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Jit_TypeAsOp : Jit_Op<"type_as", [Pure]> {
  let summary = "conversion to another value's element type (`Tensor::type_as`)";
  let description = [{
    Converts `input` to the element type of `reference`, keeping the shape of
    `input`; `reference` is read for its type only. Unlike `jit.convert`, the
    target is not fixed when the op is written: a traced step records every
    value in fp32, and the AMP pass gives the result the type it decided for
    `reference` (f16 where `reference` became f16), as an eager `type_as`
    under autocast would. `amp-auto-cast` then replaces the op by an
    `amp.cast` or by its input; without AMP it runs as a conversion.

    ```mlir
    %y = jit.type_as %normalised, %x : tensor<64x512xf32>, tensor<64x512xf32> -> tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, Jit_FloatTensor:$reference);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $reference attr-dict `:` type($input) `,` type($reference) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalisation, activation with axes, dropout
//===----------------------------------------------------------------------===//

class Jit_AxisOp<string mnemonic, string formula>
    : Jit_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = formula # " along one axis";
  let description = !strconcat("Computes `", formula, "` along `axis`, ",
    "subtracting the maximum first for stability.\n\n",
    "```mlir\n%p = jit.", mnemonic, " %logits axis = 1 : tensor<64x10xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `axis` `=` $axis attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Jit_SoftmaxOp : Jit_AxisOp<"softmax", "exp(x) / sum(exp(x))">;
def Jit_LogSoftmaxOp : Jit_AxisOp<"log_softmax", "x - log(sum(exp(x)))">;

def Jit_LayerNormOp : Jit_Op<"layer_norm", [Pure, AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "layer normalisation over the trailing dimensions";
  let description = [{
    Normalises `input` over the dimensions from `axis` to the last (PyTorch's
    `normalized_shape` is `input.shape[axis:]`), then applies the optional
    elementwise `weight` and `bias` of that shape. Also yields the per-row
    `mean` and reciprocal standard deviation `rstd` (shape `input.shape[:axis]`,
    f32 for f16/bf16/f32 inputs and f64 for f64) that `jit.layer_norm_grad`
    consumes.

    ```mlir
    %y, %mean, %rstd = jit.layer_norm %x weight %g bias %b axis = 1 eps = 1.0e-05
        : (tensor<64x512xf32>, tensor<512xf32>, tensor<512xf32>)
          -> (tensor<64x512xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input,
                       Optional<Jit_FloatTensor>:$weight,
                       Optional<Jit_FloatTensor>:$bias,
                       I64Attr:$axis,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs Jit_FloatTensor:$output, Jit_FloatTensor:$mean, Jit_FloatTensor:$rstd);
  let assemblyFormat = [{
    $input (`weight` $weight^)? (`bias` $bias^)? `axis` `=` $axis `eps` `=` $eps attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Jit_DropoutOp : Jit_Op<"dropout", [Pure, InferTypeOpAdaptor]> {
  let summary = "dropout with explicit, counter-based RNG state";
  let description = [{
    Zeroes each element with probability `p` and scales the survivors by
    `1 / (1 - p)`. The random stream is a pure function of `rng_state`
    (`[seed, offset]`, a state tensor of the step): element `i` draws from a
    counter-based generator at `offset + i`, so CPU and CUDA agree bit for bit
    and replaying a step with the same state reproduces its mask. Yields the
    output, the keep-mask (for the backward pass) and the advanced state
    (`offset + number of elements`).

    ```mlir
    %y, %mask, %rng1 = jit.dropout %x, %rng p = 1.0e-01
        : (tensor<64x512xf32>, tensor<2xi64>) -> (tensor<64x512xf32>, tensor<64x512xi1>, tensor<2xi64>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, Jit_RngState:$rng_state, F64Attr:$p);
  let results = (outs Jit_FloatTensor:$output, Jit_BoolTensor:$mask, Jit_RngState:$next_rng_state);
  let assemblyFormat = "$input `,` $rng_state `p` `=` $p attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Jit_MseLossOp : Jit_Op<"mse_loss", [Pure, InferTypeOpAdaptor]> {
  let summary = "mean squared error";
  let description = [{
    `(input - target)^2`, reduced by `reduction` (`mean` and `sum` give a
    rank-0 tensor, `none` the elementwise loss).

    ```mlir
    %l = jit.mse_loss %y, %t reduction = mean
        : (tensor<2048x8192xf32>, tensor<2048x8192xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, Jit_FloatTensor:$target,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `,` $target `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
}

def Jit_CrossEntropyOp : Jit_Op<"cross_entropy", [Pure, InferTypeOpAdaptor]> {
  let summary = "softmax cross-entropy with integer class labels";
  let description = [{
    `logits` is `[N, C]`, `labels` is `[N]` of i64 in `[0, C)`; rows whose
    label is `ignore_index` contribute nothing (and `mean` divides by the
    number of other rows). `label_smoothing` mixes the one-hot target with the
    uniform distribution, as PyTorch does.

    ```mlir
    %l = jit.cross_entropy %logits, %labels reduction = mean
        : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$logits, Jit_IndexTensor:$labels,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $labels `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Jit_NllLossOp : Jit_Op<"nll_loss", [Pure, InferTypeOpAdaptor]> {
  let summary = "negative log-likelihood of integer class labels";
  let description = [{
    `-log_probs[n, labels[n]]`, reduced; shapes and `ignore_index` as for
    `jit.cross_entropy`.

    ```mlir
    %l = jit.nll_loss %logp, %labels reduction = sum
        : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$log_probs, Jit_IndexTensor:$labels,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$log_probs `,` $labels `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Backward ops a composite would make slow
//===----------------------------------------------------------------------===//

class Jit_ActivationGradOp<string mnemonic, string forward, string saved>
    : Jit_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "gradient of jit." # forward;
  let description = !strconcat("Given the gradient of `jit.", forward, "`'s result ",
    "and the forward ", saved, ", yields the gradient of its input.\n\n",
    "```mlir\n%dx = jit.", mnemonic, " %dy, %saved : tensor<64x512xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$saved);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $saved attr-dict `:` type($grad_output)";
}

def Jit_ReluGradOp : Jit_ActivationGradOp<"relu_grad", "relu", "output (`dy * (y > 0)`)">;

def Jit_GeluGradOp : Jit_Op<"gelu_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "gradient of jit.gelu";
  let description = [{
    Given the gradient of `jit.gelu`'s result and its forward input, yields the
    gradient of the input under the same approximation.

    ```mlir
    %dx = jit.gelu_grad %dy, %x approximate = tanh : tensor<64x512xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input,
                       DefaultValuedAttr<Jit_GeluApproximate, "::ampjit::ir::GeluApproximate::none">:$approximate);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $input `approximate` `=` $approximate attr-dict `:` type($grad_output)";
}

class Jit_AxisGradOp<string mnemonic, string forward, string formula>
    : Jit_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "gradient of jit." # forward;
  let description = !strconcat("Given the gradient `dy` of `jit.", forward,
    "`'s result and that result `y`, yields `", formula, "`.\n\n",
    "```mlir\n%dx = jit.", mnemonic, " %dy, %y axis = 1 : tensor<64x10xf32>\n```");
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$output, I64Attr:$axis);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $output `axis` `=` $axis attr-dict `:` type($grad_output)";
  let hasVerifier = 1;
}

def Jit_SoftmaxGradOp : Jit_AxisGradOp<"softmax_grad", "softmax", "y * (dy - sum(dy * y, axis))">;
def Jit_LogSoftmaxGradOp : Jit_AxisGradOp<"log_softmax_grad", "log_softmax", "dy - exp(y) * sum(dy, axis)">;

def Jit_LayerNormGradOp : Jit_Op<"layer_norm_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.layer_norm";
  let description = [{
    From the output gradient, the forward input and the `mean`/`rstd` the
    forward op saved, yields the gradients of the input, the weight and the
    bias (the latter two of shape `input.shape[axis:]`; without `weight` the
    input gradient uses a weight of ones).

    ```mlir
    %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %rstd weight %g axis = 1
        : (tensor<64x512xf32>, tensor<64x512xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512xf32>)
          -> (tensor<64x512xf32>, tensor<512xf32>, tensor<512xf32>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input,
                       Jit_FloatTensor:$mean, Jit_FloatTensor:$rstd,
                       Optional<Jit_FloatTensor>:$weight, I64Attr:$axis);
  let results = (outs Jit_FloatTensor:$grad_input, Jit_FloatTensor:$grad_weight,
                      Jit_FloatTensor:$grad_bias);
  let assemblyFormat = [{
    $grad_output `,` $input `,` $mean `,` $rstd (`weight` $weight^)? `axis` `=` $axis attr-dict
    `:` functional-type(operands, results)
  }];
}

def Jit_MseLossGradOp : Jit_Op<"mse_loss_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.mse_loss with respect to its input";
  let description = [{
    `grad_output * 2 * (input - target)`, divided by the element count for
    `mean`; `grad_output` has the loss's shape.

    ```mlir
    %dy = jit.mse_loss_grad %g, %y, %t reduction = mean
        : (tensor<f32>, tensor<64x10xf32>, tensor<64x10xf32>) -> tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input, Jit_FloatTensor:$target,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $input `,` $target `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
}

def Jit_CrossEntropyGradOp : Jit_Op<"cross_entropy_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.cross_entropy with respect to the logits";
  let description = [{
    `grad_output * (softmax(logits) - smoothed_one_hot(labels))`, divided by
    the number of counted rows for `mean`, zero on ignored rows: one fused pass
    instead of the softmax, subtraction and scaling a composite would run.

    ```mlir
    %dlogits = jit.cross_entropy_grad %g, %logits, %labels reduction = mean
        : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$logits, Jit_IndexTensor:$labels,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Jit_FloatTensor:$grad_logits);
  let assemblyFormat = "$grad_output `,` $logits `,` $labels `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Jit_NllLossGradOp : Jit_Op<"nll_loss_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.nll_loss with respect to the log-probabilities";
  let description = [{
    `-grad_output` at each row's label (divided by the counted rows for
    `mean`), zero elsewhere; `log_probs` supplies the shape and type.

    ```mlir
    %dlogp = jit.nll_loss_grad %g, %logp, %labels reduction = mean
        : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$log_probs, Jit_IndexTensor:$labels,
                       DefaultValuedAttr<Jit_Reduction, "::ampjit::ir::Reduction::mean">:$reduction,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $log_probs `,` $labels `reduction` `=` $reduction attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

def Jit_EmbeddingOp : Jit_Op<"embedding", [Pure, InferTypeOpAdaptor]> {
  let summary = "rows of an embedding table, gathered by index";
  let description = [{
    PyTorch's `embedding(indices, weight)`: `weight` is `[V, D]`, `indices`
    any shape of i64 in `[0, V)`; the result has the indices' shape followed
    by `D`, in the weight's type. An index outside `[0, V)` is an error on the
    CPU and a NaN row on CUDA (a device cannot raise mid-step). `padding_idx`
    changes only the gradient (`jit.embedding_grad`).

    ```mlir
    %e = jit.embedding %ids, %table : (tensor<8x128xi64>, tensor<1000x64xf32>) -> tensor<8x128x64xf32>
    ```
  }];
  let arguments = (ins Jit_IndexTensor:$indices, Jit_FloatTensor:$weight,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$indices `,` $weight attr-dict `:` functional-type(operands, results)";
}

def Jit_EmbeddingGradOp : Jit_Op<"embedding_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.embedding with respect to its table";
  let description = [{
    `[num_weights, D]`: row `v` is the sum of the `grad_output` rows whose
    index is `v`, in index order, accumulated in fp32 (f64 for f64) and
    rounded once; the `padding_idx` row stays zero. The result has
    `grad_output`'s type (the AMP policies keep it fp32).

    ```mlir
    %dtable = jit.embedding_grad %de, %ids {num_weights = 1000 : i64}
        : (tensor<8x128x64xf32>, tensor<8x128xi64>) -> tensor<1000x64xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_IndexTensor:$indices, I64Attr:$num_weights,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Jit_FloatTensor:$grad_weight);
  let assemblyFormat = "$grad_output `,` $indices attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Fused optimizer updates
//===----------------------------------------------------------------------===//

def Jit_SgdUpdateOp : Jit_Op<"sgd_update", [Pure, AttrSizedOperandSegments,
    InferTypeOpAdaptorWithIsCompatible, DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "one SGD step of one parameter, fused";
  let description = [{
    PyTorch's SGD on one parameter, reading the gradient in whatever precision
    backward produced it and multiplying it by `inv_scale` (the loss scaler's
    `1 / scale`) in fp32 as it is read, so no unscaled copy is ever written:

    ```
    g = grad * inv_scale;  g = maximize ? -g : g
    g = g + weight_decay * param
    buf = step == 0 ? g : momentum * buf + (1 - dampening) * g     (if momentum != 0)
    g = nesterov ? g + momentum * buf : buf                          (if momentum != 0)
    param = param - lr * g
    ```

    With `predicate` (the scaler's all-finite flag) false, every result equals
    the state it replaces, bit for bit. `momentum_buffer` is present exactly
    when `momentum != 0`; `step` (the number of updates this optimizer has
    applied, which the optimizer increments itself) is needed only to start the
    buffer as PyTorch does when `dampening != 0`. Results are tied by the
    enclosing function to the state they replace.

    ```mlir
    %w1, %buf1 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr inv_scale %inv predicate %ok
        {momentum = 9.0e-01}
        : (tensor<512x784xf32>, tensor<512x784xf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
          -> (tensor<512x784xf32>, tensor<512x784xf32>)
    ```

    `param_copy` (O2's master weights, added by `amp-master-weights`) is the
    low-precision copy of `param` that the step's forward and backward read:
    f16 or bf16, the shape of the fp32 `param`. The update then also yields
    `new_param_copy = round_to_nearest_even(new_param)` in the copy's type,
    written by the same kernel from the new fp32 value, so no step casts its
    parameters. With `predicate` false it returns `param_copy` unchanged, like
    every other piece of state. The optional results follow the optional
    state operands in order: `new_momentum_buffer` when `momentum_buffer` is
    given, then `new_param_copy` when `param_copy` is.

    ```mlir
    %w1, %buf1, %w16_1 = jit.sgd_update %w, %gw momentum_buffer %buf lr %lr inv_scale %inv
        predicate %ok param_copy %w16 {momentum = 9.0e-01}
        : (tensor<512x784xf32>, tensor<512x784xf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>,
           tensor<i1>, tensor<512x784xf16>)
          -> (tensor<512x784xf32>, tensor<512x784xf32>, tensor<512x784xf16>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$param, Jit_FloatTensor:$grad,
                       Optional<Jit_FloatTensor>:$momentum_buffer,
                       Optional<Jit_I64Scalar>:$step,
                       Jit_F32Scalar:$lr,
                       Optional<Jit_F32Scalar>:$inv_scale,
                       Optional<Jit_BoolScalar>:$predicate,
                       Optional<Jit_FloatTensor>:$param_copy,
                       DefaultValuedAttr<F64Attr, "0.0">:$momentum,
                       DefaultValuedAttr<F64Attr, "0.0">:$dampening,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                       UnitAttr:$nesterov,
                       UnitAttr:$maximize);
  // Two optional results would need AttrSizedResultSegments, whose segment
  // sizes neither the inferring builders nor functional-type(operands,
  // results) can fill in. The optional results are therefore one group whose
  // members follow from the optional operands; getNewMomentumBuffer() and
  // getNewParamCopy() (and the printed SSA names) name them.
  let results = (outs Jit_FloatTensor:$new_param, Variadic<Jit_FloatTensor>:$new_optional_state);
  let assemblyFormat = [{
    $param `,` $grad (`momentum_buffer` $momentum_buffer^)? (`step` $step^)? `lr` $lr
    (`inv_scale` $inv_scale^)? (`predicate` $predicate^)? (`param_copy` $param_copy^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let builders = [
    // An update without a low-precision copy (every level but O2/O3 after master weights).
    OpBuilder<(ins "::mlir::Value":$param, "::mlir::Value":$grad, "::mlir::Value":$momentum_buffer,
                   "::mlir::Value":$step, "::mlir::Value":$lr, "::mlir::Value":$inv_scale,
                   "::mlir::Value":$predicate, "::llvm::APFloat":$momentum,
                   "::llvm::APFloat":$dampening, "::llvm::APFloat":$weight_decay,
                   CArg<"bool", "false">:$nesterov, CArg<"bool", "false">:$maximize), [{
      build($_builder, $_state, param, grad, momentum_buffer, step, lr, inv_scale, predicate,
            /*param_copy=*/::mlir::Value(), momentum, dampening, weight_decay, nesterov, maximize);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The new momentum buffer: null unless operand `momentum_buffer` is given.
    ::mlir::TypedValue<::mlir::RankedTensorType> getNewMomentumBuffer();
    /// The new low-precision parameter copy: null unless operand `param_copy` is given.
    ::mlir::TypedValue<::mlir::RankedTensorType> getNewParamCopy();
  }];
  let hasVerifier = 1;
}

def Jit_AdamUpdateOp : Jit_Op<"adam_update", [Pure, AttrSizedOperandSegments,
                                            InferTypeOpAdaptorWithIsCompatible,
                                            DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "one Adam or AdamW step of one parameter, fused";
  let description = [{
    PyTorch's Adam (`decoupled_weight_decay` unset) or AdamW (set) on one
    parameter. The gradient is read in its own precision and multiplied by
    `inv_scale` in fp32; `step` is the number of updates applied before this
    one (bias correction uses `step + 1`; the optimizer increments its step
    tensor itself, predicated). With `predicate` false every result equals the
    state it replaces, bit for bit.

    ```mlir
    %w1, %m1, %v1 = jit.adam_update %w, %gw, %m, %v step %t lr %lr inv_scale %inv predicate %ok
        {beta1 = 9.0e-01, beta2 = 9.99e-01, eps = 1.0e-08, weight_decay = 1.0e-02, decoupled_weight_decay}
        : (tensor<512xf32>, tensor<512xf16>, tensor<512xf32>, tensor<512xf32>, tensor<i64>, tensor<f32>,
           tensor<f32>, tensor<i1>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>)
    ```

    With `max_exp_avg_sq` given the update is AMSGrad (PyTorch's
    `amsgrad=True`): `new_max_exp_avg_sq = maximum(max_exp_avg_sq,
    new_exp_avg_sq)` (NaN-propagating, as `torch.maximum`) and the
    denominator reads it instead of `new_exp_avg_sq`:

    ```mlir
    %w1, %m1, %v1, %vmax1 = jit.adam_update %w, %gw, %m, %v max_exp_avg_sq %vmax step %t lr %lr
        : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<512xf32>,
           tensor<i64>, tensor<f32>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<512xf32>)
    ```

    `param_copy` (O2's master weights) is the f16 or bf16 copy of the fp32
    `param` that the rest of the step reads; the update also yields
    `new_param_copy = round_to_nearest_even(new_param)` in the copy's type,
    and `param_copy` unchanged when `predicate` is false. The optional results
    follow the optional state operands in order: `new_max_exp_avg_sq` when
    `max_exp_avg_sq` is given, then `new_param_copy` when `param_copy` is.

    ```mlir
    %w1, %m1, %v1, %w16_1 = jit.adam_update %w, %gw, %m, %v step %t lr %lr inv_scale %inv
        predicate %ok param_copy %w16
        : (tensor<512xf32>, tensor<512xf16>, tensor<512xf32>, tensor<512xf32>, tensor<i64>, tensor<f32>,
           tensor<f32>, tensor<i1>, tensor<512xf16>)
          -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<512xf16>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$param, Jit_FloatTensor:$grad,
                       Jit_FloatTensor:$exp_avg, Jit_FloatTensor:$exp_avg_sq,
                       Optional<Jit_FloatTensor>:$max_exp_avg_sq,
                       Jit_I64Scalar:$step,
                       Jit_F32Scalar:$lr,
                       Optional<Jit_F32Scalar>:$inv_scale,
                       Optional<Jit_BoolScalar>:$predicate,
                       Optional<Jit_FloatTensor>:$param_copy,
                       DefaultValuedAttr<F64Attr, "0.9">:$beta1,
                       DefaultValuedAttr<F64Attr, "0.999">:$beta2,
                       DefaultValuedAttr<F64Attr, "1e-8">:$eps,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                       UnitAttr:$decoupled_weight_decay,
                       UnitAttr:$maximize);
  // One group of optional results, as jit.sgd_update's (see there why).
  let results = (outs Jit_FloatTensor:$new_param, Jit_FloatTensor:$new_exp_avg,
                      Jit_FloatTensor:$new_exp_avg_sq, Variadic<Jit_FloatTensor>:$new_optional_state);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq (`max_exp_avg_sq` $max_exp_avg_sq^)? `step` $step `lr` $lr
    (`inv_scale` $inv_scale^)? (`predicate` $predicate^)? (`param_copy` $param_copy^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let builders = [
    // An update without a low-precision copy (every level but O2/O3 after master weights).
    OpBuilder<(ins "::mlir::Value":$param, "::mlir::Value":$grad, "::mlir::Value":$exp_avg,
                   "::mlir::Value":$exp_avg_sq, "::mlir::Value":$max_exp_avg_sq, "::mlir::Value":$step,
                   "::mlir::Value":$lr, "::mlir::Value":$inv_scale, "::mlir::Value":$predicate,
                   "::llvm::APFloat":$beta1, "::llvm::APFloat":$beta2, "::llvm::APFloat":$eps,
                   "::llvm::APFloat":$weight_decay, CArg<"bool", "false">:$decoupled_weight_decay,
                   CArg<"bool", "false">:$maximize), [{
      build($_builder, $_state, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, inv_scale,
            predicate, /*param_copy=*/::mlir::Value(), beta1, beta2, eps, weight_decay,
            decoupled_weight_decay, maximize);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The new running maximum (AMSGrad): null unless operand `max_exp_avg_sq` is given.
    ::mlir::TypedValue<::mlir::RankedTensorType> getNewMaxExpAvgSq();
    /// The new low-precision parameter copy: null unless operand `param_copy` is given.
    ::mlir::TypedValue<::mlir::RankedTensorType> getNewParamCopy();
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Convolutional networks
//===----------------------------------------------------------------------===//

// Window attributes shared by the convolution ops: [height, width] each.
defvar Jit_ConvAttributes = (ins DenseI64ArrayAttr:$stride, DenseI64ArrayAttr:$padding,
                                 DenseI64ArrayAttr:$dilation,
                                 DefaultValuedAttr<I64Attr, "1">:$groups,
                                 DefaultValuedAttr<Jit_ActivationLayout, "::ampjit::ir::ActivationLayout::nchw">:$layout);

def Jit_Conv2dOp : Jit_Op<"conv2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D convolution (cross-correlation) with optional bias";
  let description = [{
    PyTorch's `conv2d`. With `layout = nchw` (the default) `input` is
    [N, C, H, W] and `weight` [O, C/groups, KH, KW]; with `layout = nhwc`
    (what `jit-convert-layout` makes for the CUDA target) `input` is
    [N, H, W, C] and `weight` [O, KH, KW, C/groups], cuDNN's channels-last
    filter. `stride`, `padding` (zeros, both sides) and `dilation` are
    [height, width]; each output size is
    `(in + 2*padding - dilation*(kernel-1) - 1) / stride + 1`. The optional
    `bias` is [O].

    ```mlir
    %y = jit.conv2d %x, %w bias %b stride = [1, 1] padding = [1, 1] dilation = [1, 1]
        : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$input, Jit_FloatTensor:$weight,
                            Optional<Jit_FloatTensor>:$bias), Jit_ConvAttributes);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`bias` $bias^)? `stride` `=` $stride `padding` `=` $padding `dilation` `=` $dilation (`groups` `=` $groups^)? (`layout` `=` $layout^)? attr-dict `:` functional-type(operands, results)";
}

def Jit_BatchNormOp : Jit_Op<"batch_norm", [Pure, AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "batch normalisation in training mode, with running-statistics update";
  let description = [{
    Normalises each index of dimension `axis` (the channel: 1 for NCHW and
    [N, C], 3 for NHWC) over all other dimensions with the batch's mean and
    biased variance, then applies the optional per-channel `weight` and
    `bias`. Yields the output (the input's type), `save_mean` and
    `save_invstd = 1/sqrt(var + eps)` for `jit.batch_norm_grad`, and the new
    running statistics `(1 - momentum) * running + momentum * batch` (the
    running variance takes the unbiased batch variance, as PyTorch).
    Parameters and statistics are [C] in f32 (f64 for f64 input) whatever
    the input's precision, so fp16 activations keep fp32 statistics.

    ```mlir
    %y, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %x weight %g bias %b running_mean %rm
        running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01
        : (tensor<8x16x4x4xf16>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
          -> (tensor<8x16x4x4xf16>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, Optional<Jit_FloatTensor>:$weight,
                       Optional<Jit_FloatTensor>:$bias, Jit_FloatTensor:$running_mean,
                       Jit_FloatTensor:$running_var, I64Attr:$axis,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps,
                       DefaultValuedAttr<F64Attr, "0.1">:$momentum);
  let results = (outs Jit_FloatTensor:$output, Jit_FloatTensor:$save_mean, Jit_FloatTensor:$save_invstd,
                      Jit_FloatTensor:$new_running_mean, Jit_FloatTensor:$new_running_var);
  let assemblyFormat = [{
    $input (`weight` $weight^)? (`bias` $bias^)? `running_mean` $running_mean `running_var` $running_var
    `axis` `=` $axis `eps` `=` $eps `momentum` `=` $momentum attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Jit_BatchNormInferenceOp : Jit_Op<"batch_norm_inference", [Pure, AttrSizedOperandSegments,
                                                               InferTypeOpAdaptor]> {
  let summary = "batch normalisation with the running statistics (evaluation mode)";
  let description = [{
    `(input - running_mean) / sqrt(running_var + eps) * weight + bias` per
    index of dimension `axis`; operand types as `jit.batch_norm`.

    ```mlir
    %y = jit.batch_norm_inference %x weight %g bias %b running_mean %rm running_var %rv
        axis = 1 eps = 1.0e-05
        : (tensor<8x16x4x4xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
          -> tensor<8x16x4x4xf32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input, Optional<Jit_FloatTensor>:$weight,
                       Optional<Jit_FloatTensor>:$bias, Jit_FloatTensor:$running_mean,
                       Jit_FloatTensor:$running_var, I64Attr:$axis,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs Jit_FloatTensor:$output);
  let assemblyFormat = [{
    $input (`weight` $weight^)? (`bias` $bias^)? `running_mean` $running_mean `running_var` $running_var
    `axis` `=` $axis `eps` `=` $eps attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// Window attributes shared by the pooling ops: [height, width] each.
defvar Jit_PoolAttributes = (ins DenseI64ArrayAttr:$kernel_size, DenseI64ArrayAttr:$stride,
                                 DenseI64ArrayAttr:$padding, UnitAttr:$ceil_mode,
                                 DefaultValuedAttr<Jit_ActivationLayout, "::ampjit::ir::ActivationLayout::nchw">:$layout);

def Jit_MaxPool2dOp : Jit_Op<"max_pool2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D max pooling";
  let description = [{
    PyTorch's `max_pool2d` over [height, width] windows of an NCHW (or, with
    `layout = nhwc`, NHWC) input; padding counts as -inf, NaN propagates.
    `ceil_mode` rounds the output size up (the last window still starts
    inside the input or its left padding).

    ```mlir
    %y = jit.max_pool2d %x kernel_size = [3, 3] stride = [2, 2] padding = [1, 1]
        : tensor<8x64x16x16xf32> -> tensor<8x64x8x8xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$input), Jit_PoolAttributes);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `kernel_size` `=` $kernel_size `stride` `=` $stride `padding` `=` $padding (`ceil_mode` $ceil_mode^)? (`layout` `=` $layout^)? attr-dict `:` type($input) `->` type($result)";
}

def Jit_AvgPool2dOp : Jit_Op<"avg_pool2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D average pooling";
  let description = [{
    PyTorch's `avg_pool2d`: zero padding; the divisor is the window clipped
    to the padded input, or with `exclude_padding` (PyTorch's
    `count_include_pad=False`) to the input.

    ```mlir
    %y = jit.avg_pool2d %x kernel_size = [2, 2] stride = [2, 2] padding = [0, 0]
        : tensor<8x64x16x16xf32> -> tensor<8x64x8x8xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$input), Jit_PoolAttributes, (ins UnitAttr:$exclude_padding));
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input `kernel_size` `=` $kernel_size `stride` `=` $stride `padding` `=` $padding (`ceil_mode` $ceil_mode^)? (`layout` `=` $layout^)? (`exclude_padding` $exclude_padding^)? attr-dict `:` type($input) `->` type($result)";
}

def Jit_Conv2dGradInputOp : Jit_Op<"conv2d_grad_input", [Pure]> {
  let summary = "gradient of jit.conv2d with respect to its input";
  let description = [{
    The transposed convolution of `grad_output` with `weight`: the input
    gradient, whose type (the forward input's, which strides make ambiguous)
    is the result type. Attributes are the forward op's.

    ```mlir
    %dx = jit.conv2d_grad_input %dy, %w stride = [2, 2] padding = [1, 1] dilation = [1, 1]
        : (tensor<8x16x16x16xf32>, tensor<16x3x3x3xf32>) -> tensor<8x3x32x32xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$weight), Jit_ConvAttributes);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $weight `stride` `=` $stride `padding` `=` $padding `dilation` `=` $dilation (`groups` `=` $groups^)? (`layout` `=` $layout^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Jit_Conv2dGradWeightOp : Jit_Op<"conv2d_grad_weight", [Pure]> {
  let summary = "gradient of jit.conv2d with respect to its filter";
  let description = [{
    The correlation of the forward `input` with `grad_output`: the filter
    gradient, whose type (the forward filter's) is the result type.
    Attributes are the forward op's. The bias gradient is a `jit.sum`.

    ```mlir
    %dw = jit.conv2d_grad_weight %dy, %x stride = [2, 2] padding = [1, 1] dilation = [1, 1]
        : (tensor<8x16x16x16xf32>, tensor<8x3x32x32xf32>) -> tensor<16x3x3x3xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input), Jit_ConvAttributes);
  let results = (outs Jit_FloatTensor:$grad_weight);
  let assemblyFormat = "$grad_output `,` $input `stride` `=` $stride `padding` `=` $padding `dilation` `=` $dilation (`groups` `=` $groups^)? (`layout` `=` $layout^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Jit_BatchNormGradOp : Jit_Op<"batch_norm_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.batch_norm (training mode)";
  let description = [{
    From the output gradient, the forward input and the `save_mean` and
    `save_invstd` the forward op yielded, the gradients of the input (its
    type), the weight and the bias ([C], statistics type; without `weight`
    the input gradient uses ones).

    ```mlir
    %dx, %dw, %db = jit.batch_norm_grad %dy, %x, %mean, %invstd weight %g axis = 1
        : (tensor<8x16x4x4xf16>, tensor<8x16x4x4xf16>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
          -> (tensor<8x16x4x4xf16>, tensor<16xf32>, tensor<16xf32>)
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input, Jit_FloatTensor:$save_mean,
                       Jit_FloatTensor:$save_invstd, Optional<Jit_FloatTensor>:$weight, I64Attr:$axis);
  let results = (outs Jit_FloatTensor:$grad_input, Jit_FloatTensor:$grad_weight,
                      Jit_FloatTensor:$grad_bias);
  let assemblyFormat = [{
    $grad_output `,` $input `,` $save_mean `,` $save_invstd (`weight` $weight^)? `axis` `=` $axis attr-dict
    `:` functional-type(operands, results)
  }];
}

def Jit_MaxPool2dGradOp : Jit_Op<"max_pool2d_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.max_pool2d";
  let description = [{
    Routes each element of `grad_output` to the maximum of its window of the
    forward `input` (the first in row-major order among equal values; a NaN
    replaces any maximum before it, as PyTorch's CPU kernel); overlapping
    windows accumulate. Attributes are the forward op's.

    ```mlir
    %dx = jit.max_pool2d_grad %dy, %x kernel_size = [3, 3] stride = [2, 2] padding = [1, 1]
        : (tensor<8x64x8x8xf32>, tensor<8x64x16x16xf32>) -> tensor<8x64x16x16xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input), Jit_PoolAttributes);
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $input `kernel_size` `=` $kernel_size `stride` `=` $stride `padding` `=` $padding (`ceil_mode` $ceil_mode^)? (`layout` `=` $layout^)? attr-dict `:` functional-type(operands, results)";
}

def Jit_AvgPool2dGradOp : Jit_Op<"avg_pool2d_grad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of jit.avg_pool2d";
  let description = [{
    Spreads each element of `grad_output`, divided by its window's divisor,
    over the window. `input` (the forward input) gives the result type.

    ```mlir
    %dx = jit.avg_pool2d_grad %dy, %x kernel_size = [2, 2] stride = [2, 2] padding = [0, 0]
        : (tensor<8x64x8x8xf32>, tensor<8x64x16x16xf32>) -> tensor<8x64x16x16xf32>
    ```
  }];
  let arguments = !con((ins Jit_FloatTensor:$grad_output, Jit_FloatTensor:$input), Jit_PoolAttributes,
                       (ins UnitAttr:$exclude_padding));
  let results = (outs Jit_FloatTensor:$grad_input);
  let assemblyFormat = "$grad_output `,` $input `kernel_size` `=` $kernel_size `stride` `=` $stride `padding` `=` $padding (`ceil_mode` $ceil_mode^)? (`layout` `=` $layout^)? (`exclude_padding` $exclude_padding^)? attr-dict `:` functional-type(operands, results)";
}

#endif // AMPJIT_DIALECT_JIT_IR_JITOPS_TD
