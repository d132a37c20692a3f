//===- AmpOps.td - the amp dialect: casts and loss scaling ---*- tablegen -*-===//
//
// The ops automatic mixed precision adds to a traced step: the casts the
// auto-cast pass inserts, and the dynamic loss scaler, which lives inside the
// compiled step so that no step needs a host synchronisation.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_IR_AMPOPS_TD
#define AMPJIT_DIALECT_AMP_IR_AMPOPS_TD

include "ampjit/Dialect/Jit/IR/JitBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Amp_Dialect : Dialect {
  let name = "amp";
  let cppNamespace = "::ampjit::ir::amp";
  let summary = "Mixed-precision casts and the in-graph dynamic loss scaler";
  let description = [{
    `amp.cast` is the cast that AMP passes insert, share, move and fold (a
    user's own conversion is `jit.convert`). The scaler ops implement PyTorch's
    GradScaler and Paddle's variant inside the step:

    ```mlir
    %scaled = amp.scale_loss %loss, %scale : tensor<f32>
    // ... backward from %scaled ...
    %ok = amp.all_finite %gw, %gb : tensor<512x784xf16>, tensor<512xf16>
    // ... optimizer updates predicated on %ok, reading inv_scale = 1 / %scale ...
    %s, %good, %bad, %skipped = amp.update_scale %scale, %good0, %bad0, %skipped0, %ok
    ```
  }];
  let dependentDialects = ["::ampjit::ir::JitDialect"];
  // Constants folded from amp ops are built as jit.constant.
  let hasConstantMaterializer = 1;
  // Scoped AMP regions of the user's code are recorded on the ops they
  // contain: `amp.disabled` (AMP off) and `amp.force_type = f16|bf16|f32`
  // (forced compute precision). They win over every policy list.
  // `amp.outside_autocast` marks an op that eager code runs with autocast
  // off though no region says so (an autograd::function's backward):
  // `semantics=autocast` runs it in its operands' types, painting ignores it.
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kDisabledAttrName = "amp.disabled";
    static constexpr ::llvm::StringLiteral kForceTypeAttrName = "amp.force_type";
    static constexpr ::llvm::StringLiteral kOutsideAutocastAttrName = "amp.outside_autocast";
  }];
}

class Amp_Op<string mnemonic, list<Trait> traits = []>
    : Op<Amp_Dialect, mnemonic, traits>;

