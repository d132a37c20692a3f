// Input that is not MLIR at all: binary garbage (with NUL bytes, invalid
// UTF-8), a text file with trailing garbage, and files that start with the
// MLIR bytecode magic "ML\xefR" but are not valid bytecode. Each is a located
// error and a non-zero exit, never a crash.

// RUN: printf '\211PNG\r\n\032\n\000\377\376garbage{{{' > %t.png
// RUN: not amp-opt %t.png 2>&1 | FileCheck %s --check-prefix=BINARY
// BINARY: random-bytes.mlir.tmp.png:1:1: error: unexpected character

// RUN: printf 'func.func @f() {\n  return\n}\n\000\377\376' > %t.tail
// RUN: not amp-opt %t.tail 2>&1 | FileCheck %s --check-prefix=TAIL
// TAIL: random-bytes.mlir.tmp.tail:4:2: error: unexpected character

// RUN: printf 'ML\357R' > %t.magic
// RUN: not amp-opt %t.magic 2>&1 | FileCheck %s --check-prefix=MAGIC
// MAGIC: random-bytes.mlir.tmp.magic:0:0: error: attempting to parse a byte at the end of the bytecode

// RUN: printf 'ML\357R\006\377\377\377\377\377\377\377\377\377\001' > %t.version
// RUN: not amp-opt %t.version 2>&1 | FileCheck %s --check-prefix=VERSION
// VERSION: random-bytes.mlir.tmp.version:0:0: error: bytecode version {{[0-9]+}} is newer than the current version
