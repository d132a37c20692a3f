#!/usr/bin/env bash
# Every AMPJIT_* environment variable that the code or the scripts read has a
# row in docs/environment.md, and every row there names one that something
# reads: the table users look things up in cannot fall behind the code.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
doc="$root/docs/environment.md"

# The C++ reads them through getenv, environmentFlag, environmentInteger,
# Nvrtc.cpp's environment, and ObservedRun::fromEnvironment (two names).
from_code=$(grep -rhoE '(getenv|environmentFlag|environmentInteger|environment|fromEnvironment)\("AMPJIT_[A-Z0-9_]+"(, "AMPJIT_[A-Z0-9_]+")?' \
  "$root/runtime" "$root/frontend" "$root/codegen" "$root/tools" "$root/mlir" --include='*.cpp' --include='*.h' |
  grep -oE 'AMPJIT_[A-Z0-9_]+' || true)
# The scripts read them as ${AMPJIT_NAME:-default}.
from_scripts=$(grep -hoE '\$\{AMPJIT_[A-Z0-9_]+' "$root"/scripts/*.sh "$root/.ci/run" | grep -oE 'AMPJIT_[A-Z0-9_]+' || true)
read=$(printf '%s\n' $from_code $from_scripts | sort -u)
documented=$(grep -oE '^\| `AMPJIT_[A-Z0-9_]+`' "$doc" | grep -oE 'AMPJIT_[A-Z0-9_]+' | sort -u)

[ "$(printf '%s\n' "$read" | grep -c .)" -ge 10 ] || { echo "found only: $read (is the search broken?)"; exit 1; }
status=0
missing=$(comm -23 <(printf '%s\n' "$read") <(printf '%s\n' "$documented"))
stale=$(comm -13 <(printf '%s\n' "$read") <(printf '%s\n' "$documented"))
if [ -n "$missing" ]; then
  echo "read by the code or scripts but without a row in docs/environment.md:"
  printf '  %s\n' $missing
  status=1
fi
if [ -n "$stale" ]; then
  echo "rows in docs/environment.md that nothing reads:"
  printf '  %s\n' $stale
  status=1
fi
[ $status -ne 0 ] || echo "docs/environment.md lists the $(printf '%s\n' "$read" | grep -c .) AMPJIT_* variables read"
exit $status
