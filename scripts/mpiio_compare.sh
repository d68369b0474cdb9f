#!/usr/bin/env bash
# One cluster, one run: the same MPI-IO benchmarks through the native layer
# (stripefs-mpi), through the standard interface on stripefs's Open MPI components
# (stripefs: names), and through the standard interface on the FUSE mount with Open
# MPI's POSIX driver. Prints one JSON line per run and a table of ratios.
#
#   bash scripts/mpiio_compare.sh [--ranks 4] [--block 64M] [--servers 4] [--targets 1]
#                                 [--throttle RATE] [--grid 64] [--steps 4]
#
# Needs `cargo build --release`, `cargo build --release -p stripefs-mpi`,
# `make -C ompi` and `make -C examples/mpiio`.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=4 block=64M servers=4 targets=1 throttle="" grid=64 steps=4
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --block) block=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --throttle) throttle=$2; shift 2 ;;
    --grid) grid=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 64 ;;
  esac
done
bin=$PWD/target/release
progs=$PWD/target/mpiio
for f in "$bin/stripefs" "$bin/stripefs-mpi" target/ompi/mca_fs_stripefs.so "$progs/mpi-io-test" "$progs/btio"; do
  [ -e "$f" ] || { echo "$f is missing (see the header of $0)" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/stripefs-mpiio-compare.XXXXXX)
mnt=$dir/mnt
cleanup() {
  "$bin/stripefs" umount "$mnt" >/dev/null 2>&1 || true
  "$bin/stripefs" cluster down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
up=(cluster up --dir "$dir" --servers "$servers" --targets "$targets")
[ -n "$throttle" ] && up+=(--throttle "$throttle")
"$bin/stripefs" "${up[@]}" >/dev/null
export STRIPEFS_CLUSTER=$dir/cluster.toml
mkdir -p "$mnt"
"$bin/stripefs" mount "$mnt" >/dev/null
export OMPI_MCA_mca_base_component_path="$PWD/target/ompi:$(make -s -C ompi pkglibdir)"
run() { mpirun --allow-run-as-root --oversubscribe -x OMPI_MCA_mca_base_component_path -x STRIPEFS_CLUSTER -n "$ranks" "$@"; }
posix=(--mca fs ufs --mca fbtl posix)
out=$dir/results
: > "$out"
record() { local name=$1; shift; local line; line=$("$@" | tail -1); echo "{\"run\":\"$name\",\"result\":$line}" | tee -a "$out"; }

run "$bin/stripefs-mpi" io --block "$block" --xfer 1M --json "$dir/native-io.json" >/dev/null
echo "{\"run\":\"native io\",\"result\":$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$dir/native-io.json")}" | tee -a "$out"
record "components io" run "$progs/mpi-io-test" --block "$block" --xfer 1M --unlink stripefs:/cmp-io
record "components io collective" run "$progs/mpi-io-test" --block "$block" --xfer 1M --collective --unlink stripefs:/cmp-io
record "mount posix io" run "${posix[@]}" "$progs/mpi-io-test" --block "$block" --xfer 1M --unlink "$mnt/cmp-io"
record "mount posix io collective" run "${posix[@]}" "$progs/mpi-io-test" --block "$block" --xfer 1M --collective --unlink "$mnt/cmp-io"
record "components btio collective" run "$progs/btio" --grid "$grid" --steps "$steps" --unlink stripefs:/cmp-btio
record "components btio independent" run "$progs/btio" --grid "$grid" --steps "$steps" --independent --unlink stripefs:/cmp-btio
record "mount posix btio collective" run "${posix[@]}" "$progs/btio" --grid "$grid" --steps "$steps" --unlink "$mnt/cmp-btio"
record "components overlap" run "$progs/overlap" --block 16M --iterations 4 --unlink stripefs:/cmp-overlap

python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {r["run"]: r["result"] for r in rows}
def fig(name, key):
    r = by.get(name, {})
    for k in (key, key.replace("_mib_s", "_mibs")):
        if k in r: return float(r[k])
    return None
nat_w = fig("native io", "write_mib_s") or by["native io"].get("write", {}).get("mib_s")
nat_r = fig("native io", "read_mib_s") or by["native io"].get("read", {}).get("mib_s")
print()
print(f"{'run':32} {'write MiB/s':>12} {'read MiB/s':>12} {'w/native':>9} {'r/native':>9}")
for name in by:
    w, r = fig(name, "write_mib_s"), fig(name, "read_mib_s")
    if name == "native io": w, r = nat_w, nat_r
    ws = f"{w:12.1f}" if w is not None else f"{'-':>12}"
    rs = f"{r:12.1f}" if r is not None else f"{'-':>12}"
    wr = f"{w / nat_w:9.2f}" if w and nat_w and "io" in name else f"{'':9}"
    rr = f"{r / nat_r:9.2f}" if r and nat_r and "io" in name else f"{'':9}"
    print(f"{name:32} {ws} {rs} {wr} {rr}")
EOF
