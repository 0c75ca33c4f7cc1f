#!/usr/bin/env bash
# Builds AssetDepot's Debian package: OUTDIR/assetdepot_<version>_<arch>.deb
#
#   Deploy/package.sh [--skip-build] OUTDIR
#
# and beside it OUTDIR/assetdepot-dbgsym_<version>_<arch>.deb, depot's debugging symbols (found
# by gdb, perf and systemd-coredump through the binary's build id; not needed to run it).
# From the release build of depot, linked with the Swift runtime inside it (--static-swift-stdlib),
# so that the package needs no Swift toolchain: only Debian's own libraries, named in Depends: by
# dpkg-shlibdeps (package dpkg-dev). --skip-build (or DEPOT_PACKAGE_SKIP_BUILD=1) packages the
# .build/release/depot already there, as an earlier run built it (the script refuses a build that
# links a Swift runtime library from the toolchain, or that prints another version).
# The version is AssetDepot's, AssetDepotVersion.current in Sources/DepotCore/AssetDepotVersion.swift
# (what depot --version prints); the newest entries of CHANGELOG.md and Deploy/debian/changelog
# must name it, or nothing is built (Deploy/README.md, "Versions", says when it rises).
# Needs dpkg-dev (dpkg-shlibdeps, dpkg-parsechangelog) and binutils (nm, objcopy, readelf); run it
# as any user (files are owned by root in the package). Installs:
#   /usr/bin/depot, and its manual page depot(1) (made from the binary's own help)
#   /usr/share/assetdepot/Public                       the dashboard (found by `depot serve`)
#   /lib/systemd/system/assetdepot.service             not enabled, not started
#   /usr/lib/sysusers.d/assetdepot.conf                the service user, made at install
#   /etc/nginx/sites-available/assetdepot              the edge's site, the operator's (conffile)
#   /usr/share/assetdepot/nginx/assetdepot-locations.conf   its location rules, the package's (replaced
#                                                      by upgrades), linked from
#   /etc/nginx/snippets/assetdepot-locations.conf      where the site includes them
#   /usr/share/doc/assetdepot/                         README.md (Deploy/), SECURITY.md, copyright,
#                                                      changelog.Debian.gz, changelog.gz (CHANGELOG.md)
#   /usr/share/lintian/overrides/assetdepot            the lintian tags kept, each with its reason
# with the maintainer scripts of Deploy/debian/. See Deploy/README.md, "Install the origin";
# Deploy/package-test.sh builds it, runs lintian on it, installs it and checks it.
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
for tool in dpkg-deb dpkg-shlibdeps dpkg-parsechangelog ldd nm objcopy readelf; do
  command -v $tool >/dev/null || { echo "error: $tool is missing (apt-get install dpkg-dev binutils)" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"

# The version: AssetDepot's one constant, which CHANGELOG.md's newest release and the Debian
# changelog's newest entry name too.
version=$(sed -n 's/^ *public static let current = "\(.*\)"$/\1/p' Sources/DepotCore/AssetDepotVersion.swift)
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
  || { echo "error: Sources/DepotCore/AssetDepotVersion.swift names no MAJOR.MINOR.PATCH version ('$version')" >&2; exit 1; }
newest=$(sed -n 's/^## \([0-9][^ ]*\) .*/\1/p' CHANGELOG.md | head -n 1)
[ "$newest" = "$version" ] \
  || { echo "error: CHANGELOG.md's newest release is '$newest', not $version: turn its Unreleased section into $version's" >&2; exit 1; }
# A tree with changes under "Unreleased" still says the last version: its package is not that
# version as released (Deploy/README.md, "Versions").
unreleased=$(awk '/^## Unreleased/ { inside = 1; next } /^## / { inside = 0 } inside && NF' CHANGELOG.md | wc -l)
[ "$unreleased" -eq 0 ] \
  || echo "warning: CHANGELOG.md lists changes under Unreleased: this package says $version but holds more than $version as released" >&2
debian_version=$(dpkg-parsechangelog -l Deploy/debian/changelog -S Version)
[ "$debian_version" = "$version" ] \
  || { echo "error: Deploy/debian/changelog's newest entry is $debian_version, not $version: add an entry for $version" >&2; exit 1; }

if [ "$skip" != 1 ]; then
  # Foundation's networking, linked in with the Swift runtime, asks the linker for libcurl
  # (-lcurl): the runtime library of Debian's libcurl4 is enough, through a link named as the
  # linker looks for it, so no -dev package is needed (the package then depends on libcurl4).
  curl=$(dpkg -L "libcurl4:$(dpkg --print-architecture)" 2>/dev/null | grep '/libcurl\.so\.4$' | head -n 1)
  [ -n "$curl" ] || { echo "error: libcurl4 is not installed (apt-get install libcurl4)" >&2; exit 1; }
  mkdir -p .build/package-libs
  ln -sfn "$curl" .build/package-libs/libcurl.so
  # Linked with -z now (BIND_NOW): every symbol is resolved at start, so the GOT is read-only
  # (RELRO) for the whole run.
  swift build -c release --product depot --static-swift-stdlib -Xlinker -L"$root/.build/package-libs" -Xlinker -z -Xlinker now
fi
binary=$root/.build/release/depot
[ -x "$binary" ] || { echo "error: no $binary: run Deploy/package.sh without --skip-build" >&2; exit 1; }
printed=$("$binary" --version)
[ "$printed" = "$version" ] \
  || { echo "error: $binary --version prints '$printed', but the tree's version is $version: run Deploy/package.sh without --skip-build" >&2; exit 1; }
readelf -d "$binary" | grep -q 'FLAGS_1.*NOW' \
  || { echo "error: $binary is not linked with -z now: run Deploy/package.sh without --skip-build" >&2; exit 1; }

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

# What depot carries a copy of must be in the copyright file (Deploy/debian/copyright): every
# Swift package the build resolved has a Files: paragraph there, unless it is one of those named
# here, which depot does not link (a test target's, the documentation plugin's). BoringSSL, inside
# swift-crypto, is one of them: OpenSSL comes from Debian's libssl3.
not_linked="swift-crypto swift-asn1 swift-docc-plugin swift-docc-symbolkit"
for identity in $(sed -n 's/^ *"identity" : "\(.*\)",$/\1/p' Package.resolved); do
  case " $not_linked " in *" $identity "*) continue ;; esac
  grep -qi "^Files: \.build/checkouts/$identity/\*" Deploy/debian/copyright \
    || { echo "error: depot links the Swift package $identity, which Deploy/debian/copyright does not cover (a Files: paragraph with its copyright and license)" >&2; exit 1; }
