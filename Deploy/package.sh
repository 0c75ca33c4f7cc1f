#!/usr/bin/env bash
# Builds AssetDepot's Debian package: OUTDIR/assetdepot_<version>_<arch>.deb
#
#   Deploy/package.sh [--skip-build] OUTDIR
#
# From the release build of depot, linked with the Swift runtime inside it (--static-swift-stdlib),
# so that the package needs no Swift toolchain: only Debian's own libraries, named in Depends: by
# dpkg-shlibdeps (package dpkg-dev). --skip-build (or DEPOT_PACKAGE_SKIP_BUILD=1) packages the
# .build/release/depot already there, as an earlier run built it (the script refuses a build that
# links a Swift runtime library from the toolchain).
# Needs dpkg-deb, dpkg-shlibdeps and ldd; run it as any user (files are owned by root in the
# package). Installs:
#   /usr/bin/depot
#   /usr/share/assetdepot/Public                       the dashboard (found by `depot serve`)
#   /lib/systemd/system/assetdepot.service             not enabled, not started
#   /usr/lib/sysusers.d/assetdepot.conf                the service user, made at install
#   /etc/nginx/sites-available/assetdepot              the edge's site, to enable (conffile)
#   /etc/nginx/snippets/assetdepot-locations.conf      its location rules (conffile)
#   /usr/share/doc/assetdepot/                         Deploy/README.md, SECURITY.md, CHANGELOG.md
# See Deploy/README.md, "Install the origin"; Deploy/package-test.sh installs it and checks it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

skip=${DEPOT_PACKAGE_SKIP_BUILD:-0}
out=""
for argument in "$@"; do
  case "$argument" in
    --skip-build) skip=1 ;;
    -*) echo "usage: Deploy/package.sh [--skip-build] OUTDIR" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "usage: Deploy/package.sh [--skip-build] OUTDIR" >&2; exit 2; }; out=$argument ;;
  esac
done
[ -n "$out" ] || { echo "usage: Deploy/package.sh [--skip-build] OUTDIR" >&2; exit 2; }
for tool in dpkg-deb dpkg-shlibdeps ldd; do
  command -v $tool >/dev/null || { echo "error: $tool is missing (apt-get install dpkg-dev)" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"

if [ "$skip" != 1 ]; then
  # Foundation's networking, linked in with the Swift runtime, asks the linker for libcurl
  # (-lcurl): the runtime library of Debian's libcurl4 is enough, through a link named as the
  # linker looks for it, so no -dev package is needed (the package then depends on libcurl4).
  curl=$(dpkg -L "libcurl4:$(dpkg --print-architecture)" 2>/dev/null | grep '/libcurl\.so\.4$' | head -n 1)
  [ -n "$curl" ] || { echo "error: libcurl4 is not installed (apt-get install libcurl4)" >&2; exit 1; }
  mkdir -p .build/package-libs
  ln -sfn "$curl" .build/package-libs/libcurl.so
  swift build -c release --product depot --static-swift-stdlib -Xlinker -L"$root/.build/package-libs"
fi
binary=$root/.build/release/depot
[ -x "$binary" ] || { echo "error: no $binary: run Deploy/package.sh without --skip-build" >&2; exit 1; }

# The binary must need nothing but Debian's libraries: no Swift runtime from the toolchain.
from_debian() {  # from_debian LIBRARY: a package installed here owns the file (by its path or its link's)
  [ "$1" != not ] && { dpkg -S "$1" >/dev/null 2>&1 || dpkg -S "$(readlink -f "$1")" >/dev/null 2>&1; }
}
for library in $(ldd "$binary" | awk '/=>/ { print $3 }'); do
  if ! from_debian "$library"; then
    echo "error: $binary links ${library/#not/a library not found}, which no Debian package installed here provides" >&2
    echo "       (a Swift runtime library: run Deploy/package.sh without --skip-build, which links it in)" >&2
    ldd "$binary" >&2
    exit 1
  fi
done

version=$("$binary" --version)
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([~+.-][0-9A-Za-z.+~-]*)?$ ]] || { echo "error: depot --version printed '$version', not a version" >&2; exit 1; }
arch=$(dpkg --print-architecture)
deb="$out/assetdepot_${version}_${arch}.deb"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
package=$stage/assetdepot
umask 022
install -D -m 0755 "$binary" "$package/usr/bin/depot"
# The symbol table stays (Swift's crash backtraces name functions with it); debugging sections go.
strip --strip-debug "$package/usr/bin/depot"
mkdir -p "$package/usr/share/assetdepot"
cp -R Public "$package/usr/share/assetdepot/Public"
find "$package/usr/share/assetdepot" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
install -D -m 0644 Deploy/systemd/assetdepot.service "$package/lib/systemd/system/assetdepot.service"
install -D -m 0644 Deploy/systemd/assetdepot.sysusers "$package/usr/lib/sysusers.d/assetdepot.conf"
install -D -m 0644 Deploy/nginx/sites-available/assetdepot "$package/etc/nginx/sites-available/assetdepot"
install -D -m 0644 Deploy/nginx/snippets/assetdepot-locations.conf "$package/etc/nginx/snippets/assetdepot-locations.conf"
for doc in Deploy/README.md Deploy/SECURITY.md CHANGELOG.md; do
  install -D -m 0644 "$doc" "$package/usr/share/doc/assetdepot/$(basename "$doc")"
