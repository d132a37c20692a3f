// Bad options and bad policy files: a diagnostic at the file and line that is
// wrong, a non-zero exit, no crash.
// RUN: not amp-opt %s --amp-auto-cast="policy=%S/Inputs/unknown-op.yaml" 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OP
// RUN: not amp-opt %s --amp-auto-cast="policy=%S/Inputs/unknown-category.yaml" 2>&1 | FileCheck %s --check-prefix=UNKNOWN-CATEGORY
// RUN: not amp-opt %s --amp-auto-cast="policy=%S/Inputs/listed-twice.yaml" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not amp-opt %s --amp-auto-cast="policy=%S/Inputs/malformed.yaml" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not amp-opt %s --amp-auto-cast="policy=%S/Inputs/does-not-exist.yaml" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not amp-opt %s --amp-auto-cast="policy=bogus" 2>&1 | FileCheck %s --check-prefix=BAD-POLICY
// RUN: not amp-opt %s --amp-auto-cast="level=O4" 2>&1 | FileCheck %s --check-prefix=BAD-LEVEL
// RUN: not amp-opt %s --amp-auto-cast="dtype=f8" 2>&1 | FileCheck %s --check-prefix=BAD-DTYPE
// RUN: not amp-opt %s --amp-auto-cast="target=gpu" 2>&1 | FileCheck %s --check-prefix=BAD-TARGET
// RUN: not amp-opt %s --amp-auto-cast="semantics=eager" 2>&1 | FileCheck %s --check-prefix=BAD-SEMANTICS
// RUN: not amp-opt %s --amp-pipeline="policy=%S/Inputs/unknown-op.yaml" 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OP
// RUN: not amp-opt %s --amp-pipeline="level=O1 master-weights=on" 2>&1 | FileCheck %s --check-prefix=NONSENSE

// UNKNOWN-OP: unknown-op.yaml:3:22: error: unknown op 'jit.frobnicate'
// UNKNOWN-CATEGORY: unknown-category.yaml:3:24: error: unknown category 'maybe' (valid: allow, deny, infer, clear, promote)
// TWICE: listed-twice.yaml:5:9: error: op 'jit.softmax' is listed twice: in 'allow: add' (line 3) and in 'deny: add' (line 5)
// MALFORMED: malformed.yaml:4:5: error: malformed YAML
// MISSING: error: cannot open policy file '{{.*}}does-not-exist.yaml': No such file or directory
// BAD-POLICY: error: unknown policy 'bogus': expected a built-in (default, pytorch) or the path of a .yaml file
// BAD-LEVEL: error: unknown AMP level 'O4': expected O0, O1, O2, O3 or auto
// BAD-DTYPE: error: unknown low-precision dtype 'f8': expected f16, bf16 or auto
// BAD-TARGET: error: unknown target 'gpu': expected cpu or sm_NN
// BAD-SEMANTICS: error: unknown AMP semantics 'eager': expected paint or autocast
// NONSENSE: error: master-weights=on needs level O2 or O3: at O1 parameters are read in fp32

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}
