#!/usr/bin/env bash
# Long simulator run: thousands of seeds of the whole-cluster simulator (stripefs sim),
# in chunks so that progress shows and a violation is reported as soon as its chunk ends.
# Usage: scripts/sim_long.sh [SEEDS] [FIRST] [STEPS]   (defaults: 5000 seeds from 1, 200 steps)
# Writes target/sim-long/CHUNK.json per chunk; exits 1 if any seed found a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-5000}
first=${2:-1}
steps=${3:-200}
chunk=500
cargo build --release --locked -q
out=target/sim-long
mkdir -p "$out"
bad=0
start=$first
end=$((first + seeds))
while [ "$start" -lt "$end" ]; do
  n=$((end - start < chunk ? end - start : chunk))
  echo "sim: seeds $start..$((start + n - 1))"
  if ! target/release/stripefs sim --first "$start" --seeds "$n" --steps "$steps" \
       --json-file "$out/$start.json"; then
    bad=1
  fi
  start=$((start + n))
done
if [ "$bad" -ne 0 ]; then
  echo "sim: violations found; see the reports in $out" >&2
  exit 1
fi
echo "sim: $seeds seeds, no violations"