done

# Depends: what dpkg-shlibdeps finds the binary linked against (versions from Debian's symbols
# files), then the tools the maintainer scripts call.
mkdir -p "$stage/debian"
printf 'Source: assetdepot\n\nPackage: assetdepot\nArchitecture: any\n' > "$stage/debian/control"
shlibs=$(cd "$stage" && dpkg-shlibdeps -O "assetdepot/usr/bin/depot" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
for needed in libmicrohttpd12 libssl3 libc6; do
  [[ ", $shlibs" == *", $needed "* || ", $shlibs" == *", $needed,"* || ", $shlibs" == *", $needed" ]] \
    || { echo "error: dpkg-shlibdeps did not name $needed: '$shlibs'" >&2; exit 1; }
done
depends="$shlibs, adduser | systemd"

mkdir -p "$package/DEBIAN"
cat > "$package/DEBIAN/control" <<CONTROL
Package: assetdepot
Version: $version
Architecture: $arch
Maintainer: ${DEPOT_PACKAGE_MAINTAINER:-AssetDepot maintainers <maintainers@users.noreply.a-seed-b5af2b80.example>}
Installed-Size: $(du -sk --exclude=DEBIAN "$package" | cut -f1)
Depends: $depends
Suggests: nginx
Section: net
Priority: optional
Description: self-hosted origin for Apple Background Assets
 AssetDepot serves asset packs, signed manifests and releases to Apple devices
 (Background Assets), with the depot command line for publishers and operators.
 This package installs the origin (depot), its dashboard, a systemd unit that is
 not started until the operator sets its public URL, and an nginx edge site for
 Debian's nginx layout. See /usr/share/doc/assetdepot/README.md.
CONTROL

cat > "$package/DEBIAN/conffiles" <<'CONFFILES'
/etc/nginx/sites-available/assetdepot
/etc/nginx/snippets/assetdepot-locations.conf
CONFFILES

cat > "$package/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
# assetdepot postinst: the service user and its data folder. The service is not started: set
# DEPOT_PUBLIC_URL first (systemctl edit assetdepot), then systemctl enable --now assetdepot.
set -e
if [ "$1" = configure ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /usr/lib/sysusers.d/assetdepot.conf
    elif ! getent passwd assetdepot >/dev/null; then
        adduser --system --group --home /var/lib/assetdepot --no-create-home --shell /usr/sbin/nologin \
            --gecos "AssetDepot origin" assetdepot
    fi
    # Only the service user reads the data folder (keys, tokens); what is inside is left alone.
    mkdir -p /var/lib/assetdepot
    chown assetdepot:assetdepot /var/lib/assetdepot
    chmod 0700 /var/lib/assetdepot
    # A new data folder is initialised as the service user, with no dev app and no secret
    # printed, when this depot has `depot init` (an unknown subcommand's --help prints the
    # general help, whose usage line is not init's).
    if [ -z "$(ls -A /var/lib/assetdepot)" ] && /usr/bin/depot init --help 2>/dev/null | grep -q "^USAGE: depot init"; then
        (umask 0077 && cd / && runuser -u assetdepot -- /usr/bin/depot init --data /var/lib/assetdepot)
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
        # An upgrade restarts the origin only if it was running (SIGTERM drains it first).
        if [ -n "$2" ]; then systemctl try-restart assetdepot.service >/dev/null || true; fi
    fi
fi
exit 0
POSTINST

cat > "$package/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop assetdepot.service >/dev/null 2>&1 || true
fi
exit 0
PRERM

cat > "$package/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
# assetdepot postrm. Purging keeps the data folder /var/lib/assetdepot (keys, tokens, releases,
# blobs) and the user assetdepot, as Debian keeps data: remove them by hand if they are not wanted
# (rm -r /var/lib/assetdepot; deluser --system assetdepot).
set -e
if [ "$1" = purge ]; then
    rm -f /etc/systemd/system/multi-user.target.wants/assetdepot.service
    if [ -d /var/lib/assetdepot ]; then
        echo "assetdepot: kept /var/lib/assetdepot and the user assetdepot (remove them by hand if unwanted)"
    fi
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
exit 0
POSTRM
chmod 0755 "$package/DEBIAN/postinst" "$package/DEBIAN/prerm" "$package/DEBIAN/postrm"

dpkg-deb --build --root-owner-group "$package" "$deb" >/dev/null
echo "$deb"
