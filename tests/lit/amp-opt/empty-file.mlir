// An empty file is a valid, empty module.

// RUN: printf '' > %t.empty
// RUN: amp-opt %t.empty | FileCheck %s
// RUN: amp-opt %t.empty -canonicalize | FileCheck %s
// CHECK:      module {
// CHECK-NEXT: }