def Amp_CastOp : Amp_Op<"cast", [Pure]> {
  let summary = "precision cast inserted by AMP";
  let description = [{
    Converts a floating-point tensor to another floating-point element type of
    the same shape, rounding to nearest even. A cast to the same type, and a
    widening cast straight back to its source type, fold away (both exact).

    ```mlir
    %h = amp.cast %w : tensor<512x784xf32> to tensor<512x784xf16>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$input);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Amp_ScaleLossOp : Amp_Op<"scale_loss", [Pure, AllTypesMatch<["loss", "result"]>]> {
  let summary = "multiply the loss by the loss scale";
  let description = [{
    `loss * scale`, computed in fp32 and rounded to the loss's type; backward
    starts from the result (`scaler.scale(loss)`).

    ```mlir
    %scaled = amp.scale_loss %loss, %scale : tensor<f32>
    ```
  }];
  let arguments = (ins Jit_FloatTensor:$loss, Jit_F32Scalar:$scale);
  let results = (outs Jit_FloatTensor:$result);
  let assemblyFormat = "$loss `,` $scale attr-dict `:` type($loss)";
  let hasVerifier = 1;
  // 1 * scale is the scale exactly: backward's seed through this op's VJP.
  let hasFolder = 1;
}

def Amp_AllFiniteOp : Amp_Op<"all_finite", [Pure]> {
  let summary = "true when no gradient holds an inf or a NaN";
  let description = [{
    One pass over the gradients in their own (usually low) precision: the
    predicate of the step's optimizer updates and the input of
    `amp.update_scale`.

    ```mlir
    %ok = amp.all_finite %gw, %gb : tensor<512x784xf16>, tensor<512xf16>
    ```
  }];
  let arguments = (ins Variadic<Jit_FloatTensor>:$grads);
  let results = (outs Jit_BoolScalar:$result);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
}

def Amp_UnscaleAndCheckOp : Amp_Op<"unscale_and_check", [Pure, InferTypeOpAdaptor]> {
  let summary = "unscale gradients and check them for infs and NaNs";
  let description = [{
    For `scaler.unscale_(optimizer)` before gradient clipping: yields each
    gradient multiplied by `inv_scale` (computed in fp32, rounded to the
    gradient's type) and whether all of them are finite. Steps that do not
    unscale explicitly use `amp.all_finite` and let the optimizer apply
    `inv_scale` as it reads the gradients.

    ```mlir
    %gw1, %gb1, %ok = amp.unscale_and_check %inv, %gw, %gb
        : (tensor<f32>, tensor<512x784xf16>, tensor<512xf16>)
          -> (tensor<512x784xf16>, tensor<512xf16>, tensor<i1>)
    ```
  }];
  let arguments = (ins Jit_F32Scalar:$inv_scale, Variadic<Jit_FloatTensor>:$grads);
  let results = (outs Variadic<Jit_FloatTensor>:$unscaled_grads, Jit_BoolScalar:$all_finite);
  let assemblyFormat = "$inv_scale `,` $grads attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Amp_UpdateScaleOp : Amp_Op<"update_scale", [Pure]> {
  let summary = "dynamic loss-scale update (PyTorch GradScaler or Paddle)";
  let description = [{
    Updates the scaler state from the step's all-finite flag:

    * finite step: `bad_steps = 0`, `good_steps += 1`; when `good_steps`
      reaches `growth_interval` it resets to 0 and the scale becomes
      `min(scale * growth_factor, max_scale)` unless that is not finite (the
      scale never grows to inf);
    * overflowing step: `good_steps = 0`, `bad_steps += 1`, `skipped_steps += 1`;
      when `bad_steps` reaches `backoff_interval` it resets to 0 and the scale
      becomes `max(scale * backoff_factor, min_scale)`.

    PyTorch's GradScaler is the defaults (`growth_factor = 2`,
    `backoff_factor = 0.5`, `growth_interval = 2000`, `backoff_interval = 1`,
    `min_scale = 0`, `max_scale = inf`). Paddle's GradScaler maps
    `incr_ratio`, `decr_ratio`, `incr_every_n_steps` and
    `decr_every_n_nan_or_inf` to the first four and keeps the scale at least 1
    (`min_scale = 1`); apex's `min_loss_scale` and `max_loss_scale` are
    `min_scale` and `max_scale`.

    ```mlir
    %s1, %g1, %b1, %k1 = amp.update_scale %s, %g, %b, %k, %ok {growth_interval = 1000 : i64}
    ```
  }];
  let arguments = (ins Jit_F32Scalar:$scale, Jit_I64Scalar:$good_steps,
                       Jit_I64Scalar:$bad_steps, Jit_I64Scalar:$skipped_steps,
                       Jit_BoolScalar:$all_finite,
                       DefaultValuedAttr<F64Attr, "2.0">:$growth_factor,
                       DefaultValuedAttr<F64Attr, "0.5">:$backoff_factor,
                       DefaultValuedAttr<I64Attr, "2000">:$growth_interval,
                       DefaultValuedAttr<I64Attr, "1">:$backoff_interval,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_scale,
                       DefaultValuedAttr<F64Attr, "std::numeric_limits<double>::infinity()">:$max_scale);
  let results = (outs Jit_F32Scalar:$new_scale, Jit_I64Scalar:$new_good_steps,
                      Jit_I64Scalar:$new_bad_steps, Jit_I64Scalar:$new_skipped_steps);
  let assemblyFormat = [{
    $scale `,` $good_steps `,` $bad_steps `,` $skipped_steps `,` $all_finite attr-dict
  }];
  let hasVerifier = 1;
}

#endif // AMPJIT_DIALECT_AMP_IR_AMPOPS_TD
