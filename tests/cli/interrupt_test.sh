#!/usr/bin/env bash
# SIGINT and SIGTERM during `offsim run --out` (issue 32): at any moment, the --out folder holds
# the previous complete set or the new complete one (never a mix, never a part), and no temporary
# (NAME.tmp.<pid>) is left; without a previous set, the folder holds the new set or nothing.
# Signals land at random moments over the run (start, simulation, writing); TRIES bounds the time.
# Usage: interrupt_test.sh OFFSIM SOURCE_DIR [TRIES]
set -u
offsim=$1
cd "$2" || exit 1
tries=${3:-12}
tmp=$(mktemp -d)
# Only this shell removes it: a signal that reaches the forked child before it runs offsim would
# run an inherited EXIT trap there, and remove the folder under the test.
main_pid=$BASHPID
trap '[ "$BASHPID" = "$main_pid" ] && rm -rf "$tmp"' EXIT
experiment=configs/experiments/gpt3-1.3b-dp8-frontier.yaml
files="summary.json timeline.csv trace.json config.resolved.yaml"
fail=0

sums() {  # the checksums of the set in $1, one line (a missing file reads "-")
  local f out=""
  for f in $files; do
    if [ -f "$1/$f" ]; then out+="$(cksum <"$1/$f" | cut -d' ' -f1) "; else out+="- "; fi
  done
  echo "$out"
}

"$offsim" run "$experiment" --out "$tmp/old" >/dev/null || { echo "FAIL: reference run"; exit 1; }
"$offsim" run "$experiment" --set training.micro_batch=2 --out "$tmp/new" >/dev/null || { echo "FAIL: reference run"; exit 1; }
old=$(sums "$tmp/old")
new=$(sums "$tmp/new")
[ "$old" != "$new" ] || { echo "FAIL: the two reference sets are the same"; exit 1; }
# The run's length in microseconds, to spread the signals over it (and a little past its end).
start=$(date +%s%N)
"$offsim" run "$experiment" --set training.micro_batch=2 --out "$tmp/timing" >/dev/null
span=$(( ($(date +%s%N) - start) / 1000 + 1000 ))

kept_old=0 got_new=0 got_none=0 interrupted=0
for i in $(seq 1 "$tries"); do
  out="$tmp/run$i"
  with_previous=$(( i % 2 ))  # odd tries start from a complete previous set, even ones from none
  [ "$with_previous" = 1 ] && cp -r "$tmp/old" "$out"
  signal=INT
  [ $(( i % 3 )) = 0 ] && signal=TERM
  "$offsim" run "$experiment" --set training.micro_batch=2 --out "$out" >/dev/null 2>&1 &
  pid=$!
  delay=$(( (RANDOM * 32768 + RANDOM) % span ))
  sleep "$(printf '0.%06d' "$delay")"
  kill -"$signal" "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  [ "$rc" -ge 128 ] && interrupted=$(( interrupted + 1 ))
  leftovers=$(find "$tmp" -maxdepth 2 -name '*.tmp.*' | head -3)
  if [ -n "$leftovers" ]; then
    echo "FAIL: try $i (SIG$signal after ${delay} us, exit $rc) left temporaries: $leftovers"
    fail=1
  fi
  now=$(sums "$out")
  if [ "$now" = "$new" ]; then
    got_new=$(( got_new + 1 ))
  elif [ "$with_previous" = 1 ] && [ "$now" = "$old" ]; then
    kept_old=$(( kept_old + 1 ))
  elif [ "$with_previous" = 0 ] && [ ! -e "$out" ]; then
    got_none=$(( got_none + 1 ))
  else
    echo "FAIL: try $i (SIG$signal after ${delay} us, exit $rc): --out holds a partial or mixed set: $now"
    ls -la "$out" 2>&1
    fail=1
  fi
done
echo "interrupt: $tries tries, $interrupted ended by the signal; previous set kept $kept_old, new set $got_new, none $got_none"
exit $fail
