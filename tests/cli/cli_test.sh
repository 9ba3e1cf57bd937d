#!/usr/bin/env bash
# CLI behaviour a user relies on: exit codes (0 ok, 2 bad input), outputs, determinism.
# Usage: cli_test.sh OFFSIM_BINARY SOURCE_DIR
set -u
offsim=$1
cd "$2" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {  # check NAME EXPECTED_CODE ACTUAL_CODE
  if [ "$2" -eq "$3" ]; then passed=$((passed + 1)); else echo "FAIL: $1: exit $3, expected $2"; failed=$((failed + 1)); fi
}
contains() {  # contains NAME FILE TEXT
  if grep -qF -- "$3" "$2"; then passed=$((passed + 1)); else echo "FAIL: $1: '$3' not in output:"; cat "$2"; failed=$((failed + 1)); fi
}

demo=configs/experiments/gpt3-1.3b-dp8-frontier.yaml
"$offsim" run "$demo" --out "$tmp/a" >"$tmp/out.txt" 2>&1; check "run demo" 0 $?
contains "report has iteration time" "$tmp/out.txt" "iteration time"
contains "report names the bottleneck" "$tmp/out.txt" "bottleneck:"
for key in '"feasible"' '"iteration_time_s"' '"tflops_per_device"' '"forward_s"' '"backward_s"' '"optimizer_s"' '"peak_bytes"' '"capacity_bytes"' '"config"'; do
  contains "summary.json has $key" "$tmp/a/summary.json" "$key"
done
contains "timeline.csv has memory and link columns" "$tmp/a/timeline.csv" "time_s,gcd0.hbm_used_bytes"
contains "trace.json is a Chrome trace" "$tmp/a/trace.json" '"traceEvents": ['
"$offsim" run "$demo" --out "$tmp/b" >/dev/null 2>&1; check "run demo again" 0 $?
cmp -s "$tmp/a/trace.json" "$tmp/b/trace.json"; check "trace.json is byte-identical across runs" 0 $?
cmp -s "$tmp/a/timeline.csv" "$tmp/b/timeline.csv"; check "timeline.csv is byte-identical across runs" 0 $?
cmp -s "$tmp/a/summary.json" "$tmp/b/summary.json"; check "summary.json is byte-identical across runs" 0 $?
ls "$tmp/a" | grep -q tmp; check "no temporary file left behind" 1 $?
# The heap on small pages (no range advised for transparent huge pages, ADR 0009): the same outputs.
OFFSIM_HUGE_PAGES=0 "$offsim" run "$demo" --out "$tmp/small-pages" >/dev/null 2>&1; check "run on small pages" 0 $?
for f in trace.json timeline.csv summary.json; do
  cmp -s "$tmp/a/$f" "$tmp/small-pages/$f"; check "$f is byte-identical on small pages" 0 $?
done

# The compact trace (README, run --out): asked for, or chosen above --trace-limit; --trace full and
# the default give the same files for a run under the limit.
"$offsim" run "$demo" --out "$tmp/full" --trace full >/dev/null 2>&1; check "run --trace full" 0 $?
for f in trace.json timeline.csv summary.json; do
  cmp -s "$tmp/a/$f" "$tmp/full/$f"; check "$f of --trace full is the default's under the limit" 0 $?
done
"$offsim" run "$demo" --out "$tmp/compact" --trace-limit 1000 >"$tmp/compact.txt" 2>&1; check "run over --trace-limit" 0 $?
contains "the report says the trace is compact" "$tmp/compact.txt" "more than --trace-limit 1000: compact trace:"
contains "summary.json names the compact trace" "$tmp/compact/summary.json" '"kind": "compact"'
contains "trace.json says it is compact" "$tmp/compact/trace.json" '"otherData": {"trace": "compact"'
"$offsim" run "$demo" --trace compact >/dev/null 2>&1; check "--trace needs --out" 2 $?

"$offsim" run "$demo" --set training.micro_batch=64 --out "$tmp/c" >"$tmp/c.txt" 2>&1; check "infeasible is a result" 0 $?
contains "infeasible summary" "$tmp/c/summary.json" '"feasible": false'
"$offsim" run "$tmp/a/config.resolved.yaml" --out "$tmp/resolved" >/dev/null 2>&1; check "config.resolved.yaml runs by itself" 0 $?
[ "$(grep '"iteration_time_s"' "$tmp/a/summary.json")" = "$(grep '"iteration_time_s"' "$tmp/resolved/summary.json")" ]
check "config.resolved.yaml gives the same iteration" 0 $?
"$offsim" diff "$tmp/a" "$tmp/c/summary.json" >"$tmp/diff.txt" 2>&1; check "diff two runs" 0 $?
contains "diff names the changed setting" "$tmp/diff.txt" "training.micro_batch  4  64"
contains "diff shows the change of a figure" "$tmp/diff.txt" "iteration_time_s"
"$offsim" diff "$tmp/a" "$tmp/nothing" >"$tmp/diff2.txt" 2>&1; check "diff of a missing run exits 2" 2 $?

