#!/bin/sh
# The missed-completion comparison, run inside a guest of `cargo xtask vm` (README, Known
# limitations): 150 s of traced 4 KB random reads at iodepth 32 on the first NVMe disk, then on a
# loop device over ext4 on the second. Prints each run's coverage and loss lines.
#   cargo build --release -p tracer
#   cargo xtask vm --kernel 6.1 --disks 2 --disk-mb 2048 -- sh xtask/scripts/vm-miss-run.sh
set -e
B=$(cd "$(dirname "$0")/../.." && pwd)/target/release
uname -r
modprobe loop max_loop=4
mkfs.ext4 -q /dev/nvme1n1
mount /dev/nvme1n1 /mnt
truncate -s 1G /mnt/img
L=$(losetup -f --show --direct-io=on /mnt/img)
for dev in nvme0n1 $(basename "$L"); do
  "$B/blkprof-trace" --device "$dev" --output "/mnt/$dev.blkp" --quiet > "/mnt/$dev.tracer.txt" 2>&1 &
  P=$!
  sleep 3
  fio --name=m --filename="/dev/$dev" --direct=1 --rw=randread --bs=4k --ioengine=libaio \
    --iodepth=32 --runtime=150 --time_based --size=400m > /dev/null
  kill -INT $P
  wait $P || true
  echo "== $dev"
  grep -E "coverage|records:|missed" "/mnt/$dev.tracer.txt"
done
