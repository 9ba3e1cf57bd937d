#!/usr/bin/env bash
# SIGINT and SIGTERM during `offsim search --out` (issue 32): the folder holds the search's
# complete set (search.csv and pareto.csv) or none of it, never one without the other, and no
# temporary (NAME.tmp.<pid>); the rows finished before the signal stay in the journal
# (search.partial.csv), and --resume then gives the uninterrupted search's set byte for byte.
# Usage: search_interrupt_test.sh OFFSIM SOURCE_DIR [TRIES]
set -u
offsim=$1
cd "$2" || exit 1
tries=${3:-10}
tmp=$(mktemp -d)
main_pid=$BASHPID
trap '[ "$BASHPID" = "$main_pid" ] && rm -rf "$tmp"' EXIT
search=(search tests/data/tiny-dp2.yaml --micro-batch 1 2)
"$offsim" "${search[@]}" --out "$tmp/ref" >/dev/null 2>&1 || { echo "FAIL: reference search"; exit 1; }
start=$(date +%s%N)
"$offsim" "${search[@]}" --out "$tmp/timing" >/dev/null 2>&1
span=$(( ($(date +%s%N) - start) / 1000 + 1000 ))
fail=0 interrupted=0 complete=0 none=0
for i in $(seq 1 "$tries"); do
  out="$tmp/s$i"
  signal=INT
  [ $(( i % 3 )) = 0 ] && signal=TERM
  "$offsim" "${search[@]}" --out "$out" >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '0.%06d' $(( (RANDOM * 32768 + RANDOM) % span )))"
  kill -"$signal" "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  [ "$rc" -ge 128 ] && interrupted=$(( interrupted + 1 ))
  leftovers=$(find "$tmp" -maxdepth 2 -name '*.tmp.*' | head -3)
  [ -z "$leftovers" ] || { echo "FAIL: try $i (SIG$signal, exit $rc) left temporaries: $leftovers"; fail=1; }
  if [ -f "$out/search.csv" ] || [ -f "$out/pareto.csv" ]; then
    if cmp -s "$out/search.csv" "$tmp/ref/search.csv" && cmp -s "$out/pareto.csv" "$tmp/ref/pareto.csv"; then
      complete=$(( complete + 1 ))
    else
      echo "FAIL: try $i (SIG$signal, exit $rc) left a partial set: $(ls "$out")"; fail=1
    fi
  else
    none=$(( none + 1 ))
  fi
  "$offsim" "${search[@]}" --out "$out" --resume >/dev/null 2>&1 || { echo "FAIL: try $i: --resume failed"; fail=1; }
  for f in search.csv pareto.csv; do
    cmp -s "$out/$f" "$tmp/ref/$f" || { echo "FAIL: try $i: --resume gave another $f"; fail=1; }
  done
  [ ! -e "$out/search.partial.csv" ] || { echo "FAIL: try $i: the journal is left after --resume"; fail=1; }
done
echo "search_interrupt: $tries tries, $interrupted ended by the signal: $complete complete sets, $none without a set"
exit $fail
