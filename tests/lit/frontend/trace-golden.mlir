// jit::trace's dump of the MNIST classifier's step (ampjit-train, one step on
// synthetic digits) is the golden joint graph: after the AMP pipeline it
// matches tests/lit/examples/mnist-amp-golden.mlir line by line at O1 (f16
// and bf16), O2 and O3, the same checks the hand-written step passes. It is
// traced at O1 f16, whose policy gives the step its dynamic loss scaler (the
// dump is the graph before any AMP pass).
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: env AMPJIT_DUMP=%t ampjit-train --data synthetic --epochs 1 --max-steps 1 --amp O1 --dtype f16 --json --no-progress > %t/log.json
// RUN: amp-opt %t/train_step.v1.0-traced.mlir --amp-pipeline="level=O1 dtype=f16" | FileCheck %S/../examples/mnist-amp-golden.mlir --check-prefix=O1
// RUN: amp-opt %t/train_step.v1.0-traced.mlir --amp-pipeline="level=O1 dtype=bf16" | FileCheck %S/../examples/mnist-amp-golden.mlir --check-prefix=BF16
// RUN: amp-opt %t/train_step.v1.0-traced.mlir --amp-pipeline="level=O2 dtype=f16" | FileCheck %S/../examples/mnist-amp-golden.mlir --check-prefix=O2
// RUN: amp-opt %t/train_step.v1.0-traced.mlir --amp-pipeline="level=O3 dtype=f16" | FileCheck %S/../examples/mnist-amp-golden.mlir --check-prefix=O3
//
// The dump keeps the user's source lines: the forward at the Module call,
// the backward at backward(), the update at the scaler's step.
// RUN: FileCheck %s --input-file=%t/train_step.v1.0-traced.mlir
// CHECK: jit.matmul {{.*}}loc("{{.*}}ampjit-train.cpp":[[FORWARD:[0-9]+]]:
// CHECK: jit.cross_entropy_grad {{.*}}loc("{{.*}}ampjit-train.cpp":[[BACKWARD:[0-9]+]]:
// CHECK: jit.sgd_update {{.*}}loc("{{.*}}ampjit-train.cpp":[[STEP:[0-9]+]]:
//
// Every stage is written: the IR after the pipeline and the plan.
// RUN: FileCheck %s --check-prefix=STAGES --input-file=%t/train_step.v1.1-passes.mlir
// STAGES: IR Dump After AmpPipeline
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/train_step.v1.3-plan.txt
// PLAN: plan @train_step
