//===- Passes.td - automatic mixed precision passes --------*- tablegen -*-===//
//
// DESIGN.md "AMP semantics" is the spec. The passes run over whole joint
// graphs (forward, backward, scaler, optimizer in one function) and read the
// op categories from a policy (policies/*.yaml), never from a switch.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_TD
#define AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

// The options every pass that decides precisions needs; one definition, so
// amp-pipeline and the single passes cannot drift apart.
defvar AmpPrecisionOptions = [
  Option<"level", "level", "std::string", /*default=*/"\"O1\"",
         "O0 (fp32), O1 (lists), O2 (almost low precision, fp32 master weights), "
         "O3 (pure low precision), auto (MindSpore: allow low, deny fp32, others promote)">,
  Option<"dtype", "dtype", "std::string", /*default=*/"\"f16\"",
         "Low-precision type: f16, bf16, or auto (bf16 where the target has it)">,
  Option<"semantics", "semantics", "std::string", /*default=*/"\"paint\"",
         "paint (whole-graph painting) or autocast (per-op, as PyTorch's autocast)">,
  Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
         "What runs the code: cpu or sm_NN; decides which ops can run in low precision">,
  Option<"policy", "policy", "std::string", /*default=*/"\"default\"",
         "A built-in policy (default, pytorch) or the path of a user policy YAML file">,
];

defvar AmpReportOptions = [
  Option<"report", "report", "std::string", /*default=*/"\"\"",
         "Write the per-op precision decisions as JSON to this file">,
  Option<"reportDot", "report-dot", "std::string", /*default=*/"\"\"",
         "Write the graph as Graphviz DOT, ops colored by compute precision">,
  Option<"remarks", "remarks", "bool", /*default=*/"false",
         "Emit an MLIR remark per op with its compute type and the reason">,
];

def AmpAutoCast : Pass<"amp-auto-cast", "::mlir::ModuleOp"> {
  let summary = "Decide each op's compute precision and insert the casts";
  let description = [{
    Paints every function of the module with low precision (f16 or bf16)
    where the policy and level allow it, the way TensorFlow grappler's
    auto_mixed_precision does: seed allow ops; spread deny forward through
    infer and clear ops; turn infer/clear ops between allow ops into allow;
    spread allow through clear ops; keep allow ops the target cannot run in
    low precision in fp32; then insert one `amp.cast` per (value, type),
    shared by all its consumers. `semantics=autocast` decides per op instead,
    as PyTorch's autocast does (backward ops marked `jit.vjp_of` take the
    precision of the forward op they differentiate).

    Function arguments and results keep their declared types; optimizer and
    scaler ops compute in fp32 at every level and read low-precision
    gradients directly. `amp.disabled` and `amp.force_type` on an op win over
    every list.

    ```
    amp-opt --amp-auto-cast="level=O1 dtype=bf16 target=sm_90" step.mlir
    ```
  }];
  let dependentDialects = ["::ampjit::ir::amp::AmpDialect"];
  let options = !listconcat(AmpPrecisionOptions, AmpReportOptions);
}

def AmpFuseCasts : Pass<"amp-fuse-casts", "::mlir::ModuleOp"> {
  let summary = "Fold, share and move amp.cast ops";
  let description = [{
    Folds cast chains (a widening round trip such as f32 -> f16 -> f32 only
    with `fold-round-trips`, since it changes values); keeps one cast per
    (value, type); moves casts across clear ops (reshape, transpose, ...) when
    that moves fewer bytes; leaves at most one cast per fp32 parameter per step.
  }];
  let dependentDialects = ["::ampjit::ir::amp::AmpDialect"];
  let options = [
    Option<"foldRoundTrips", "fold-round-trips", "bool", /*default=*/"false",
           "Also fold narrowing round trips (f32 -> f16 -> f32 becomes the f32 value; "
           "changes results)">,
    Option<"policy", "policy", "std::string", /*default=*/"\"default\"",
           "The policy whose clear ops casts may move across">,
  ];
}

def AmpMasterWeights : Pass<"amp-master-weights", "::mlir::ModuleOp"> {
  let summary = "O2: hold parameters in low precision, derived from fp32 masters";
  let description = [{
    For every fp32 parameter that the step reads only through casts to the
    low-precision type, adds a low-precision copy as derived state (an
    argument with `jit.derived_from` and a result tied to it), reads the copy
    instead of casting, and makes the optimizer update write the copy from the
    new fp32 master in the same kernel: zero parameter casts per step.
    Batch-norm parameters stay fp32.
  }];
  let dependentDialects = ["::ampjit::ir::amp::AmpDialect"];
}

def AmpVerify : Pass<"amp-verify", "::mlir::ModuleOp"> {
  let summary = "Check the result of AMP rewriting";
  let description = [{
    Fails, naming the op, if an op whose category is deny computes in low
    precision at a level that forbids it (O1, O2), if a scaler or optimizer op
    computes in low precision, or if an `amp.cast` is dead or redundant (an
    identity, a foldable chain, or a second cast of the same value to the same
    type).
  }];
  let options = [
    Option<"level", "level", "std::string", /*default=*/"\"O1\"",
           "The level the module was rewritten at">,
    Option<"policy", "policy", "std::string", /*default=*/"\"default\"",
           "The policy the module was rewritten with">,
  ];
}

def AmpPipeline : Pass<"amp-pipeline", "::mlir::ModuleOp"> {
  let summary = "The whole AMP sequence: auto-cast, master weights, cast fusion, cleanup, verify";
  let description = [{
    Runs, for the chosen level: amp-auto-cast, amp-master-weights (O2, O3;
    `master-weights=on|off` overrides, and asking for it at O0 or O1, where
    parameters are read in fp32, is an error; `keep-parameter-casts` runs it
    at O1 too, where it changes no value, only where the casts happen),
    amp-fuse-casts, canonicalize + cse, amp-verify. The report, when asked
    for, also counts the casts fusion removed.

    ```
    amp-opt --amp-pipeline="level=O2 dtype=f16 target=sm_90 report=amp.json" step.mlir
    ```
  }];
  let dependentDialects = ["::ampjit::ir::amp::AmpDialect"];
  let options = !listconcat(AmpPrecisionOptions, AmpReportOptions, [
    Option<"foldRoundTrips", "fold-round-trips", "bool", /*default=*/"false",
           "Let cast fusion fold narrowing round trips (changes results)">,
    Option<"masterWeights", "master-weights", "std::string", /*default=*/"\"auto\"",
           "Low-precision parameter copies of fp32 masters: auto (on at O2 and O3), on, off">,
    Option<"keepParameterCasts", "keep-parameter-casts", "bool", /*default=*/"false",
           "Keep each parameter's cast from step to step as a low-precision copy that the "
           "optimizer update writes (amp-master-weights' mechanism), bit for bit the casts: "
           "the step casts no parameter. At O1 what O2's master weights do; not at O0">,
  ]);
}

#endif // AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_TD