"$offsim" run tests/config_errors/bad-values.yaml >"$tmp/bad.txt" 2>&1; check "bad input exits 2" 2 $?
contains "bad input is located" "$tmp/bad.txt" "tests/config_errors/bad-values.yaml:10:15: strategy.zero_stage:"
"$offsim" run no/such/file.yaml >"$tmp/nofile.txt" 2>&1; check "missing file exits 2" 2 $?
contains "missing file is named" "$tmp/nofile.txt" "no/such/file.yaml: cannot open the file"
"$offsim" run "$demo" --set training.micro_bach=2 >"$tmp/set.txt" 2>&1; check "unknown --set exits 2" 2 $?
contains "unknown --set suggests" "$tmp/set.txt" "did you mean 'training.micro_batch'?"
"$offsim" frobnicate >/dev/null 2>&1; check "unknown subcommand exits 2" 2 $?

"$offsim" graph tests/data/tiny-dp2.yaml --dot >"$tmp/g.dot" 2>&1; check "graph --dot" 0 $?
contains "graph is DOT" "$tmp/g.dot" "digraph tasks {"
"$offsim" --help >"$tmp/help.txt" 2>&1; check "--help" 0 $?
contains "help lists run" "$tmp/help.txt" "run"
"$offsim" list >"$tmp/list.txt" 2>&1; check "list" 0 $?
contains "list names data_parallel" "$tmp/list.txt" "data_parallel"
"$offsim" list machines >"$tmp/list-m.txt" 2>&1; check "list machines" 0 $?
contains "list machines names the tables a machine implies" "$tmp/list-m.txt" "device table: configs/calibration/h100-sxm.yaml"
"$offsim" list devices >"$tmp/list-d.txt" 2>&1; check "list devices" 0 $?
contains "list devices pairs kinds and tables" "$tmp/list-d.txt" "mi250x-gcd   machines: frontier, frontier-node"
"$offsim" list calibrations >"$tmp/list-c.txt" 2>&1; check "list calibrations" 0 $?
contains "list calibrations" "$tmp/list-c.txt" "dgx-h100-nccl.yaml               collectives  h100-sxm"
"$offsim" list models >"$tmp/list-mo.txt" 2>&1; check "list models" 0 $?
contains "list models counts parameters" "$tmp/list-mo.txt" "gpt3-175b.yaml                           174.60 B parameters"
"$offsim" list gpus >/dev/null 2>&1; check "list of an unknown kind exits 2" 2 $?
# offsim estimate: a ds_config and a config.json on N GPUs of a shipped machine.
"$offsim" estimate tests/data/real-inputs/ds/hf-transformers-zero3-auto.json \
  --model tests/data/real-inputs/hf/meta-llama-3-8b.config.json --gpus 8 >"$tmp/estimate.txt" 2>&1; check "estimate" 0 $?
contains "estimate gives DeepSpeed's figure" "$tmp/estimate.txt" "1.96 GiB per GPU"
contains "estimate gives the iteration time" "$tmp/estimate.txt" "iteration time"
"$offsim" estimate tests/data/real-inputs/ds/hf-transformers-zero3-auto.json \
  --model tests/data/real-inputs/hf/llama-3.2-3b-instruct.config.json --gpus 8 >"$tmp/estimate2.txt" 2>&1
check "estimate of a long-context model without --seq exits 2" 2 $?
contains "estimate asks for --seq" "$tmp/estimate2.txt" "--seq: the model's context is 131072 tokens"

