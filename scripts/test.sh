#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, integration, example, install).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure -j 2 --timeout 900
