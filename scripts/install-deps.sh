#!/usr/bin/env bash
# Installs every Debian 12 package heft's build, tests and benchmarks need.
# Idempotent and non-interactive: safe to run on every CI start.
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build pkg-config git
  libboost1.81-dev            # Asio (C++20 coroutines) + Beast (HTTP/1.1) for the proxy
  libssl-dev                  # OpenSSL, used by Asio/Beast
  nlohmann-json3-dev          # JSON config model, admin API, --json output
  libcli11-dev                # the `heft` command line
  libfmt-dev                  # formatting
  libnghttp2-dev              # HTTP/2 from clients (src/proxy/http2_*)
  nghttp2-client python3-h2   # HTTP/2 tests: nghttp, h2load, raw frames for the attack tests
  libgtest-dev libgmock-dev   # unit and integration tests
  libbenchmark-dev            # micro-benchmarks in bench/
  python3 curl procps         # test drivers and process checks
  clang-15 libfuzzer-15-dev   # fuzz targets (scripts/fuzz.sh, fuzz/)
  dpkg-dev lintian            # make deb: dpkg-shlibdeps, dpkg-deb; the package's checks
  systemd adduser logrotate   # systemd-analyze verify, and the package's install test
)
peers=(nginx-light haproxy caddy wrk   # benchmark peers, only with --bench
       linux-perf                      # profiles, and bench/shapes --syscalls
       valgrind)                       # bench/instructions (callgrind)

want=("${packages[@]}")
if [[ "${1:-}" == "--bench" ]]; then want+=("${peers[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
