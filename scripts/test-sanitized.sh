#!/usr/bin/env bash
# Runs the tests under sanitizers; fails if a test fails or if any process
# (the tests, and every heft they start) reported a sanitizer error. Not part
# of CI (README gives the times).
#
#   scripts/test-sanitized.sh          # the whole suite under AddressSanitizer and
#                                      # UndefinedBehaviorSanitizer, in build-sanitized/
#   scripts/test-sanitized.sh --tsan   # the threaded tests (THREADED below) under
#                                      # ThreadSanitizer, in build-tsan/
#
# Left out under ASan: GigabyteDownloadAndUploadStayUnder64MiB (ASan's shadow
# memory is part of RSS) and install.find_package (its example builds without
# the sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests whose code runs on several threads at once: the admin API and its
# server, health checks, the access log writer, metrics, the demo backend's
# workers, pools and their snapshots and counters, the balancer under
# concurrent picks, and whole heft processes (workers, admin and health
# threads) being reloaded, changed through the API and stopped under load.
THREADED=(
  AccessLog AdminApiTest AdminProxy DemoBackendTest HealthChecking HealthProbe Metrics
  CachedSnapshot CounterSlots PlaceQueue PoolAdaptive PoolSlowStart
  WeightedRoundRobin MaxConns
  ProxyLifecycle AdminProcessTest LiveChanges HealthChecks ProxyWeights ResponseBody MetricsAndAccessLog
)

mode=asan
if [[ "${1:-}" == "--tsan" ]]; then mode=tsan; fi
./scripts/install-deps.sh

if [[ $mode == asan ]]; then
  dir=build-sanitized
  flags="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEFT_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
  ninja -C "$dir"
  select=(-E 'GigabyteDownloadAndUploadStayUnder64MiB|install\.find_package')
else
  dir=build-tsan
  flags="-O1 -g -fsanitize=thread -fno-omit-frame-pointer"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEFT_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread"
  ninja -C "$dir" heft weighted_next heft_balance_tests heft_upstream_tests heft_proxy_tests heft_integration_tests
  regex="^($(IFS='|'; echo "${THREADED[*]}"))\\."
  select=(-R "$regex")
fi

logs="$(pwd)/$dir/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1"
# second_deadlock_stack: both stacks of a lock-order inversion.
export TSAN_OPTIONS="log_path=$logs/tsan:second_deadlock_stack=1:suppressions=$(pwd)/scripts/tsan.supp"
# The sanitized builds run several times slower: each test's own deadline
# (tests/test_deadline.h) follows ctest's.
export HEFT_TEST_DEADLINE_SECONDS=850
status=0
(cd "$dir" && ctest --output-on-failure -j 2 --timeout 900 "${select[@]}") || status=$?
if compgen -G "$logs/*" > /dev/null; then
  echo "sanitizer reports:" >&2
  for f in "$logs"/*; do echo "== $f" >&2; head -60 "$f" >&2; done
  exit 1
fi
exit "$status"
