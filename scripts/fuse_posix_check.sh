#!/bin/bash
# The POSIX workloads of issue 3 through a fresh mount of a running cluster, one line per
# check: dd of 1 GiB + sha256, cp -a of /usr/share/doc + diff -r, tar, git, rsync, rm -rf,
# fio randrw with crc32c verify, and (with --bonnie) bonnie++, which takes several minutes.
# usage: scripts/fuse_posix_check.sh CLUSTER_TOML MOUNTPOINT [--bonnie]
# Needs fio, rsync, git (and bonnie++) installed; the mount point must be an empty directory.
set -u
S=${STRIPEFS:-stripefs}; C=${1:?cluster file}; M=${2:?mount point}; BONNIE=${3:-}
for t in fio rsync git sha256sum; do
  command -v "$t" >/dev/null || { echo "missing tool: $t (apt-get install -y $t)"; exit 2; }
done
[ -z "$BONNIE" ] || command -v bonnie++ >/dev/null || { echo "missing tool: bonnie++"; exit 2; }
"$S" mount "$M" --cluster "$C" || exit 1
W=$(mktemp -d)
trap '"$S" umount "$M"; rm -rf "$W"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
head -c 1G /dev/urandom > "$W/src"
if dd if="$W/src" of="$M/big" bs=1M status=none conv=fsync &&
   [ "$(sha256sum < "$W/src")" = "$(sha256sum < "$M/big")" ]; then ok "dd 1 GiB in, sha256 equal"; else bad "dd"; fi
rm -f "$M/big" "$W/src"
n=$(find /usr/share/doc | wc -l)
if cp -a /usr/share/doc "$M/doc" && diff -r --no-dereference /usr/share/doc "$M/doc"; then
  ok "cp -a /usr/share/doc ($n entries), diff -r clean"; else bad "cp -a"; fi
if tar -C "$M" -cf "$M/doc.tar" doc && mkdir "$M/x" && tar -C "$M/x" -xf "$M/doc.tar" &&
   diff -r --no-dereference /usr/share/doc "$M/x/doc"; then ok "tar create + extract"; else bad "tar"; fi
if (mkdir "$M/repo" && cd "$M/repo" && git init -q && cp -a /usr/share/doc/git . 2>/dev/null; cd "$M/repo" &&
    echo hi > f && git add -A && git -c user.email=a@b -c user.name=t commit -qm one && git fsck >/dev/null 2>&1)
then ok "git init/add/commit/fsck"; else bad "git"; fi
if rsync -a /usr/share/doc/ "$M/rs/" && diff -r --no-dereference /usr/share/doc "$M/rs"; then
  ok "rsync -a"; else bad "rsync"; fi
if rm -rf "$M/doc" "$M/x" "$M/rs" "$M/repo" "$M/doc.tar" && [ -z "$(ls -A "$M")" ]; then
  ok "rm -rf"; else bad "rm -rf"; fi
if (cd "$M" && fio --name=v --rw=randrw --bs=4k-1m --size=256M --verify=crc32c --numjobs=4 \
      --output="$W/fio.out" >/dev/null 2>&1) && ! grep -q "verify:" "$W/fio.out"; then
  ok "fio randrw 4k-1m, verify crc32c, 4 jobs"; else bad "fio"; grep -i err "$W/fio.out" | head -3; fi
rm -f "$M"/v.* "$M"/*verify.state
if [ -n "$BONNIE" ]; then
  if (cd "$W" && bonnie++ -d "$M" -s 2G -r 1G -n 4 -u root > "$W/bonnie.out" 2>&1); then
    ok "bonnie++ -s 2G -r 1G -n 4"; tail -1 "$W/bonnie.out"; else bad "bonnie++"; tail -5 "$W/bonnie.out"; fi
fi
echo "$fails failed"
[ "$fails" -eq 0 ]
