#!/bin/bash
# Sequential 2 GiB write (dd conv=fsync) and cold read through a mount, against the native
# client's `stripefs bench io --clients 1 --block 2G` on the same cluster in the same round.
# Which of the two goes first alternates from round to round, since on a VM the cost of
# the memory each one gets depends on what ran just before.
# usage: scripts/fuse_seq.sh CLUSTER_TOML MOUNTPOINT [ROUNDS]   (needs root: drops caches)
set -euo pipefail
S=${STRIPEFS:-stripefs}; C=$1; M=$2; R=${3:-3}
J=$(mktemp); trap 'rm -f "$J" "$M/fuse_seq.tmp"' EXIT
[ -c /dev/null ] || { echo "/dev/null is not a character device: the reads would measure a copy into a file" >&2; exit 1; }
field() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[sys.argv[2]]))" "$J" "$1"; }
native() {
  "$S" bench io --cluster "$C" --clients 1 --block 2G --xfer 1M --json "$J" >/dev/null
  nw=$(field write_mib_s); nr=$(field read_mib_s)
}
mount_rw() {
  t0=$(date +%s.%N); dd if=/dev/zero of="$M/fuse_seq.tmp" bs=1M count=2048 conv=fsync status=none; t1=$(date +%s.%N)
  mw=$(echo "2048 / ($t1 - $t0)" | bc)
  sync; echo 3 > /proc/sys/vm/drop_caches
  t0=$(date +%s.%N); dd if="$M/fuse_seq.tmp" of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
  mr=$(echo "2048 / ($t1 - $t0)" | bc); rm -f "$M/fuse_seq.tmp"
}
for r in $(seq 1 "$R"); do
  if [ $((r % 2)) = 1 ]; then native; mount_rw; first=native; else mount_rw; native; first=mount; fi
  echo "round $r ($first first): native write $nw read $nr MiB/s | mount write $mw read $mr MiB/s | mount/native write $((100*mw/nw))% read $((100*mr/nr))%"
done