done
if nm "$binary" | grep -q -i -m 1 'BoringSSL\|CCryptoBoringSSL'; then
  echo "error: $binary carries BoringSSL (swift-crypto), which Deploy/debian/copyright and Deploy/README.md say it does not" >&2
  exit 1
fi

arch=$(dpkg --print-architecture)
deb="$out/assetdepot_${version}_${arch}.deb"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
package=$stage/assetdepot
dbgsym=$stage/assetdepot-dbgsym
umask 022
install -D -m 0755 "$binary" "$package/usr/bin/depot"
# Stripped as dh_strip strips an executable, its symbols and debugging sections kept apart in
# assetdepot-dbgsym, under the build id gdb, perf and systemd-coredump look for. (The symbol table
# in the binary served no one: the Swift runtime's backtracer is a program of the toolchain,
# swift-backtrace, which the origin's host does not have.)
build_id=$(readelf -n "$package/usr/bin/depot" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
[ ${#build_id} -ge 16 ] || { echo "error: $binary has no build id" >&2; exit 1; }
debug_file=usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
mkdir -p "$(dirname "$dbgsym/$debug_file")"
objcopy --only-keep-debug --compress-debug-sections "$package/usr/bin/depot" "$dbgsym/$debug_file"
chmod 0644 "$dbgsym/$debug_file"
strip --remove-section=.comment --remove-section=.note "$package/usr/bin/depot"
objcopy --add-gnu-debuglink="$dbgsym/$debug_file" "$package/usr/bin/depot"
# depot(1), from the help of the binary packaged, by swift-argument-parser's generate-manual
# (built from the checkout the build resolved, into .build/generate-manual), dated as the
# Debian changelog's newest entry.
swift build --package-path .build/checkouts/swift-argument-parser --scratch-path .build/generate-manual \
  --product generate-manual > .build/generate-manual.log 2>&1 \
  || { cat .build/generate-manual.log >&2; echo "error: could not build swift-argument-parser's generate-manual" >&2; exit 1; }
manual=$(mktemp -d)
.build/generate-manual/debug/generate-manual "$binary" --section 1 --authors "The AssetDepot authors" \
  --date "$(date -u -d "$(dpkg-parsechangelog -l Deploy/debian/changelog -S Date)" +%Y-%m-%d)" -o "$manual"
mkdir -p "$package/usr/share/man/man1"
# (A help text's blank line is a new paragraph: .Pp, which man reads without a warning.)
sed 's/^$/.Pp/' "$manual/depot.1" | gzip -9n > "$package/usr/share/man/man1/depot.1.gz"
chmod 0644 "$package/usr/share/man/man1/depot.1.gz"
rm -r "$manual"
mkdir -p "$package/usr/share/assetdepot"
cp -R Public "$package/usr/share/assetdepot/Public"
install -D -m 0644 Deploy/nginx/snippets/assetdepot-locations.conf "$package/usr/share/assetdepot/nginx/assetdepot-locations.conf"
find "$package/usr/share/assetdepot" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
install -D -m 0644 Deploy/systemd/assetdepot.service "$package/lib/systemd/system/assetdepot.service"
install -D -m 0644 Deploy/systemd/assetdepot.sysusers "$package/usr/lib/sysusers.d/assetdepot.conf"
# The site is the operator's (a conffile); the location rules it includes are the package's, in
# /usr/share (a file dpkg puts in /etc is a conffile: an upgrade would then never replace rules the
# operator has no reason to edit), reached from snippets/, where the site's include looks.
install -D -m 0644 Deploy/nginx/sites-available/assetdepot "$package/etc/nginx/sites-available/assetdepot"
mkdir -p "$package/etc/nginx/snippets"
ln -s /usr/share/assetdepot/nginx/assetdepot-locations.conf "$package/etc/nginx/snippets/assetdepot-locations.conf"
doc=$package/usr/share/doc/assetdepot
for file in Deploy/README.md Deploy/SECURITY.md Deploy/debian/copyright; do
  install -D -m 0644 "$file" "$doc/$(basename "$file")"
done
gzip -9n < Deploy/debian/changelog > "$doc/changelog.Debian.gz"
gzip -9n < CHANGELOG.md > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.Debian.gz" "$doc/changelog.gz"
install -D -m 0644 Deploy/debian/lintian-overrides "$package/usr/share/lintian/overrides/assetdepot"

# Depends: what dpkg-shlibdeps finds the binary linked against (versions from Debian's symbols
# files), then what the maintainer scripts call: systemd-sysusers (as dh_installsysusers declares
# it) and deb-systemd-helper and deb-systemd-invoke, whose try-restart came in init-system-helpers
# 1.47 (it is essential, so only a version is asked for).
mkdir -p "$stage/debian"
printf 'Source: assetdepot\n\nPackage: assetdepot\nArchitecture: any\n' > "$stage/debian/control"
shlibs=$(cd "$stage" && dpkg-shlibdeps -O "assetdepot/usr/bin/depot" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
for needed in libmicrohttpd12 libssl3 libc6; do
  [[ ", $shlibs" == *", $needed "* || ", $shlibs" == *", $needed,"* || ", $shlibs" == *", $needed" ]] \
    || { echo "error: dpkg-shlibdeps did not name $needed: '$shlibs'" >&2; exit 1; }
done
depends="$shlibs, init-system-helpers (>= 1.47), systemd | systemd-standalone-sysusers | systemd-sysusers"

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
 This package installs the origin (depot), its dashboard, a systemd unit that
 it neither enables nor starts (the operator sets the public URL first), and an
 nginx edge site for Debian's nginx layout. See
 /usr/share/doc/assetdepot/README.md.
CONTROL

cat > "$package/DEBIAN/conffiles" <<'CONFFILES'
/etc/nginx/sites-available/assetdepot
CONFFILES

for script in preinst postinst prerm postrm; do
  install -m 0755 "Deploy/debian/$script" "$package/DEBIAN/$script"
done
# md5sums of every file but the conffiles, as dh_md5sums writes them (debsums, dpkg --verify).
(cd "$package" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$package/DEBIAN/md5sums"
chmod 0644 "$package/DEBIAN/md5sums"

# The symbols' package, as dh_strip makes it.
mkdir -p "$dbgsym/usr/share/doc" "$dbgsym/DEBIAN"
ln -s assetdepot "$dbgsym/usr/share/doc/assetdepot-dbgsym"
cat > "$dbgsym/DEBIAN/control" <<CONTROL
Package: assetdepot-dbgsym
Source: assetdepot
Version: $version
Auto-Built-Package: debug-symbols
Architecture: $arch
Maintainer: ${DEPOT_PACKAGE_MAINTAINER:-AssetDepot maintainers <maintainers@users.noreply.a-seed-b5af2b80.example>}
Installed-Size: $(du -sk --exclude=DEBIAN "$dbgsym" | cut -f1)
Depends: assetdepot (= $version)
Section: debug
Priority: optional
Description: debug symbols for assetdepot
Build-Ids: $build_id
CONTROL
(cd "$dbgsym" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$dbgsym/DEBIAN/md5sums"
chmod 0644 "$dbgsym/DEBIAN/md5sums"

dpkg-deb --build --root-owner-group "$dbgsym" "$out/assetdepot-dbgsym_${version}_${arch}.deb" >/dev/null
dpkg-deb --build --root-owner-group "$package" "$deb" >/dev/null
echo "$out/assetdepot-dbgsym_${version}_${arch}.deb"
echo "$deb"
