//===- JitBase.td - the jit dialect, its types and enums -----*- tablegen -*-===//
//
// The `jit` dialect mirrors ampjit's eager tensor API one op per function.
// Ops have value semantics on statically shaped ranked tensors: a trace is
// specialised on shapes (the compile cache guards on them), so every shape in
// the IR is known and verifiers can check it exactly.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_JITBASE_TD
#define AMPJIT_DIALECT_JIT_IR_JITBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Jit_Dialect : Dialect {
  let name = "jit";
  let cppNamespace = "::ampjit::ir";
  let summary = "Tensor ops of ampjit's eager API, and the state model of a traced step";
  let description = [{
    Each op of the `jit` dialect is one function of the eager C++ API
    (`jit::matmul`, `jit::relu`, `jit::cross_entropy`, ...), recorded by
    `jit::trace`. Ops compute on statically shaped tensors of f32, f64, f16,
    bf16, i64 or i1 and never convert element types implicitly: mixed
    precision is made explicit by `amp.cast` ops that the AMP passes insert.

    The dialect also owns the state model of a traced step (DESIGN principle 3):

    * `jit.role = "input" | "param" | "grad" | "opt_state" | "scaler_state" | "hyper"`
      on each entry-function argument says what the argument is;
    * `jit.tied = <argument index>` on a function result says that the result
      is the new value of that state argument (the runtime updates it in place);
    * `jit.returned` (a unit flag) on a function result says that the step
      returns it to its caller: AMP may give it the type it computed it in,
      as eager autocast returns it (a result without the flag keeps its type);
    * `jit.derived_from = <argument index>` marks state a pass derived from
      another argument (O2's low-precision parameter copies);
    * `jit.op_id = <n>` on a recorded forward op and `jit.vjp_of = <n>` on the
      ops its VJP rule emitted link backward ops to the forward op they
      differentiate.

    ```mlir
    func.func @step(%x: tensor<64x784xf32> {jit.role = "input"},
                    %w: tensor<10x784xf32> {jit.role = "param"})
        -> (tensor<f32>, tensor<10x784xf32> {jit.tied = 1 : i64}) {
      ...
    }
    ```
  }];
  let hasConstantMaterializer = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kRoleAttrName = "jit.role";
    static constexpr ::llvm::StringLiteral kTiedAttrName = "jit.tied";
    static constexpr ::llvm::StringLiteral kReturnedAttrName = "jit.returned";
    static constexpr ::llvm::StringLiteral kDerivedFromAttrName = "jit.derived_from";
    static constexpr ::llvm::StringLiteral kOpIdAttrName = "jit.op_id";
    static constexpr ::llvm::StringLiteral kVjpOfAttrName = "jit.vjp_of";
    static constexpr ::llvm::StringLiteral kGradOfLeafAttrName = "jit.grad_of_leaf";
    /// Operand positions holding a C++ number the frontend wrapped (`x * 0.3`):
    /// 0-d floats that take the other operands' type and never decide the op's.
    static constexpr ::llvm::StringLiteral kWrappedOperandsAttrName = "jit.wrapped_operands";
    /// A unit flag on the jit.add that adds a linear layer's bias to its
    /// product (operand 0): PyTorch's linear/addmm is one op under autocast,
    /// so the add runs in the product's type, not the widest of the two.
    static constexpr ::llvm::StringLiteral kLinearBiasAttrName = "jit.linear_bias";
  }];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Jit_FloatElement : AnyTypeOf<[F16, BF16, F32, F64], "f16, bf16, f32 or f64">;
def Jit_Element : AnyTypeOf<[F16, BF16, F32, F64, I64, I1],
                            "f16, bf16, f32, f64, i64 or i1">;

// A static shape of at most kMaxElements (2^48) elements
// (ampjit/runtime/ElementCount.h, included by JitOps.h): what the runtime can
// hold, and what keeps the verifiers' element counts from overflowing int64.
def Jit_HoldableShapePred : CPred<
    "::ampjit::runtime::checkedElementCount(::llvm::cast<::mlir::RankedTensorType>($_self).getShape()) >= 0">;
class Jit_TensorOf<list<Type> allowed>
    : RankedTensorOf<allowed, [HasStaticShapePred, Jit_HoldableShapePred],
                     "statically shaped tensor (at most 2^48 elements)">;

def Jit_Tensor : Jit_TensorOf<[Jit_Element]>;
def Jit_FloatTensor : Jit_TensorOf<[Jit_FloatElement]>;
def Jit_IndexTensor : Jit_TensorOf<[I64]>;
def Jit_BoolTensor : Jit_TensorOf<[I1]>;

// Scalars of the step's state (loss scale, counters, flags) are rank-0 tensors.
def Jit_F32Scalar : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}
def Jit_I64Scalar : 0DTensorOf<[I64]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getI64Type())";
}
def Jit_BoolScalar : 0DTensorOf<[I1]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getI1Type())";
}
def Jit_RngState : TensorRankOf<[I64], [1]>;

//===----------------------------------------------------------------------===//
// Enums (plain integer enums print as bare keywords in op syntax)
//===----------------------------------------------------------------------===//

def Jit_GeluApproximate : I32EnumAttr<"GeluApproximate",
    "how gelu evaluates the Gaussian CDF", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"tanh", 1>
    ]> {
  let cppNamespace = "::ampjit::ir";
}

def Jit_Reduction : I32EnumAttr<"Reduction",
    "how a loss reduces over the batch", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"mean", 1>,
      I32EnumAttrCase<"sum", 2>
    ]> {
  let cppNamespace = "::ampjit::ir";
}

def Jit_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "elementwise comparison", [
      I32EnumAttrCase<"eq", 0>,
      I32EnumAttrCase<"ne", 1>,
      I32EnumAttrCase<"lt", 2>,
      I32EnumAttrCase<"le", 3>,
      I32EnumAttrCase<"gt", 4>,
      I32EnumAttrCase<"ge", 5>
    ]> {
  let cppNamespace = "::ampjit::ir";
}

def Jit_ActivationLayout : I32EnumAttr<"ActivationLayout",
    "dimension order of a convolution's or pooling's activations (and filter)", [
      I32EnumAttrCase<"nchw", 0>,
      I32EnumAttrCase<"nhwc", 1>
    ]> {
  let cppNamespace = "::ampjit::ir";
}

//===----------------------------------------------------------------------===//
// Base op classes
//===----------------------------------------------------------------------===//

class Jit_Op<string mnemonic, list<Trait> traits = []>
    : Op<Jit_Dialect, mnemonic, traits>;

#endif // AMPJIT_DIALECT_JIT_IR_JITBASE_TD
