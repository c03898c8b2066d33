#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-15 with AddressSanitizer and
# UndefinedBehaviorSanitizer) into build-fuzz/ and runs each for SECONDS
# (default 600). Fails on any crash, sanitizer report, leak, timeout or failed
# check; the input that caused it is saved under fuzz/regressions/TARGET/ (to
# commit once fixed: the ctest replay runs it from then on).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      # all targets by default
#   HEFT_FUZZ_JOBS=2 scripts/fuzz.sh 600       # two targets at a time
#
# Each target starts from its seeds (fuzz/corpus/TARGET) and regressions, and
# keeps what it finds in build-fuzz/corpus/TARGET, where later runs go on from.
# docs/fuzzing.md tells how to fold that back into fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
all=(request_head request_framing chunked_body response_head heftfile admin_json)
targets=("$@")
if ((${#targets[@]} == 0)); then targets=("${all[@]}"); fi
jobs="${HEFT_FUZZ_JOBS:-1}"

./scripts/install-deps.sh
# -O1 and line tables: a build of a few minutes, stack traces with lines.
cmake -S . -B build-fuzz -G Ninja -DHEFT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-15 \
  -DCMAKE_BUILD_TYPE=FuzzRun -DCMAKE_CXX_FLAGS_FUZZRUN="-O1 -gline-tables-only" >/dev/null
cmake --build build-fuzz -j "$(nproc)"

run_target() {
  local t="$1"
  local corpus="build-fuzz/corpus/$t" artifacts="build-fuzz/artifacts/$t" log="build-fuzz/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "fuzz/corpus/$t" "fuzz/regressions/$t" "$(dirname "$log")"
  rm -f "$artifacts"/*
  local status=0
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak or a
  # blow-up fails the run. Leaks are found by ASan at each input's end.
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "fuzz/corpus/$t" "fuzz/regressions/$t" >"$log" 2>&1 || status=$?
  # An input that merely ran long (slow-unit-*: over 10 s, on a busy machine)
  # is no failure; -timeout's timeout-* is.
  rm -f "$artifacts"/slow-unit-*
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if ((status != 0)) || compgen -G "$artifacts/*" >/dev/null; then
    mkdir -p "fuzz/regressions/$t"
    for f in "$artifacts"/*; do [[ -e "$f" ]] && cp "$f" "fuzz/regressions/$t/"; done
    echo "FAIL $t (exit $status, $runs inputs): log $log; inputs saved in fuzz/regressions/$t/" >&2
    grep -m1 -A12 -E 'fuzz check failed|ERROR: |runtime error' "$log" >&2 || tail -20 "$log" >&2
    return 1
  fi
  echo "ok   $t: $runs inputs in ${seconds}s, no crash, leak or failed check"
}

failed=0
pids=()
for t in "${targets[@]}"; do
  if [[ ! " ${all[*]} " == *" $t "* ]]; then echo "unknown target $t (${all[*]})" >&2; exit 2; fi
  run_target "$t" &
  pids+=($!)
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit "$failed"
