#!/usr/bin/env bash
# Situations per minute (issue 37, docs/coverage.md): one `fencecheck test
# --nemesis all` run per target, then each failure situation's honest count
# (results.json coverage: completed by an operation that reached the
# system; an idle period only when no fault touched its nodes) per minute of
# main phase, side by side. "n/a" where the situation cannot occur on that
# target.
#
#   scripts/situations.sh [TARGETS="memory etcd redis postgres zookeeper"] [TIME=30s] [SEED=1] [MODE=guided]
#
# Needs bin/fencecheck (make build); Docker targets need Docker and their
# host packages (scripts/deps.sh). The runs go to a temporary store,
# removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=${TARGETS:-memory etcd redis postgres zookeeper}
time=${TIME:-30s}
seed=${SEED:-1}
mode=${MODE:-guided}
[ -x bin/fencecheck ] || { echo "situations: bin/fencecheck is missing (make build)" >&2; exit 3; }
store=$(mktemp -d /tmp/fencecheck-situations-XXXXXX)
trap 'rm -rf "$store"' EXIT
files=()
for t in $targets; do
  echo "situations: fencecheck test --target $t --nemesis all --nemesis-mode $mode --time $time --seed $seed" >&2
  code=0
  bin/fencecheck test --target "$t" --nemesis all --nemesis-mode "$mode" --time "$time" --seed "$seed" \
    --store "$store/$t" --quiet >"$store/$t.out" 2>&1 || code=$?
  if [ ! -f "$store/$t/latest/results.json" ]; then
    echo "situations: $t did not run (exit $code): $(tail -n 3 "$store/$t.out")" >&2
    continue
  fi
  echo "situations: $t exit $code" >&2
  files+=("$t=$store/$t/latest/results.json")
done
python3 - "$time" "$mode" "${files[@]}" <<'EOF'
import json, sys
time, mode, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = []
for p in pairs:
    name, path = p.split("=", 1)
    runs.append((name, json.load(open(path))))
rows, text = [], {}
for _, r in runs:
    for c in r["coverage"]["classes"]:
        for s in c["situations"]:
            if s["id"] not in text:
                rows.append(s["id"])
                text[s["id"]] = s["text"]
print(f"Situations per minute of main phase, one `--nemesis all --nemesis-mode {mode} --time {time}` run per target "
      "(honest counts: results.json `coverage`; in brackets, idle periods a fault overlapped, not counted).\n")
print("| situation | " + " | ".join(n for n, _ in runs) + " |")
print("|---|" + "---:|" * len(runs))
for sid in rows:
    cells = []
    for _, r in runs:
        minutes = r["coverage"]["main_phase_ns"] / 60e9
        found = None
        for c in r["coverage"]["classes"]:
            for s in c["situations"]:
                if s["id"] == sid:
                    found = s
        if found is None or found.get("not_applicable"):
            cells.append("n/a")
            continue
        cell = f"{found['count'] / minutes:.1f}"
        if found.get("during_faults"):
            cell += f" ({found['during_faults'] / minutes:.1f})"
        cells.append(cell)
    print(f"| {text[sid]} | " + " | ".join(cells) + " |")
EOF
