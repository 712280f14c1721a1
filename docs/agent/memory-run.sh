#!/bin/bash
# 32 minutes: blkprof-trace as an agent (metrics + 10-minute flight recorder) next to fio at 20k IOPS.
# Usage: BLKPROF_TRACE=$PWD/target/release/blkprof-trace docs/agent/memory-run.sh OUT_DIR (as root; needs fio, curl).
# Writes rss.txt (seconds, RSS kB, blkprof_ios_total), peak.txt, the dump and the tracer's summary to OUT_DIR.
set -u
cd "${1:-.}"
truncate -s 1G /dev/shm/agentmem.img
L=$(losetup -f --show /dev/shm/agentmem.img)
mkdir -p dumps
(umask 077; head -c 24 /dev/urandom | base64 > token)
${BLKPROF_TRACE:-blkprof-trace} -d $L --quiet --metrics-addr 127.0.0.1:9760 --flight-recorder 10m --dump-dir dumps --dump-token token > tracer.out 2> tracer.err &
TP=$!
sleep 2
fio --name=agent --filename=$L --rw=randrw --rwmixread=70 --bs=4k --direct=1 --ioengine=libaio --iodepth=4 --rate_iops=14000,6000 --runtime=1920 --time_based --output-format=json --output=fio.json &
FP=$!
start=$(date +%s)
echo "t_s rss_kb ios" > rss.txt
while kill -0 $FP 2>/dev/null; do
  now=$(date +%s)
  rss=$(awk '/VmRSS/ {print $2}' /proc/$TP/status)
  ios=$(curl -s 127.0.0.1:9760/metrics | awk '/^blkprof_ios_total/ {s+=$2} END {print s}')
  echo "$((now-start)) $rss $ios" >> rss.txt
  sleep 30
done
curl -s -X POST -H "Authorization: Bearer $(cat token)" 127.0.0.1:9760/dump > dump.txt
awk '/VmHWM/ {print "peak_rss_kb", $2}' /proc/$TP/status > peak.txt
kill -INT $TP; wait $TP
losetup -d $L; rm -f /dev/shm/agentmem.img
echo done > done.txt
