#!/usr/bin/env bash
# End-to-end cost of a long run (issue 38, docs/performance.md): one
# `fencecheck test` of the embedded reference under --nemesis all with 20
# clients, run + check + report in one process, then `fencecheck report` of
# the stored run (the check and the report again, alone). Prints one
# Markdown row per step: operations, wall time, peak RSS (the process's
# VmHWM through /usr/bin/time), bytes of peak RSS per operation, and the
# run folder's size without history.jsonl.
#
#   scripts/endtoend.sh [TIME=10m] [CONCURRENCY=20] [SEED=1]
#
# It needs /usr/bin/time (Debian's `time` package) and bin/fencecheck
# (make build). The run folder is left in a temporary store, removed at
# the end.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${TIME:-10m}
conc=${CONCURRENCY:-20}
seed=${SEED:-1}
[ -x /usr/bin/time ] || { echo "endtoend: /usr/bin/time is missing (apt-get install time)" >&2; exit 3; }
[ -x bin/fencecheck ] || { echo "endtoend: bin/fencecheck is missing (make build)" >&2; exit 3; }
store=$(mktemp -d /tmp/fencecheck-endtoend-XXXXXX)
trap 'rm -rf "$store"' EXIT

measure() { # label, then the command; prints wall s and peak RSS KB
  local label=$1; shift
  local tf; tf=$(mktemp)
  local code=0
  /usr/bin/time -f '%e %M' -o "$tf" "$@" >"$store/$label.out" 2>&1 || code=$?
  read -r wall rss <"$tf"; rm -f "$tf"
  echo "$wall $rss $code"
}

echo "endtoend: fencecheck test --target memory --nemesis all --time $time --concurrency $conc --seed $seed (progress in $store/test.out)" >&2
read -r twall trss tcode < <(measure test bin/fencecheck test --target memory --nemesis all --time "$time" \
  --concurrency "$conc" --seed "$seed" --store "$store" --quiet)
run=$(readlink -f "$store/latest")
ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"]["ops"])' "$run/results.json")
verdict=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' "$run/results.json")
read -r rwall rrss rcode < <(measure report bin/fencecheck report "$run")
hist=$(stat -c %s "$run/history.jsonl")
folder=$(du -sb "$run" | cut -f1)
rest=$(( folder - hist ))
bpo() { python3 -c "print(f'{$1*1024/$2:.0f}')"; }
echo
echo "| step | operations | verdict | wall s | peak RSS MB | bytes/op | run folder without history MB | history MB |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
printf '| `test --time %s --concurrency %s` (run + check + report, exit %s) | %s | %s | %s | %.0f | %s | %.1f | %.1f |\n' \
  "$time" "$conc" "$tcode" "$ops" "$verdict" "$twall" "$(python3 -c "print($trss/1024)")" "$(bpo "$trss" "$ops")" \
  "$(python3 -c "print($rest/1048576)")" "$(python3 -c "print($hist/1048576)")"
printf '| `report` of that run (check + report again, exit %s) | %s | %s | %s | %.0f | %s | | |\n' \
  "$rcode" "$ops" "$verdict" "$rwall" "$(python3 -c "print($rrss/1024)")" "$(bpo "$rrss" "$ops")"