"$offsim" topo configs/hardware/frontier-node.yaml >"$tmp/topo.txt" 2>&1; check "topo summary" 0 $?
contains "topo summary has the bisection" "$tmp/topo.txt" "worst 300.0 GB/s"
"$offsim" topo configs/hardware/frontier-node.yaml --json >"$tmp/topo.json" 2>&1; check "topo --json" 0 $?
contains "topo json has directed links" "$tmp/topo.json" '"src": "gcd0",'
contains "topo json has bandwidths" "$tmp/topo.json" '"bandwidth_bytes_per_s": 200000000000,'
"$offsim" topo configs/hardware/frontier.yaml --nodes 2 --route n0.gcd0 n1.gcd4 >"$tmp/route.txt" 2>&1; check "topo --route" 0 $?
contains "route leaves through hsn0" "$tmp/route.txt" "n0.gcd1 -> n0.hsn0"
contains "route bottleneck" "$tmp/route.txt" "bottleneck: 25.0 GB/s"
"$offsim" topo configs/hardware/dgx-a100.yaml --nodes 1 --dot "$tmp/dgx.dot" >/dev/null 2>&1; check "topo --dot" 0 $?
contains "dot file" "$tmp/dgx.dot" '"gpu0" -- "nvswitch"'
"$offsim" topo configs/hardware/frontier-node.yaml --route gcd0 gcd9 >"$tmp/badroute.txt" 2>&1; check "unknown route device exits 2" 2 $?
contains "unknown route device named" "$tmp/badroute.txt" "unknown device 'gcd9'"

"$offsim" model configs/models/llama2-70b.yaml --json >"$tmp/model.json" 2>&1; check "model --json" 0 $?
contains "model count" "$tmp/model.json" '"total": 68976648192,'
"$offsim" model configs/models/llama2-70b.yaml --tp 8 >"$tmp/model.txt" 2>&1; check "model --tp 8" 0 $?
contains "model qkv shape at tp 8" "$tmp/model.txt" "qkv                                 4096  1280  8192"

"$offsim" calibrate bench/data/frontier-rccl-collectives.csv --device mi250x-gcd --filter library=rccl --filter nodes=1 --out "$tmp/rccl.yaml" >/dev/null 2>&1; check "calibrate" 0 $?
contains "calibrate fits all_gather at 8 ranks" "$tmp/rccl.yaml" 'ranks: 8, nodes: 1, step_latency: "13.351 us", bus_bandwidth: "91.17 GB/s"'
"$offsim" calibrate bench/data/frontier-rccl-collectives.csv --device x --filter library=nccl --out "$tmp/none.yaml" >"$tmp/cal.txt" 2>&1; check "calibrate with no rows exits 2" 2 $?
contains "calibrate says why" "$tmp/cal.txt" "no rows left to fit"

# An infeasible run: pools overflowing alike on one line, and its figures marked as hypothetical.
"$offsim" run "$demo" --set training.micro_batch=16 >"$tmp/oom.txt" 2>&1; check "infeasible run exits 0" 0 $?
contains "overflowing pools grouped" "$tmp/oom.txt" "8 pools (gcd0.hbm, gcd1.hbm, gcd2.hbm, ...) each needs"
contains "figures marked as if it fit" "$tmp/oom.txt" "MFU                  50.8% of 191.5 TFLOP/s  (if it fit: it does not)"

# A fit that misses a measured row by more than 20% is written with a warning naming it.
"$offsim" calibrate bench/data/frontier-rccl-collectives.csv --device mi250x-gcd --filter library=rccl --filter nodes=1 \
  --out "$tmp/warn.yaml" >"$tmp/warn.txt" 2>&1; check "calibrate with a poor fit exits 0" 0 $?
contains "calibrate warns of the poor fit" "$tmp/warn.txt" "warning: collectives all_gather ranks: 8: the fit misses a measured row by 34.5%"

# The default folders of validate and check are found from any folder inside the repository, and
# outside it the error says what to do (exit 2).
(cd configs/experiments && "$offsim" check >"$tmp/check.txt" 2>&1); check "check from a subfolder" 0 $?
(cd "$tmp" && "$offsim" validate >"$tmp/validate.txt" 2>&1); check "validate outside the repository exits 2" 2 $?
contains "validate says where it looked" "$tmp/validate.txt" "no such folder here or in any parent folder"

# An interleaved experiment switched to 1F1B with --set: its virtual_stages is named and ignored.
"$offsim" run configs/experiments/gpt3-1.3b-3d-interleaved-frontier-node.yaml --set strategy.schedule=1f1b \
  >"$tmp/1f1b.txt" 2>&1; check "schedule switched to 1f1b by --set" 0 $?
contains "virtual_stages named as ignored" "$tmp/1f1b.txt" "strategy.virtual_stages: ignored: the 1f1b schedule"

# offsim search: the Pareto front of the strategies that fit, from one command, and --resume.
"$offsim" search tests/data/tiny-dp2.yaml --micro-batch 1 --tp 1 --max-hbm "1.5 MB" --out "$tmp/search" \
  >"$tmp/search.txt" 2>/dev/null; check "search exits 0" 0 $?
