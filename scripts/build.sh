#!/usr/bin/env bash
# Installs dependencies (if missing) and builds heft into build/ (the command ends up at build/heft).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh "$@"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${HEFT_BUILD_TYPE:-Release}" >/dev/null
cmake --build build -j "$(nproc)"
