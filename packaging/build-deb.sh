#!/usr/bin/env bash
# Builds heft_VERSION_ARCH.deb from a build tree (`make deb` runs it):
#   packaging/build-deb.sh BUILD_DIR [OUT_DIR]
# BUILD_DIR holds heft, heft.1 and heft.bash-completion (cmake --build writes
# them); the package goes to OUT_DIR (default BUILD_DIR). Dependencies come
# from the libraries the binary links (dpkg-shlibdeps); the files it installs
# and why are listed in docs/install.md.
set -euo pipefail

source_dir=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "${1:?usage: build-deb.sh BUILD_DIR [OUT_DIR]}" && pwd)
out_dir=$(mkdir -p "${2:-$build_dir}" && cd "${2:-$build_dir}" && pwd)
packaging="$source_dir/packaging"

for built in heft heft.1 heft.bash-completion; do
  [[ -s "$build_dir/$built" ]] || { echo "build-deb.sh: $build_dir/$built is missing: build first (cmake --build $build_dir)" >&2; exit 1; }
done
version=$("$build_dir/heft" version | awk '{print $2}')
arch=$(dpkg --print-architecture)
# The changelog's date: the last commit's (a rebuild of the same tree gives the same package).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$source_dir" log -1 --format=%ct 2>/dev/null || date +%s)}
maintainer=${HEFT_DEB_MAINTAINER:-"heft maintainers <heft@heft.invalid>"}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/root"

# The program, stripped as dh_strip does.
install -D -m 0755 "$build_dir/heft" "$root/usr/bin/heft"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/heft"
# Configuration (conffiles, below).
install -D -m 0644 "$packaging/Heftfile" "$root/etc/heft/Heftfile"
install -D -m 0644 "$packaging/heft.logrotate" "$root/etc/logrotate.d/heft"
# The unit: /lib, not /usr/lib, in Debian 12 (dpkg's merged-/usr rule).
install -D -m 0644 "$packaging/heft.service" "$root/lib/systemd/system/heft.service"
# Manual page and completion, as the built heft wrote them.
install -d "$root/usr/share/man/man1"
gzip -9n < "$build_dir/heft.1" > "$root/usr/share/man/man1/heft.1.gz"
chmod 0644 "$root/usr/share/man/man1/heft.1.gz"
install -D -m 0644 "$build_dir/heft.bash-completion" "$root/usr/share/bash-completion/completions/heft"
# Documentation.
doc="$root/usr/share/doc/heft"
install -D -m 0644 "$packaging/copyright" "$doc/copyright"
for page in README.md docs/install.md docs/heftfile.md docs/admin.md docs/proxy.md docs/health.md; do
  install -m 0644 "$source_dir/$page" "$doc/$(basename "$page")"
done
{
  printf 'heft (%s) unstable; urgency=medium\n\n' "$version"
  printf '  * heft %s, built from its source tree (packaging/build-deb.sh).\n\n' "$version"
  printf ' -- %s  %s\n' "$maintainer" "$(date -R -u -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
# State (StateDirectory) and logs (LogsDirectory); postinst gives them to heft.
install -d -m 0755 "$root/var/lib/heft" "$root/var/log/heft"

# Depends: what the binary links (dpkg-shlibdeps reads debian/control).
mkdir -p "$work/debian"
printf 'Source: heft\n\nPackage: heft\nArchitecture: any\n' > "$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O -e root/usr/bin/heft 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[[ -n "$shlibs" ]] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

install -d -m 0755 "$root/DEBIAN"
for script in postinst prerm postrm; do install -m 0755 "$packaging/$script" "$root/DEBIAN/$script"; done
printf '/etc/heft/Heftfile\n/etc/logrotate.d/heft\n' > "$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: heft
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $shlibs, adduser, init-system-helpers (>= 1.52)
Recommends: logrotate
Section: httpd
Priority: optional
Description: weighted load balancer and HTTP/1.1 reverse proxy
 heft splits HTTP traffic among backends by weight, smoothly and exactly
 (smooth weighted round robin across worker threads), with health checks,
 slow start, adaptive weights and per-backend connection limits. A Caddy
 compatible JSON admin API takes weight and configuration changes live, and a
 simulator shows beforehand what a policy will do.
 .
 This package runs heft as a systemd service (heft.service) serving
 /etc/heft/Heftfile, which as shipped serves a demo split on 127.0.0.1:8080.
CONTROL

package="$out_dir/heft_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$package" >/dev/null
echo "$package"
