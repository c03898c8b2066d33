#!/usr/bin/env bash
# Builds heft and its tests with AddressSanitizer and UndefinedBehaviorSanitizer
# into build-sanitized/ and runs the suite there. Not part of CI: the build
# alone takes 20–30 minutes on 2 cores. Fails if a test fails or if any process
# (the tests, and every heft they start) reported a sanitizer error.
# Left out: GigabyteDownloadAndUploadStayUnder64MiB (ASan's shadow memory is
# part of RSS) and install.find_package (its example builds without the
# sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
flags="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
cmake -S . -B build-sanitized -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEFT_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
ninja -C build-sanitized
logs="$(pwd)/build-sanitized/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1"
status=0
(cd build-sanitized && ctest --output-on-failure -j 2 --timeout 900 \
  -E 'GigabyteDownloadAndUploadStayUnder64MiB|install\.find_package') || status=$?
if compgen -G "$logs/*" > /dev/null; then
  echo "sanitizer reports:" >&2
  for f in "$logs"/*; do echo "== $f" >&2; head -40 "$f" >&2; done
  exit 1
fi
exit "$status"
