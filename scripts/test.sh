#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, integration,
# example, install, and the replay of every fuzz corpus and regression), then
# each fuzz target for a few seconds (HEFT_FUZZ_SECONDS, default 5; 0 skips
# them) in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
(cd build && ctest --output-on-failure -j 2 --timeout 900)
fuzz_seconds="${HEFT_FUZZ_SECONDS:-5}"
if ((fuzz_seconds > 0)); then HEFT_FUZZ_JOBS=2 ./scripts/fuzz.sh "$fuzz_seconds"; fi
