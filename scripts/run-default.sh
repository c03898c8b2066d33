#!/usr/bin/env bash
# Installs dependencies, builds, and runs heft's main job on its embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec build/heft run "$@"
