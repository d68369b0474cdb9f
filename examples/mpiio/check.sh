#!/bin/sh
# check.sh -- run every MPI-IO test program at small sizes and check that it
# verifies, plus fault injections that must be detected.  Used by `make check`.
#
# Environment: OUT (built programs), NP (ranks, default 4), DIR (a scratch
# directory or a prefixed location such as stripefs:/mpiio-check; default
# /tmp/mpiio-check, created if it is a local path), MPIRUN (launcher command).
# For a prefixed DIR the directory must already exist.
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../target/mpiio}
NP=${NP:-4}
DIR=${DIR:-/tmp/mpiio-check}
if [ -z "$MPIRUN" ]; then
    MPIRUN="mpirun --oversubscribe"
    [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
fi
case "$DIR" in
    /*) mkdir -p "$DIR/md" ;;
esac

pass=0
fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# ok NAME PROG ARGS... : must exit 0 and print exactly one JSON line
ok() {
    name=$1; shift
    if $MPIRUN -n "$NP" "$@" >"$log" 2>"$log.err" &&
        [ "$(wc -l <"$log")" -eq 1 ] && head -c1 "$log" | grep -q '{'; then
        pass=$((pass + 1)); echo "PASS $name: $(cat "$log")"
    else
        fail=$((fail + 1)); echo "FAIL $name"; cat "$log" "$log.err"
    fi
    rm -f "$log.err"
}

# bad NAME PROG ARGS... : must exit non-zero and say VERIFY FAILED on stderr
bad() {
    name=$1; shift
    if $MPIRUN -n "$NP" "$@" >"$log" 2>"$log.err"; then
        fail=$((fail + 1)); echo "FAIL $name (fault not detected)"; cat "$log"
    elif grep -q 'VERIFY FAILED' "$log.err"; then
        pass=$((pass + 1)); echo "PASS $name (detected: $(grep -m1 'VERIFY FAILED' "$log.err"))"
    else
        fail=$((fail + 1)); echo "FAIL $name (non-zero exit without VERIFY FAILED)"; cat "$log.err"
    fi
    rm -f "$log.err"
}

ok  mpi-io-test        "$OUT/mpi-io-test" --block 2M --xfer 256k --iterations 2 "$DIR/iotest"
ok  mpi-io-test-coll   "$OUT/mpi-io-test" --block 2M --xfer 256k --collective "$DIR/iotest"
bad mpi-io-test-seed   "$OUT/mpi-io-test" --block 2M --mode read --seed 2 "$DIR/iotest"
ok  mpi-md-test        "$OUT/mpi-md-test" --files 20 "$DIR/md"
ok  mpi-md-test-self   "$OUT/mpi-md-test" --files 10 --comm self --delete root "$DIR/md"
ok  perf               "$OUT/perf" --size 1M "$DIR/perf"
bad perf-seed          "$OUT/perf" --size 1M --check-seed 7 "$DIR/perf"
ok  btio               "$OUT/btio" --grid 24 --steps 3 "$DIR/btio"
ok  btio-indep         "$OUT/btio" --grid 24 --steps 3 --independent "$DIR/btio"
bad btio-seed          "$OUT/btio" --grid 24 --steps 3 --mode read --seed 2 "$DIR/btio"
ok  btio-f90           "$OUT/btio-f90" "$DIR/btio-f" 24 3
ok  btio-f90-indep     "$OUT/btio-f90" "$DIR/btio-f" 24 3 independent
ok  btio-c-reads-f90   "$OUT/btio" --grid 24 --steps 3 --mode read "$DIR/btio-f"
ok  btio-f90-reads-c   "$OUT/btio-f90" "$DIR/btio" 24 3 collective read
ok  overlap            "$OUT/overlap" --block 1M --iterations 3 "$DIR/overlap"
ok  overlap-xfer       "$OUT/overlap" --block 1M --xfer 256k --iterations 2 --compute-ms 5 "$DIR/overlap"
bad overlap-seed       "$OUT/overlap" --block 1M --iterations 2 --check-seed 3 "$DIR/overlap"
ok  subarray           "$OUT/subarray" "$DIR/subarray" 37 29
bad subarray-offset    "$OUT/subarray" "$DIR/subarray" 37 29 read 1
if [ -x "$OUT/hdf5_rw" ]; then
    ok  hdf5_rw        "$OUT/hdf5_rw" --rows 100 --cols 64 "$DIR/hdf5.h5"
    bad hdf5_rw-offset "$OUT/hdf5_rw" --rows 100 --cols 64 --mode read --offset 1 "$DIR/hdf5.h5"
else
    echo "SKIP hdf5_rw (not built)"
fi

echo "check.sh: $pass passed, $fail failed (NP=$NP, DIR=$DIR)"
[ "$fail" -eq 0 ]
