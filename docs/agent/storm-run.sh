#!/bin/bash
# RSS of the agent under a trigger storm against the flight recorder's bound.
# Usage: docs/agent/storm-run.sh BIN OUT  (as root; needs fio, bc). Writes rss.txt, result.txt,
# the dumps and the tracer's stderr to OUT.
set -u
BIN=$1; OUT=$2; mkdir -p $OUT/dumps; cd $OUT
truncate -s 1G /dev/shm/storm.img
L=$(losetup -f --show /dev/shm/storm.img)
$BIN -d $L --quiet --ring-size 1M --flight-recorder 60s --flight-recorder-size 16M --dump-dir dumps \
  --trigger 'queue_depth > 0' --dump-after 1s --dump-cooldown 5s --dump-quota 400M --dump-max-files 100 \
  > tracer.out 2> tracer.err &
TP=$!
sleep 3
base=$(awk '/VmRSS/ {print $2}' /proc/$TP/status)
fio --name=storm --filename=$L --rw=randrw --rwmixread=70 --bs=4k --direct=1 --ioengine=libaio --iodepth=8 --runtime=120 --time_based --output-format=json --output=fio.json &
FP=$!
echo "t rss_kb" > rss.txt
start=$(date +%s.%N)
while kill -0 $FP 2>/dev/null; do
  echo "$(echo "$(date +%s.%N) - $start" | bc) $(awk '/VmRSS/ {print $2}' /proc/$TP/status)" >> rss.txt
  sleep 0.5
done
hwm=$(awk '/VmHWM/ {print $2}' /proc/$TP/status)
kill -INT $TP; wait $TP
echo "base_kb $base hwm_kb $hwm max_sampled_kb $(awk 'NR>1 {if ($2>m) m=$2} END {print m}' rss.txt) dumps $(ls dumps | wc -l) shortened $(grep -c 'shorter than asked' tracer.err) wrote $(grep -c 'wrote' tracer.err)" > result.txt
losetup -d $L; rm -f /dev/shm/storm.img
cat result.txt
