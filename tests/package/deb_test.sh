#!/usr/bin/env bash
# Builds the Debian package from a build tree and inspects it, installing
# nothing: its files, conffiles, Depends, maintainer scripts, the unit
# (systemd-analyze verify), the default Heftfile (heft validate) and lintian
# (no error). ctest runs it (package.deb); by hand:
#   tests/package/deb_test.sh BUILD_DIR
set -uo pipefail

source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=$(cd "${1:?usage: deb_test.sh BUILD_DIR}" && pwd)
work=$(mktemp -d /tmp/heft-deb-XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

deb=$("$source_dir/packaging/build-deb.sh" "$build_dir" "$work") || { echo "FAIL: build-deb.sh"; exit 1; }
version=$("$build_dir/heft" version | awk '{print $2}')
[[ "$(basename "$deb")" == "heft_${version}_$(dpkg --print-architecture).deb" ]] && pass "named $(basename "$deb")" ||
  fail "package named $(basename "$deb")"

# Contents: every file the package promises, owned by root.
contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/heft ./etc/heft/Heftfile ./lib/systemd/system/heft.service ./etc/logrotate.d/heft \
  ./usr/share/man/man1/heft.1.gz ./usr/share/bash-completion/completions/heft ./usr/share/doc/heft/copyright \
  ./usr/share/doc/heft/changelog.gz ./usr/share/doc/heft/install.md ./var/lib/heft/ ./var/log/heft/; do
  grep -qE " ${path//./\\.}\$" <<<"$contents" && pass "contains $path" || fail "no $path in the package"
done
grep -v ' root/root ' <<<"$contents" | grep -q . && fail "files not owned by root:
$(grep -v ' root/root ' <<<"$contents")" || pass "every file root/root"
grep -q '^-rwxr-xr-x .* ./usr/bin/heft$' <<<"$contents" && pass "heft is 0755" || fail "heft's mode"

# Control: conffiles exactly; Depends from the linked libraries.
dpkg-deb -e "$deb" "$work/control"
[[ "$(cat "$work/control/conffiles")" == $'/etc/heft/Heftfile\n/etc/logrotate.d/heft' ]] && pass "conffiles" ||
  fail "conffiles: $(cat "$work/control/conffiles")"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in $(ldd "$build_dir/heft" | awk '$3 ~ /^\// {print $3}'); do
  owner=$(dpkg -S "$(realpath "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || owner=""
  [[ -z "$owner" ]] && owner=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1)
  [[ -n "$owner" ]] || { fail "no package owns $lib"; continue; }
  sed 's/, /\n/g' <<<"$depends" | awk '{print $1}' | grep -qxF "$owner" && pass "Depends names $owner ($(basename "$lib"))" ||
    fail "Depends lacks $owner for $lib: $depends"
done
for dep in adduser init-system-helpers; do
  grep -q "$dep" <<<"$depends" && pass "Depends names $dep" || fail "Depends lacks $dep"
done

# Maintainer scripts: valid sh, Debian's systemd helpers, purge-only removal of state.
for script in postinst prerm postrm; do
  [[ -x "$work/control/$script" ]] || { fail "$script missing or not executable"; continue; }
  sh -n "$work/control/$script" && pass "$script parses" || fail "$script does not parse"
  grep -q '^set -e' "$work/control/$script" || fail "$script lacks set -e"
  grep -qE '(^|[^-])systemctl (start|stop|restart|enable)' "$work/control/$script" &&
    fail "$script calls systemctl directly (deb-systemd-invoke/-helper do that)"
done
grep -q 'deb-systemd-helper enable heft.service' "$work/control/postinst" && pass "postinst enables heft.service" ||
  fail "postinst does not enable the unit"
grep -q 'deb-systemd-invoke $_action heft.service' "$work/control/postinst" &&
  grep -q '\[ -d /run/systemd/system \]' "$work/control/postinst" && pass "postinst starts it under systemd only" ||
  fail "postinst start"
grep -q 'adduser --system' "$work/control/postinst" && pass "postinst adds the heft system user" || fail "no adduser"
grep -q 'deb-systemd-invoke stop heft.service' "$work/control/prerm" && pass "prerm stops the unit" || fail "prerm stop"
# postrm: /var/lib/heft goes in the purge branch and nowhere else. Run it in a
# scratch root (its paths prefixed) to see what each action removes.
for action in remove purge; do
  scratch="$work/scratch-$action"
  mkdir -p "$scratch/var/lib/heft" "$scratch/var/log/heft" "$scratch/run/systemd"
  touch "$scratch/var/lib/heft/Heftfile-1.json" "$scratch/var/log/heft/access.log"
  sed -e "s| /var/| $scratch/var/|g" -e "s|/run/systemd/system|$scratch/run/systemd/system|g" \
    -e "s|/usr/bin/deb-systemd-helper|$scratch/none|g" "$work/control/postrm" > "$scratch/postrm"
  sh "$scratch/postrm" "$action" || fail "postrm $action exited $?"
  if [[ $action == remove ]]; then
    [[ -e "$scratch/var/lib/heft/Heftfile-1.json" ]] && pass "postrm remove keeps /var/lib/heft" || fail "postrm remove took /var/lib/heft"
  else
    [[ ! -e "$scratch/var/lib/heft" && ! -e "$scratch/var/log/heft" ]] && pass "postrm purge removes /var/lib/heft and /var/log/heft" ||
      fail "postrm purge left state or logs"
  fi
done

# The unit, checked offline against the package's own tree.
dpkg-deb -x "$deb" "$work/root"
unit="$work/root/lib/systemd/system/heft.service"
grep -q '^ExecStart=/usr/bin/heft run --config /etc/heft/Heftfile --resume$' "$unit" && pass "ExecStart" || fail "ExecStart"
for setting in Type=notify User=heft AmbientCapabilities=CAP_NET_BIND_SERVICE NoNewPrivileges=yes ProtectSystem=strict \
  ProtectHome=yes PrivateTmp=yes StateDirectory=heft 'ReadWritePaths=/var/lib/heft /var/log/heft' \
  SystemCallFilter=@system-service Restart=on-failure; do
  grep -qx "$setting" "$unit" && pass "unit: $setting" || fail "unit lacks $setting"
done
# Its ExecStart and ExecReload name /usr/bin/heft, which verify wants to
# find: a copy names the extracted one.
mkdir -p "$work/unit"
sed "s|/usr/bin/heft|$work/root/usr/bin/heft|g" "$unit" > "$work/unit/heft.service"
if verify=$(systemd-analyze verify --man=no "$work/unit/heft.service" 2>&1) && [[ -z "$verify" ]]; then
  pass "systemd-analyze verify: clean"
else
  fail "systemd-analyze verify:
$verify"
fi

# The default Heftfile is valid, as the packaged heft reads it (its access
# log moved into a scratch directory: validate opens it, and this machine
# need not have /var/log/heft).
mkdir -p "$work/log"
sed "s|/var/log/heft/|$work/log/|" "$work/root/etc/heft/Heftfile" > "$work/Heftfile"
if out=$("$work/root/usr/bin/heft" validate "$work/Heftfile" 2>&1); then pass "default Heftfile valid"; else
  fail "default Heftfile: $out"; fi
grep -q '127.0.0.1:8080' "$work/root/etc/heft/Heftfile" && pass "default site on 127.0.0.1:8080" || fail "default site port"

# The manual page renders without a warning; it covers every command.
if warnings=$(zcat "$work/root/usr/share/man/man1/heft.1.gz" | groff -man -ww -z 2>&1) && [[ -z "$warnings" ]]; then
  pass "heft.1 renders cleanly"; else fail "heft.1: $warnings"; fi
for command in run validate reload stop version; do
  zgrep -q "^\.SS \"heft $command\"" "$work/root/usr/share/man/man1/heft.1.gz" && pass "heft.1 covers heft $command" ||
    fail "heft.1 lacks heft $command"
done
# The completion, with bash-completion's two helpers stubbed: commands, options, files.
completion="$work/root/usr/share/bash-completion/completions/heft"
completes() {  # completes "WORDS..." EXPECTED
  local got
  got=$(bash -c '_init_completion() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; cword=$COMP_CWORD; words=("${COMP_WORDS[@]}"); }
    _filedir() { COMPREPLY=("<files>"); }
    complete() { :; }
    source "$1"; read -r -a COMP_WORDS <<<"$2"; [[ $2 == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _heft; echo "${COMPREPLY[*]}"' _ "$completion" "$1")
  [[ $got == "$2" ]] && pass "completion of \"$1\": $got" || fail "completion of \"$1\": \"$got\", not \"$2\""
}
completes "heft rel" "reload"
completes "heft reload --dr" "--dry-run"
completes "heft run --config " "<files>"
completes "heft help valid" "validate"

# lintian: no error (warnings are listed and justified in docs/install.md).
lintian_out=$(lintian --fail-on error --tag-display-limit 0 "$deb" 2>&1)
lintian_rc=$?
echo "$lintian_out" | sed 's/^/  lintian: /'
[[ $lintian_rc -eq 0 ]] && pass "lintian: no error" || fail "lintian exited $lintian_rc"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "package checks passed"
