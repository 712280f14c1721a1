#!/usr/bin/env bash
# Records the golden traces in tests/data (as root): see tests/data/README.md.
set -euo pipefail
OUT=${1:?output dir}
BIN=${BIN:-/work/main/target/release}
img=$(mktemp /var/tmp/blkprof-golden.XXXX.img)
truncate -s 2G "$img"
dev=$(losetup -f --show --direct-io=on "$img")
name=${dev#/dev/}
trap 'losetup -d "$dev"; rm -f "$img"' EXIT
job() { # name, write burst size, read rate
  cat > /tmp/golden.fio <<JOB
[global]
ioengine=libaio
direct=1
time_based
[reads]
rw=randread
bs=4k
iodepth=8
rate_iops=$3
[flush-bursts]
rw=write
bs=$2
iodepth=32
thinktime=2s
thinktime_blocks=200
[compaction-trims]
rw=randtrim
bs=2m
iodepth=1
thinktime=2s
thinktime_blocks=8
JOB
  "$BIN/blkprof-trace" --device "$name" --duration 9s --quiet --output "$OUT/$1.blkp" > "$OUT/$1.tracer.txt" 2>&1 &
  t=$!
  sleep 0.5
  fio --filename="$dev" --runtime=8 /tmp/golden.fio > /dev/null
  wait $t
  rm -f "$OUT/$1.hlog"
}
job cassandra-shaped-a 512k 2000
job cassandra-shaped-b 512k 2000
job cassandra-shaped-bigger-writes 1m 2000
