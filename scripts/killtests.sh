#!/bin/bash
# Kill -9s of `go test` of the power-loss layer's packages at random moments, then look (docs/robustness.md).
#
# Each trial runs `go test` of the packages in a session of its own and, at a random moment, kills
# its whole process group with SIGKILL (go, the test binaries and whatever they started in the
# group: what a CI job cancelled or a `go test` timeout does to the binary). Three seconds later it
# counts, for that trial: the layer mounts left under the trial's TMPDIR (t.TempDir and the docker
# tests' run folders are there), the processes left that the trial started (found by a tag in
# their environment, which children inherit) and those of them in D. Then one more run of the
# same tests, not killed, must pass. Last, it lets go of what the trials left (aborts the FUSE
# connections of the mounts under its folder and detaches them), so that the machine is clean.
#
#   scripts/killtests.sh            # 5 kills
#   KILLS=10 scripts/killtests.sh
#
# Run from the repository; needs FUSE and Docker (CI=true: the tests fail rather than skip).
set -u
kills=${KILLS:-5}
store=${STORE:-/tmp/fc-killtests}
# Every test of the lazyfs package; of harness/docker, the tests with a layer (the others are
# containers' and take minutes).
tests="go test -count=1 ./nemesis/lazyfs/... & go test -count=1 -run 'DeadLayer|LayersItDetaches' ./harness/docker/ & wait"
export CI=true
rm -rf "$store"; mkdir -p "$store"
go test -count=1 -run '^$' ./nemesis/lazyfs/... ./harness/docker/ >/dev/null || { echo "build failed"; exit 1; }

tagged() { # pids (with state) of the processes whose environment holds tag $1
  for e in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qx "FENCECHECK_KILLTESTS=$1"; then
      p=${e#/proc/}; p=${p%/environ}
      echo -n "$p($(awk '{print $3}' /proc/$p/stat 2>/dev/null)) "
    fi
  done
}
mounts() { awk -v d="$1/" '$3 ~ /^fuse/ && index($2, d) == 1' /proc/mounts | wc -l; }

total_m=0; total_p=0; total_d=0
for i in $(seq 1 "$kills"); do
  tmp=$store/k$i; mkdir -p "$tmp"
  d=$(python3 -c "import random;random.seed($i*7);print(round(random.uniform(0.8,5.0),2))")
  TMPDIR=$tmp FENCECHECK_KILLTESTS=k$i setsid bash -c "$tests" >"$store/k$i.log" 2>&1 &
  pid=$!
  sleep "$d"
  kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null
  sleep 3
  m=$(mounts "$tmp"); left=$(tagged k$i); nd=$(grep -o '(D)' <<<"$left" | wc -l); np=$(wc -w <<<"$left")
  total_m=$((total_m + m)); total_p=$((total_p + np)); total_d=$((total_d + nd))
  echo "kill $i at ${d}s: mounts=$m processes=$np [${left% }] D=$nd"
done
tmp=$store/final; mkdir -p "$tmp"
start=$(date +%s.%N)
TMPDIR=$tmp FENCECHECK_KILLTESTS=final timeout 300 bash -c "$tests" >"$store/final.log" 2>&1
rc=$?
[ "$(grep -c '^ok' "$store/final.log")" = 2 ] && ! grep -q '^FAIL' "$store/final.log" || rc=1
echo "after $kills kills: mounts=$total_m processes=$total_p D=$total_d; next run exit $rc in $(python3 -c "import time;print(round(time.time()-$start,1))")s; mounts=$(mounts "$tmp") processes=$(tagged final | wc -w)"
[ $rc -eq 0 ] || tail -20 "$store/final.log"

# Let go of what the trials left: abort each dead connection, detach the mount.
if [ -z "$(ls /sys/fs/fuse/connections 2>/dev/null)" ]; then mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null; fi
awk -v d="$store/" '{t = ""; for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); break }}
  t ~ /^fuse/ && index($5, d) == 1 {print $3, $5}' /proc/self/mountinfo | while read -r dev point; do
  echo 1 >"/sys/fs/fuse/connections/${dev#*:}/abort" 2>/dev/null
  umount -l "$point" 2>/dev/null
done
[ $total_m -eq 0 ] && [ $total_p -eq 0 ] && [ $rc -eq 0 ]
