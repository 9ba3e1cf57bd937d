#!/usr/bin/env bash
# A 2-rank sweep on localhost gives the same file as one process (issue: "CI runs a 2-rank sweep").
# usage: sweep_mpi_test.sh OFFSIM MPIEXEC SOURCE_DIR
set -euo pipefail
offsim=$1
mpiexec=$2
src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/tiny.yaml" <<YAML
name: tiny
base: $src/tests/data/tiny-dp2.yaml
axes:
  - {key: strategy.zero_stage, range: {from: 0, to: 3, step: 1}}
  - {key: training.micro_batch, values: [1, 2, 3]}
YAML
"$offsim" sweep "$tmp/tiny.yaml" --out "$tmp/one.csv" >/dev/null 2>&1
# Root in containers needs --allow-run-as-root; --oversubscribe lets 2 ranks share fewer cores.
extra=()
[ "$(id -u)" -eq 0 ] && extra+=(--allow-run-as-root)
"$mpiexec" "${extra[@]}" --oversubscribe -np 2 "$offsim" sweep "$tmp/tiny.yaml" --out "$tmp/two.csv" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; exit 1; }
grep -q "on 2 ranks" "$tmp/log" || { echo "FAIL: the sweep did not run on 2 ranks"; cat "$tmp/log"; exit 1; }
cmp "$tmp/one.csv" "$tmp/two.csv" || { echo "FAIL: 2-rank file differs"; diff "$tmp/one.csv" "$tmp/two.csv"; exit 1; }
# offsim search over 2 ranks: the single-process set (search.csv and pareto.csv), byte for byte,
# and the same report (issue 35).
"$offsim" search "$src/tests/data/tiny-dp2.yaml" --micro-batch 1 2 --out "$tmp/search-one" >"$tmp/search-one.txt" 2>/dev/null
"$mpiexec" "${extra[@]}" --oversubscribe -np 2 "$offsim" search "$src/tests/data/tiny-dp2.yaml" --micro-batch 1 2 \
  --out "$tmp/search-two" >"$tmp/search-two.txt" 2>"$tmp/search-two.log" || { cat "$tmp/search-two.log"; exit 1; }
for f in search.csv pareto.csv; do
  cmp "$tmp/search-one/$f" "$tmp/search-two/$f" || { echo "FAIL: 2-rank search's $f differs"; exit 1; }
done
[ ! -e "$tmp/search-two/search.partial.csv" ] || { echo "FAIL: the 2-rank search left its journal"; exit 1; }
diff <(sed "s#$tmp/search-one#OUT#g" "$tmp/search-one.txt") <(sed "s#$tmp/search-two#OUT#g" "$tmp/search-two.txt") ||
  { echo "FAIL: the 2-rank search's report differs"; exit 1; }
# MPI is a module loaded only under a launcher (ADR 0010): offsim itself links none of Open MPI.
if ldd "$offsim" | grep -q 'libmpi'; then echo "FAIL: offsim links MPI at start"; ldd "$offsim"; exit 1; fi
# Under a launcher without its module next to it: a clear error, exit 2, no crash.
cp "$offsim" "$tmp/offsim-alone"
status=0
OMPI_COMM_WORLD_SIZE=2 "$tmp/offsim-alone" sweep "$tmp/tiny.yaml" --out "$tmp/alone.csv" >"$tmp/alone.log" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q "its MPI module .*liboffsim_mpi.so cannot be loaded" "$tmp/alone.log" ||
  { echo "FAIL: without its module, exit $status"; cat "$tmp/alone.log"; exit 1; }
echo "sweep_mpi: 2 ranks gave the single-process file ($(($(wc -l <"$tmp/one.csv") - 1)) rows) and search set ($(($(wc -l <"$tmp/search-one/search.csv") - 1)) points)"
