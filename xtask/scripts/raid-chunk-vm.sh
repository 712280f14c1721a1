#!/bin/sh
# The arms of `cargo xtask experiment raid-chunk`, inside a guest of `cargo xtask vm` with four
# NVMe disks: for each chunk size (KB), an md RAID0 of nvme0n1..nvme3n1, traced by
# blkprof-trace (--device md0 traces its members) while fio replays the source trace's iolog on
# /dev/md0 with its timing.
#   sh xtask/scripts/raid-chunk-vm.sh OUT_DIR IOLOG CHUNK_KB...
set -e
B=$(cd "$(dirname "$0")/../.." && pwd)/target/release
OUT=$1
IOLOG=$2
shift 2
uname -r
for c in "$@"; do
  mdadm --stop /dev/md0 2>/dev/null || true
  mdadm --create /dev/md0 --level=0 --raid-devices=4 --chunk="$c" --run --force \
    --metadata=1.2 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1 2>&1
  "$B/blkprof-trace" --device md0 --output "$OUT/md$c.blkp" --quiet \
    --label experiment=raid-chunk --label "arm=chunk${c}k" --label "chunk_kb=$c" \
    > "$OUT/md$c.tracer.txt" 2>&1 &
  P=$!
  i=0
  until grep -q "tracing" "$OUT/md$c.tracer.txt"; do
    i=$((i + 1))
    if [ "$i" -gt 600 ]; then echo "blkprof-trace did not attach"; cat "$OUT/md$c.tracer.txt"; exit 1; fi
    sleep 0.1
  done
  start=$(date +%s)
  fio --name=replay --read_iolog="$IOLOG" --direct=1 --ioengine=libaio --iodepth=32 \
    --output="$OUT/md$c.fio.txt"
  echo "chunk $c KB: replayed in $(( $(date +%s) - start )) s"
  kill -INT $P
  wait $P || true
  mdadm --stop /dev/md0
done
