// A path that does not exist is named in the error.

// RUN: rm -f %t.missing
// RUN: not amp-opt %t.missing 2>&1 | FileCheck %s
// CHECK: cannot open input file '{{.*}}missing-file.mlir.tmp.missing': No such file or directory