contains "search counts what it pruned" "$tmp/search.txt" "pruned before simulating"
contains "search names the fastest" "$tmp/search.txt" "fastest: "
contains "search writes the front" "$tmp/search/pareto.csv" "strategy,gpus,kind,tp,pp,dp,zero_stage"
"$offsim" search tests/data/tiny-dp2.yaml --micro-batch 1 --tp 1 --max-hbm "1.5 MB" --out "$tmp/search" \
  >/dev/null 2>&1; check "search into an existing folder without --resume exits 2" 2 $?
"$offsim" search tests/data/tiny-dp2.yaml --micro-batch 1 --tp 1 --max-hbm "1.5 MB" --out "$tmp/search" --resume \
  >"$tmp/search2.txt" 2>/dev/null; check "search --resume exits 0" 0 $?
contains "search --resume says what it resumed" "$tmp/search2.txt" "search: resuming $tmp/search/search.csv: "
grep -v '^search: resuming' "$tmp/search2.txt" | cmp -s "$tmp/search.txt" -; check "search --resume gives the same report" 0 $?
# A search key fixed with --set narrows the space (issue 34) instead of breaking every point.
"$offsim" search tests/data/tiny-megatron-pp2.yaml --micro-batch 1 --set strategy.pp=2 --out "$tmp/search-pp" \
  >"$tmp/search-pp.txt" 2>/dev/null; check "search --set strategy.pp exits 0" 0 $?
contains "search --set strategy.pp fixes pp" "$tmp/search-pp.txt" "search: --set strategy.pp=2 fixes the space to --pp 2"
contains "search --set strategy.pp has no error rows" "$tmp/search-pp.txt" " 0 infeasible, 0 errors"
if grep -q '^zero' "$tmp/search-pp.txt"; then echo "FAIL: search --set strategy.pp=2 kept a data_parallel point"; failed=$((failed + 1)); else passed=$((passed + 1)); fi
"$offsim" search tests/data/tiny-megatron-pp2.yaml --set strategy.schedule=1f1b --out "$tmp/search-bad" \
  >"$tmp/search-bad.txt" 2>&1; check "search --set on another strategy key exits 2" 2 $?
contains "search names the keys it can fix" "$tmp/search-bad.txt" "the search writes each point's strategy"
# The same files whatever the jobs (the points' threads share one machine, its routes and their
# search: stop 44's shared topology once corrupted that search under --jobs 2 on this space).
gpt3=configs/experiments/scale/gpt3-175b-a100-1024.yaml
"$offsim" search "$gpt3" --kind megatron --jobs 1 --out "$tmp/search-j1" >/dev/null 2>&1; check "search --jobs 1" 0 $?
"$offsim" search "$gpt3" --kind megatron --jobs 2 --out "$tmp/search-j2" >/dev/null 2>&1; check "search --jobs 2" 0 $?
for f in search.csv pareto.csv; do
  cmp -s "$tmp/search-j1/$f" "$tmp/search-j2/$f"; check "search --jobs 2 writes --jobs 1's $f" 0 $?
done

# Exit codes and the first line of their message (docs/fuzzing.md): 2 bad input, located; 3 the
# simulation cannot be done (an output that cannot be written, a time beyond the 64-bit clock).
# 70 (an internal error) cannot be reached from any input: tests/unit/exit_codes_test.cpp checks it.
first_line() {  # first_line NAME FILE EXPECTED_FIRST_LINE
  if [ "$(head -n 1 "$2")" = "$3" ]; then passed=$((passed + 1)); else
    echo "FAIL: $1: first line is not '$3':"; cat "$2"; failed=$((failed + 1)); fi
}
"$offsim" run tests/config_errors/megatron-layer-split.yaml >"$tmp/split.txt" 2>&1; check "uneven pipeline split exits 2" 2 $?
first_line "uneven pipeline split is located" "$tmp/split.txt" \
  "tests/config_errors/megatron-layer-split.yaml:23:32: strategy.first_stage_layers: first_stage_layers and last_stage_layers leave -1 of the model's 3 layers for 0 other stages"
"$offsim" run tests/config_errors/deepspeed-dp-zero.yaml >"$tmp/dp0.txt" 2>&1; check "deepspeed dp: 0 exits 2" 2 $?
first_line "deepspeed dp: 0 is located" "$tmp/dp0.txt" \
  "tests/config_errors/deepspeed-dp-zero.yaml:8:58: strategy.dp: expected >= 1, got 0"
