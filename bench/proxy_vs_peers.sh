#!/usr/bin/env bash
# Throughput of heft beside nginx and HAProxy on the same machine, the same
# three demo backends (weights 5:3:2) and the same worker count, driven by wrk
# over keep-alive connections. Prints a Markdown table with ratios to nginx.
#
#   bench/proxy_vs_peers.sh [--workers N] [--connections C] [--duration S] [--rounds R]
#
# Everything listens on 127.0.0.1; every process started here is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=1 connections=64 duration=10 rounds=3
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
heft=build/heft
for tool in wrk nginx haproxy; do
  command -v $tool >/dev/null || { echo "$tool missing: run scripts/install-deps.sh --bench" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }

# Three backends, one event-loop thread each.
declare -a bports
for name in a b c; do
  port=$(free_port)
  $heft demo-backend --listen 127.0.0.1:$port --name $name --body-bytes 1024 >/dev/null 2>&1 &
  pids+=($!)
  bports+=($port)
done
for p in "${bports[@]}"; do wait_port $p; done

heft_port=$(free_port) nginx_port=$(free_port) haproxy_port=$(free_port)
cat > $work/Heftfile <<HEFT
{
	admin off
	workers $workers
}
:$heft_port {
	reverse_proxy {
		to 127.0.0.1:${bports[0]} weight 5
		to 127.0.0.1:${bports[1]} weight 3
		to 127.0.0.1:${bports[2]} weight 2
		keepalive 64
	}
}
HEFT
mkdir -p $work/nginx
cat > $work/nginx/nginx.conf <<NGINX
worker_processes $workers;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream pool {
    server 127.0.0.1:${bports[0]} weight=5;
    server 127.0.0.1:${bports[1]} weight=3;
    server 127.0.0.1:${bports[2]} weight=2;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$nginx_port reuseport;
    location / {
      proxy_pass http://pool;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
cat > $work/haproxy.cfg <<HAPROXY
global
  nbthread $workers
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$haproxy_port
  default_backend be
backend be
  balance roundrobin
  http-reuse always
  server a 127.0.0.1:${bports[0]} weight 5
  server b 127.0.0.1:${bports[1]} weight 3
  server c 127.0.0.1:${bports[2]} weight 2
HAPROXY

$heft run --config $work/Heftfile >$work/heft.log 2>&1 &
pids+=($!)
nginx -c $work/nginx/nginx.conf -p $work/nginx >/dev/null 2>&1 &
pids+=($!)
haproxy -f $work/haproxy.cfg >/dev/null 2>&1 &
pids+=($!)
wait_port $heft_port; wait_port $nginx_port; wait_port $haproxy_port

# One wrk run: prints "requests_per_second p50_ms p99_ms".
measure() {
  wrk -t1 -c$connections -d${duration}s --latency http://127.0.0.1:$1/ > $work/wrk.out 2>&1
  awk '
    /Requests\/sec/ {rps=$2}
    function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
    $1=="50%" {p50=ms($2)} $1=="99%" {p99=ms($2)}
    END {printf "%s %.2f %.2f\n", rps, p50, p99}' $work/wrk.out
}

declare -A total_rps total_p99
for peer in heft nginx haproxy; do total_rps[$peer]=0; total_p99[$peer]=0; done
for round in $(seq $rounds); do
  # Interleave peers in every round so drift on a shared machine hits all alike.
  for peer in heft nginx haproxy; do
    case $peer in heft) port=$heft_port ;; nginx) port=$nginx_port ;; haproxy) port=$haproxy_port ;; esac
    read rps p50 p99 < <(measure $port)
    echo "round $round $peer: $rps req/s, p50 $p50 ms, p99 $p99 ms" >&2
    total_rps[$peer]=$(python3 -c "print(${total_rps[$peer]} + $rps)")
    total_p99[$peer]=$(python3 -c "print(${total_p99[$peer]} + $p99)")
  done
done

echo
echo "wrk -t1 -c$connections -d${duration}s, $workers worker(s) each, 3 demo backends 5:3:2, mean of $rounds interleaved rounds"
echo
echo "| proxy | req/s | vs nginx | p99 ms |"
echo "|---|---:|---:|---:|"
for peer in heft nginx haproxy; do
  python3 -c "
r=${total_rps[$peer]}/$rounds; n=${total_rps[nginx]}/$rounds; p=${total_p99[$peer]}/$rounds
print(f'| $peer | {r:,.0f} | {r/n:.2f} | {p:.2f} |')"
done
