#!/usr/bin/env bash
# check_layout.py on small trees with known breaches: each must be found, and a clean tree passes.
# Usage: check_layout_test.sh PYTHON SOURCE_DIR
set -u
python=$1
check=$2/tests/architecture/check_layout.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
expect() {  # expect NAME EXPECTED_EXIT TEXT_IN_OUTPUT TREE
  "$python" "$check" "$4" >"$tmp/out.txt" 2>&1
  local code=$?
  if [ "$code" -eq "$2" ] && grep -qF -- "$3" "$tmp/out.txt"; then
    passed=$((passed + 1))
  else
    echo "FAIL: $1: exit $code (expected $2), output:"
    cat "$tmp/out.txt"
    failed=$((failed + 1))
  fi
}
# A function body of n lines (signature and both braces included) in FILE.
function_of() {  # function_of FILE NAME LINES
  {
    echo "int $2(int a, const std::string& s) {"
    for ((k = 0; k < $3 - 3; ++k)); do echo "  a += 1;  // { a brace in a comment"; done
    echo "  return a;"
    echo "}"
  } >>"$1"
}

clean=$tmp/clean
mkdir -p "$clean/models/a" "$clean/models/b" "$clean/sim" "$clean/topologies"
echo '#include "sim/x.hpp"' >"$clean/topologies/t.cpp"
echo '#include "models/b/y.hpp"' >"$clean/models/a/x.cpp"
{
  echo 'namespace n {'
  echo 'struct S {'
  echo '  S(int v) : v_(v) { const char* s = "}"; (void)s; }'
  echo '  int v_;'
  echo '};'
  echo 'const auto table = std::map<int, int>{{1, 2}, {3, 4}};'
  echo '}  // namespace n'
} >"$clean/models/a/x.cpp"
function_of "$clean/models/a/x.cpp" at_the_limit 100
expect "a clean tree passes" 0 "layout holds" "$clean"

long=$tmp/long
cp -r "$clean" "$long"
function_of "$long/models/b/y.cpp" too_long 101
expect "a 101-line function is found" 1 "models/b/y.cpp:1: too_long is 101 lines" "$long"

cycle=$tmp/cycle
cp -r "$clean" "$cycle"
echo '#include "models/a/x.hpp"' >"$cycle/models/b/y.cpp"
echo '#include "models/b/y.hpp"' >>"$cycle/models/a/x.cpp"
expect "an include cycle between folders is found" 1 "include cycle between models/a/ and models/b/" "$cycle"

layer=$tmp/layer
cp -r "$clean" "$layer"
echo '#include "models/a/x.hpp"' >"$layer/sim/engine.cpp"
expect "sim/ including models/ is found" 1 "sim/engine.cpp: includes models/a/x.hpp (an upper layer)" "$layer"

echo "check_layout: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