: >"$tmp/regular"
"$offsim" run tests/data/tiny-dp2.yaml --out "$tmp/regular/run" >/dev/null 2>"$tmp/out3.txt"
check "--out under a regular file exits 3" 3 $?
first_line "--out under a regular file names it" "$tmp/out3.txt" \
  "error: cannot make the folder $tmp/regular/run: Not a directory"
"$offsim" run tests/data/tiny-dp2.yaml --out /proc/offsim-cli-test >/dev/null 2>"$tmp/proc.txt"
check "--out under /proc exits 3" 3 $?
contains "--out under /proc names it" "$tmp/proc.txt" "error: cannot make the folder /proc/offsim-cli-test:"
printf 'name: s\nbase: %s/tests/data/tiny-dp2.yaml\naxes: [{key: training.micro_batch, values: [1]}]\n' "$PWD" >"$tmp/s.yaml"
"$offsim" sweep "$tmp/s.yaml" --out "$tmp/regular/s.csv" >/dev/null 2>"$tmp/sweep3.txt"
check "sweep --out under a regular file exits 3" 3 $?
first_line "sweep --out names the file" "$tmp/sweep3.txt" "error: cannot write $tmp/regular/s.csv: Not a directory"
"$offsim" run tests/data/clock-limit-collective.yaml >/dev/null 2>"$tmp/clock.txt"; check "beyond the clock exits 3" 3 $?
first_line "beyond the clock names the duration" "$tmp/clock.txt" \
  "error: cannot simulate: a duration of 5e+07 s (2.5e+10 B at 500 B/s) does not fit: the simulated clock holds at most 9223372036854775807 ps (2^63 - 1 ps, about 106.75 days)"

# Includes (issue 32): outside the experiment's folder and its project they are refused unless
# widened; widened, a file that is not YAML or JSON is still refused without its lines shown.
printf 'root:$y$j9T$secret:19000:0:99999:7:::\n' >"$tmp/shadow"
printf 'name: x\nhardware: !include %s/shadow\n' "$tmp" >"$tmp/inc.yaml"
"$offsim" run tests/config_errors/include-outside.yaml >/dev/null 2>"$tmp/inc1.txt"
check "an include outside the project exits 2" 2 $?
contains "an include outside names the flag" "$tmp/inc1.txt" "--allow-include-outside (or OFFSIM_ALLOW_INCLUDE_OUTSIDE=1) allows it"
"$offsim" run "$tmp/inc.yaml" --allow-include-outside >/dev/null 2>"$tmp/inc2.txt"
check "a widened include of a text file exits 2" 2 $?
contains "a widened include of a text file is refused by its kind" "$tmp/inc2.txt" "is not a YAML or JSON file"
if grep -q 'secret' "$tmp/inc1.txt" "$tmp/inc2.txt"; then
  echo "FAIL: an include's error shows the included file's text"; failed=$((failed + 1))
else passed=$((passed + 1)); fi
OFFSIM_ALLOW_INCLUDE_OUTSIDE=1 "$offsim" run "$tmp/inc.yaml" >/dev/null 2>"$tmp/inc3.txt"
contains "OFFSIM_ALLOW_INCLUDE_OUTSIDE=1 widens as the flag does" "$tmp/inc3.txt" "is not a YAML or JSON file"

# Every exit 2 names where (issue 32): the option as the user typed it, or file:line:col: key.
"$offsim" topo configs/hardware/frontier-node.yaml --nodes 2 >/dev/null 2>"$tmp/topo-nodes.txt"
check "topo --nodes on a node file exits 2" 2 $?
first_line "topo --nodes on a node file names the option typed" "$tmp/topo-nodes.txt" \
  "--nodes 2: configs/hardware/frontier-node.yaml describes one node; --nodes applies to a system file (node:, nodes:, network:), such as configs/hardware/frontier.yaml"
"$offsim" search configs/experiments/allgather-frontier.yaml --out "$tmp/search-coll" >/dev/null 2>"$tmp/search-coll.txt"
check "search on a collective exits 2" 2 $?
first_line "search on a collective names the file and key" "$tmp/search-coll.txt" \
  "configs/experiments/allgather-frontier.yaml:14:9: strategy.kind: search needs a base experiment that trains (kind data_parallel, deepspeed or megatron), got collective"
for bad in "--tp 0" "--micro-batch 0" "--zero 7"; do
  # shellcheck disable=SC2086
  "$offsim" search "$demo" $bad --out "$tmp/search-bad" >/dev/null 2>"$tmp/search-bad.txt"
  check "search $bad exits 2 (it divided by zero)" 2 $?
  contains "search $bad names the option" "$tmp/search-bad.txt" "${bad%% *}: Value"
done

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
