#!/usr/bin/env bash
# Installs the Debian package on this machine with apt-get, runs the unit's
# ExecStart and ExecReload lines as the heft user with only
# CAP_NET_BIND_SERVICE (as systemd would; PID 1 need not be systemd), then
# removes and purges it and checks what each leaves. Needs root and a machine
# without the heft package; undoes everything it did (the heft user included,
# if it made it). Not in the default test run (ctest -DHEFT_TEST_PACKAGE_INSTALL=ON):
#   sudo tests/package/install_test.sh BUILD_DIR
set -uo pipefail

source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=$(cd "${1:?usage: install_test.sh BUILD_DIR}" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
[[ $(id -u) -eq 0 ]] || { echo "FAIL: needs root (it installs a package)"; exit 1; }
if dpkg-query -W -f='${Status}' heft 2>/dev/null | grep -q installed; then
  echo "FAIL: a heft package is installed here already: not touching it"
  exit 1
fi
user_existed=$(getent passwd heft || true)
work=$(mktemp -d /tmp/heft-install-XXXXXX)
heft_pid=""
cleanup() {
  [[ -n "$heft_pid" ]] && kill -KILL "$heft_pid" 2>/dev/null
  if dpkg-query -W -f='${Status}' heft 2>/dev/null | grep -qv "not-installed"; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq heft >/dev/null 2>&1
  fi
  if [[ -z "$user_existed" ]] && getent passwd heft >/dev/null; then deluser --system --quiet heft >/dev/null 2>&1; fi
  if [[ -z "$user_existed" ]] && getent group heft >/dev/null; then delgroup --system --quiet heft >/dev/null 2>&1; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Waits up to $1 seconds for the command after it to succeed.
within() {
  local seconds=$1
  shift
  local end=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.2
  done
}
# The X-Backend counts of $2 requests to $1, as "a=5 b=3 c=2".
split_of() {
  local url=$1 n=$2
  for ((i = 0; i < n; i++)); do curl -s -m 5 -o /dev/null -D - "$url" | tr -d '\r' | sed -n 's/^X-Backend: //p'; done |
    sort | uniq -c | awk '{printf "%s%s=%s", (NR > 1 ? " " : ""), $2, $1}'
}

deb=$("$source_dir/packaging/build-deb.sh" "$build_dir" "$work") || { echo "FAIL: build-deb.sh"; exit 1; }

# Install, with its dependencies.
if out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb" 2>&1); then pass "apt-get install $(basename "$deb")"; else
  echo "$out"
  echo "FAIL: apt-get install"
  exit 1
fi
[[ "$(heft version)" == "heft $(dpkg-deb -f "$deb" Version) "* ]] && pass "heft version: $(heft version)" || fail "heft version: $(heft version 2>&1)"
listed=$(dpkg -L heft)
for path in /usr/bin/heft /etc/heft/Heftfile /lib/systemd/system/heft.service /etc/logrotate.d/heft \
  /usr/share/man/man1/heft.1.gz /usr/share/bash-completion/completions/heft /var/lib/heft /var/log/heft; do
  grep -qx "$path" <<<"$listed" && pass "dpkg -L lists $path" || fail "dpkg -L lacks $path"
done
passwd=$(getent passwd heft)
IFS=: read -r _ _ heft_uid _ _ heft_home heft_shell <<<"$passwd"
((heft_uid > 0 && heft_uid < 1000)) && [[ $heft_shell == */nologin && $heft_home == /var/lib/heft ]] &&
  pass "system user heft ($passwd)" || fail "user heft: $passwd"
[[ "$(stat -c '%U:%G %a' /var/lib/heft)" == "heft:heft 750" ]] && pass "/var/lib/heft heft:heft 750" || fail "/var/lib/heft: $(stat -c '%U:%G %a' /var/lib/heft)"
[[ "$(stat -c '%U:%G %a' /var/log/heft)" == "heft:adm 750" ]] && pass "/var/log/heft heft:adm 750" || fail "/var/log/heft: $(stat -c '%U:%G %a' /var/log/heft)"
# Without systemd as PID 1: enabled for a later boot, not started.
[[ -L /etc/systemd/system/multi-user.target.wants/heft.service ]] && pass "unit enabled" || fail "unit not enabled"
if [[ ! -d /run/systemd/system ]]; then
  pgrep -u heft >/dev/null && fail "a process of heft's runs though systemd does not" || pass "nothing started (PID 1 is not systemd)"
fi

# The shipped Heftfile, moved to its own loopback address and a port below
# 1024 (this machine's 8080 and 2019 may be in use by other tests).
ip="127.0.0.$((RANDOM % 200 + 20))"
port=80
sed -i -e "s/127\.0\.0\.1:8080/$ip:$port/g" -e "s/127\.0\.0\.1:/$ip:/g" /etc/heft/Heftfile
unit=/lib/systemd/system/heft.service
read -r -a exec_start <<<"$(sed -n 's/^ExecStart=//p' "$unit")"
read -r -a exec_reload <<<"$(sed -n 's/^ExecReload=//p' "$unit")"
as_heft=(setpriv --reuid heft --regid heft --init-groups)
with_cap=(--inh-caps +net_bind_service --ambient-caps +net_bind_service)

# Without the capability, port 80 is refused: the capability is what serves it.
if out=$(cd / && STATE_DIRECTORY=/var/lib/heft timeout 20 "${as_heft[@]}" -- "${exec_start[@]}" 2>&1); then
  fail "ExecStart without CAP_NET_BIND_SERVICE served port $port"
else
  grep -q "Permission denied" <<<"$out" && pass "without the capability: $(grep -m1 'Permission denied' <<<"$out")" ||
    fail "without the capability: $out"
fi

# The unit's ExecStart as heft with only CAP_NET_BIND_SERVICE.
(cd / && STATE_DIRECTORY=/var/lib/heft exec "${as_heft[@]}" "${with_cap[@]}" -- "${exec_start[@]}") >"$work/heft.log" 2>&1 &
heft_pid=$!
if within 20 curl -s -m 2 -o /dev/null "http://$ip:$port/"; then pass "ExecStart serves http://$ip:$port/ as heft"; else
  fail "ExecStart did not serve; log:
$(cat "$work/heft.log")"
fi
[[ "$(stat -c %U /proc/$heft_pid 2>/dev/null)" == heft ]] && pass "it runs as heft" || fail "it runs as $(stat -c %U /proc/$heft_pid 2>&1)"
caps=$(grep CapEff "/proc/$heft_pid/status" | awk '{print $2}')
[[ $caps == 0000000000000400 ]] && pass "effective capabilities: CAP_NET_BIND_SERVICE only" || fail "CapEff $caps"
split=$(split_of "http://$ip:$port/" 10)
[[ $split == "a=5 b=3 c=2" ]] && pass "the demo split: $split" || fail "split $split; log:
$(cat "$work/heft.log")"
ls /var/lib/heft/*.json >/dev/null 2>&1 && [[ "$(stat -c %U /var/lib/heft/*.json | sort -u)" == heft ]] &&
  pass "state file in /var/lib/heft: $(ls /var/lib/heft | tr '\n' ' ')" || fail "no state file of heft's in /var/lib/heft: $(ls -la /var/lib/heft)"
[[ "$(wc -l </var/log/heft/access.log)" -ge 10 && "$(stat -c %U /var/log/heft/access.log)" == heft ]] &&
  pass "access log /var/log/heft/access.log" || fail "access log: $(ls -la /var/log/heft)"
# What logrotate does: rename, SIGUSR1, and heft writes a new file.
mv /var/log/heft/access.log /var/log/heft/access.log.1
kill -USR1 "$heft_pid"
reopened() { curl -s -m 2 -o /dev/null "http://$ip:$port/" && [[ -s /var/log/heft/access.log ]]; }
within 10 reopened && pass "SIGUSR1 reopens the access log" || fail "no new access.log after SIGUSR1"

# A broken file: SIGHUP and the unit's ExecReload both keep the old configuration serving.
cp /etc/heft/Heftfile "$work/Heftfile.good"
printf '%s:%s {\n\treverse_proxy {\n' "$ip" "$port" >>/etc/heft/Heftfile
kill -HUP "$heft_pid"
within 10 grep -q "keeping the old configuration" "$work/heft.log" && pass "SIGHUP with a broken file: kept the old configuration" ||
  fail "SIGHUP: $(tail -5 "$work/heft.log")"
split=$(split_of "http://$ip:$port/" 10)
[[ $split == "a=5 b=3 c=2" ]] && pass "after SIGHUP, still $split" || fail "after SIGHUP: $split"
if out=$(cd / && "${as_heft[@]}" -- "${exec_reload[@]}" 2>&1); then fail "ExecReload of a broken file succeeded: $out"; else
  grep -q "Heftfile:[0-9]" <<<"$out" && pass "ExecReload of a broken file fails: $(head -1 <<<"$out")" || fail "ExecReload: $out"
fi
split=$(split_of "http://$ip:$port/" 10)
[[ $split == "a=5 b=3 c=2" ]] && pass "after ExecReload, still $split" || fail "after ExecReload: $split"
# A good file with b and c drained (weight 0): ExecReload applies it.
sed -e 's/weight [23]$/weight 0/' "$work/Heftfile.good" >/etc/heft/Heftfile
if out=$(cd / && "${as_heft[@]}" -- "${exec_reload[@]}" 2>&1); then pass "ExecReload of a good file"; else fail "ExecReload: $out"; fi
split=$(split_of "http://$ip:$port/" 10)
[[ $split == "a=10" ]] && pass "reloaded, b and c drained: $split" || fail "after a good reload: $split"

kill -TERM "$heft_pid"
within 20 sh -c "! kill -0 $heft_pid 2>/dev/null" && wait "$heft_pid"
rc=$?
heft_pid=""
[[ $rc -eq 0 ]] && pass "SIGTERM: stopped, exit 0" || fail "stop: exit $rc; $(tail -3 "$work/heft.log")"

# Remove: the program goes; configuration, state and logs stay.
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq heft >/dev/null 2>&1 || fail "apt-get remove"
[[ ! -e /usr/bin/heft && -f /etc/heft/Heftfile ]] && ls /var/lib/heft/*.json >/dev/null 2>&1 && [[ -e /var/log/heft/access.log ]] &&
  pass "remove: /usr/bin/heft gone; /etc/heft/Heftfile, /var/lib/heft and /var/log/heft kept" ||
  fail "remove left: $(ls -d /usr/bin/heft /etc/heft/Heftfile /var/lib/heft/* /var/log/heft 2>&1)"
# Purge: nothing of it is left (but the heft user, as Debian's practice is).
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq heft >/dev/null 2>&1 || fail "apt-get purge"
left=$(ls -d /etc/heft /var/lib/heft /var/log/heft /etc/logrotate.d/heft /lib/systemd/system/heft.service \
  /etc/systemd/system/multi-user.target.wants/heft.service /var/lib/systemd/deb-systemd-helper-enabled/heft.service \
  /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/heft.service 2>/dev/null)
[[ -z "$left" ]] && pass "purge: nothing left" || fail "purge left: $left"
dpkg-query -W -f='${Status}' heft 2>/dev/null | grep -q "not-installed" || ! dpkg-query -W heft >/dev/null 2>&1 &&
  pass "dpkg knows no heft" || fail "dpkg: $(dpkg-query -W -f='${Status}' heft)"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "install checks passed"
