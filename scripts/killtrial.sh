#!/bin/bash
# ten kill -9s of fencecheck test --nemesis power-loss,crash-on-ack at random moments, then look
# Run from the repository after `make build`; prints, for each kill, how fast fencecheck was reaped,
# the run's layer mounts left, its children left and any process in D (docs/robustness.md).
store=/tmp/fc-kill; rm -rf $store; mkdir -p $store
for i in $(seq 1 10); do
  ${FENCECHECK:-./bin/fencecheck} test --nemesis power-loss,crash-on-ack --time 10s --seed $i --store $store --quiet >/dev/null 2>&1 &
  pid=$!
  d=$(python3 -c "import random;random.seed($i*7);print(round(random.uniform(0.2,10.5),2))")
  sleep $d
  agents=$(pgrep -P $pid | tr "\n" " ")
  kill -9 $pid 2>/dev/null; t0=$(date +%s.%N); wait $pid 2>/dev/null
  t1=$(date +%s.%N)
  sleep 3
  m=$(grep fuse.fencecheck /proc/mounts | grep -c "$store")
  left=""
  for p in $agents; do [ -d /proc/$p ] && left="$left $p($(awk '{print $3}' /proc/$p/stat))"; done
  dstate=$(ps -eo stat,pid,comm | awk '$1 ~ /^D/' | tr '\n' ' ')
  echo "kill $i at ${d}s: fencecheck reaped in $(python3 -c "print(round($t1-$t0,2))")s; mounts=$m agents=[$agents] left=[$left] D=[$dstate]"
done
${FENCECHECK:-./bin/fencecheck} test --nemesis power-loss,crash-on-ack --time 10s --seed 11 --store $store --quiet >/dev/null 2>&1
echo "run 11 exit $?; mounts=$(grep fuse.fencecheck /proc/mounts | grep -c "$store"); stray mnt dirs: $(ls -d $store/memory/*/nodes/*/mnt 2>/dev/null | wc -l); layer-agent dirs: $(ls -d $store/memory/*/layer-agent 2>/dev/null | wc -l)"
