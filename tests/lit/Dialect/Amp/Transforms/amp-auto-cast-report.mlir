// The explanations: JSON report, DOT graph, remarks, and a user policy.
// RUN: amp-opt %s --amp-auto-cast="report=%t.json report-dot=%t.dot" -o /dev/null
// RUN: FileCheck %s --check-prefix=JSON < %t.json
// RUN: FileCheck %s --check-prefix=DOT < %t.dot
// RUN: amp-opt %s --amp-auto-cast="policy=%S/Inputs/allow-softmax.yaml report=%t.user.json" | FileCheck %s --check-prefix=USER
// RUN: FileCheck %s --check-prefix=USER-JSON < %t.user.json
// RUN: not amp-opt %s --amp-auto-cast="report=%t.missing/dir/report.json" 2>&1 | FileCheck %s --check-prefix=UNWRITABLE

func.func @step(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> loc("fc1.weight"), %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = jit.add %m, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %a : tensor<4x8xf32>
  %m2 = jit.matmul %r, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = jit.softmax %m2 axis = 1 : tensor<4x8xf32>
  %g = jit.gelu %s approximate = tanh : tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}

// JSON: "ops": [
// JSON: "category": "allow",
// JSON-NEXT: "compute_type": "f16",
// JSON-NEXT: "detail": "allow in policy 'default'",
// JSON-NEXT: "location": "{{.*}}amp-auto-cast-report.mlir:10:8",
// JSON-NEXT: "op": "jit.matmul",
// JSON-NEXT: "policy_entry": "policies/default.yaml:{{[0-9]+}}:{{[0-9]+}}",
// JSON-NEXT: "reason": "list"
// JSON: "category": "infer",
// JSON-NEXT: "compute_type": "f16",
// JSON: "inferred_from": "'jit.matmul' at {{.*}}amp-auto-cast-report.mlir:13:9",
// JSON: "op": "jit.add",
// JSON: "reason": "inferred"
// JSON: "category": "deny",
// JSON-NEXT: "compute_type": "f32",
// JSON: "op": "jit.softmax",
// JSON: "options": {
// JSON-NEXT: "dtype": "f16",
// JSON-NEXT: "level": "O1",
// JSON-NEXT: "policy": "default",
// JSON-NEXT: "policy_hash": "{{[0-9a-f]+}}",
// JSON-NEXT: "semantics": "paint",
// JSON-NEXT: "target": "cpu"
// JSON: "summary": {
// JSON-NEXT: "casts_inserted": 4,
// JSON-NEXT: "casts_removed": 0,
// JSON-NEXT: "master_weight_copies": 0,
// JSON-NEXT: "ops_per_compute_type": {
// JSON-NEXT: "f16": 4,
// JSON-NEXT: "f32": 2

// DOT: digraph amp {
// An argument named by its location shows the name under its number.
// DOT-DAG: f0_arg0 [shape=ellipse, label="%arg0", fillcolor="#8ecae6"];
// DOT-DAG: f0_arg1 [shape=ellipse, label="%arg1\nfc1.weight", fillcolor="#8ecae6"];
// DOT-DAG: [[MM:f0_op[0-9]+]] [label="jit.matmul\nf16", fillcolor="#f4a261"];
// DOT-DAG: [[SM:f0_op[0-9]+]] [label="jit.softmax\nf32", fillcolor="#8ecae6"];
// DOT-DAG: [label="amp.cast\nf32", fillcolor="#d9d9d9"];

// A user policy moves softmax to allow and gelu to deny: the whole chain is
// f16 but gelu, and the report names the user's file.
// USER: jit.softmax {{.*}} : tensor<4x8xf16>
// USER-NEXT: amp.cast {{.*}} : tensor<4x8xf16> to tensor<4x8xf32>
// USER-NEXT: jit.gelu {{.*}} : tensor<4x8xf32>
// USER-JSON: "detail": "deny in policy '{{.*}}allow-softmax.yaml
// USER-JSON: "policy_entry": "{{.*}}allow-softmax.yaml:6:9"

// UNWRITABLE: error: cannot write the AMP report to '{{.*}}report.json'
