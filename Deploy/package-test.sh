#!/usr/bin/env bash
# The Debian package, end to end (CI: .ci/run, after Deploy/setup.sh test):
#
#   Deploy/package-test.sh [--skip-build]
#
# Builds the package (Deploy/package.sh; --skip-build reuses .build/release/depot), runs lintian on
# it (any error fails the test; what is kept is overridden in the package, each with its reason),
# installs it with apt-get, and checks what an operator relies on: the package's version is
# depot's; depot on the PATH with no library outside Debian's packages; the copyright file, both
# changelogs and depot(1); `systemd-analyze verify` of the installed unit, which sets no public
# URL; the service user owning /var/lib/assetdepot 0700, an owner and mode left alone by an
# upgrade and taken from dpkg-statoverride when the folder is made; the installed nginx site (a
# conffile) enabled in Debian's stock layout with the shipped rules (a link to
# /usr/share/assetdepot/nginx/, not a conffile) passing `nginx -t` and answering through nginx (a
# throwaway certificate at the paths it names); the origin started from the package as the service
# user with the unit's Environment= lines and the public URL a drop-in would set, answering / with
# the installed dashboard and /healthz with 200. Then it enables the unit as an operator would and
# purges the package: the enable link goes with it (deb-systemd-helper), the data folder stays.
# Last it removes what it made (the site link, the certificate, nginx stopped, the user and data
# folder), leaving the machine as it found it.
#
# Root, on Debian 12 with what Deploy/setup.sh installs (nginx-light, systemd, openssl, curl,
# dpkg-dev, lintian). Safe on a developer's machine: it refuses to start when assetdepot is installed
# already, when /var/lib/assetdepot or /etc/ssl/assetdepot exist, or when the system's nginx
# runs, so it never touches what it did not make. What it made is written down as it goes
# (/var/tmp/assetdepot-package-test.state): a run killed half-way leaves that record, and the next
# run refuses until `Deploy/package-test.sh --clean-up-previous` undoes it, asked for.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state=/var/tmp/assetdepot-package-test.state
started=$SECONDS

say() { echo "package-test: $*"; }
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
made() { echo "$*" >> "$state"; }

skip_build=""
clean_previous=""
case "${1:-}" in
  "") ;;
  --skip-build) skip_build=--skip-build ;;
  --clean-up-previous) clean_previous=yes ;;
  *) echo "usage: Deploy/package-test.sh [--skip-build | --clean-up-previous]" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || fail "run as root (it installs and purges a package)"
for tool in apt-get dpkg-deb dpkg-shlibdeps lintian nginx systemd-analyze systemctl openssl curl runuser ldd; do
  command -v $tool >/dev/null || fail "$tool is missing: run Deploy/setup.sh deps"
done

system_nginx_running() { [ -s /run/nginx.pid ] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; }

# Undoes, in reverse, whatever the state file says this script made (this run's or a killed one's).
clean_up() {
  [ -f "$state" ] || return 0
  local line
  tac "$state" | while read -r line; do
    case "$line" in
      origin\ *) kill -TERM "${line#origin }" 2>/dev/null && { timeout 40 tail --pid="${line#origin }" -f /dev/null || true; } ;;
      nginx) if system_nginx_running; then
               nginx -s quit 2>/dev/null || true
               timeout 20 tail --pid="$(cat /run/nginx.pid 2>/dev/null || echo 1)" -f /dev/null 2>/dev/null || true
             fi ;;
      site-link) rm -f /etc/nginx/sites-enabled/assetdepot ;;
      ssl) rm -rf /etc/ssl/assetdepot ;;
      cache\ *) rm -rf "${line#cache }" ;;
      package) DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq assetdepot >/dev/null 2>&1 || true ;;
      enabled) rm -f /etc/systemd/system/multi-user.target.wants/assetdepot.service ;;
      drop-in) rm -rf /etc/systemd/system/assetdepot.service.d ;;
      statoverride) dpkg-statoverride --remove /var/lib/assetdepot >/dev/null 2>&1 || true ;;
      aside\ *) if [ -d "${line#aside }" ]; then rm -rf /var/lib/assetdepot; mv "${line#aside }" /var/lib/assetdepot; fi ;;
      data) rm -rf /var/lib/assetdepot ;;
      user) userdel assetdepot 2>/dev/null || true; groupdel assetdepot 2>/dev/null || true ;;
      work\ *) rm -rf "${line#work }" ;;
    esac
  done
  rm -f "$state"
}

# A run that was killed left its record. What it names may have changed hands since (assetdepot
# installed for real, a data folder in use, a process id reused), so nothing is undone unasked.
if [ -f "$state" ]; then
  if [ -n "$clean_previous" ]; then
    say "undoing what the previous run recorded in $state:"; sed 's/^/  /' "$state"
    clean_up
    exit 0
  fi
  fail "a previous run was cut off and left $state, which records what it made:
$(sed 's/^/  /' "$state")
check that none of it is in use now (a real assetdepot install, its /var/lib/assetdepot), then run
Deploy/package-test.sh --clean-up-previous to undo it, or remove $state and clean up by hand"
fi
[ -n "$clean_previous" ] && { say "no previous run to clean up"; exit 0; }
dpkg-query -W -f='${Status}' assetdepot 2>/dev/null | grep -q "install ok installed" \
  && fail "assetdepot is installed on this machine: the test installs and purges it; remove it first (apt-get purge assetdepot)"
[ -e /var/lib/assetdepot ] && fail "/var/lib/assetdepot exists (someone's data folder?): the test makes and removes it"
[ -e /etc/ssl/assetdepot ] && fail "/etc/ssl/assetdepot exists: the test puts a throwaway certificate there and removes it"
[ -e /etc/nginx/sites-enabled/assetdepot ] && fail "/etc/nginx/sites-enabled/assetdepot exists: the test enables the site and removes the link"
[ -e /etc/systemd/system/multi-user.target.wants/assetdepot.service ] && fail "assetdepot.service is enabled on this machine: the test enables it and purges the package"
[ -e /etc/systemd/system/assetdepot.service.d ] && fail "/etc/systemd/system/assetdepot.service.d exists: the test makes a drop-in there and removes the folder"
dpkg-statoverride --list /var/lib/assetdepot >/dev/null && fail "dpkg-statoverride has an entry for /var/lib/assetdepot: the test adds one and removes it"
system_nginx_running && fail "the system's nginx runs (/run/nginx.pid): the test starts and stops it with the stock configuration; stop it first"
[ -f /etc/nginx/nginx.conf ] || fail "no /etc/nginx/nginx.conf: install Debian's nginx (nginx-light)"

: > "$state"
trap 'status=$?; clean_up; [ $status -eq 0 ] || echo "package-test: FAIL (see above)" >&2; exit $status' EXIT
work=$(mktemp -d /tmp/assetdepot-package-test.XXXXXX)
made "work $work"
chmod 0755 "$work"   # apt-get reads the .deb as user _apt
getent passwd assetdepot >/dev/null || made user   # made at install; removed at the end

# Build: the package, then its symbols' package (the last two lines package.sh prints).
build_started=$SECONDS
built=$("$root/Deploy/package.sh" $skip_build "$work/out" | tail -n 2)
deb=$(echo "$built" | tail -n 1)
dbgsym=$(echo "$built" | head -n 1)
[ -f "$deb" ] && [ -f "$dbgsym" ] && [ "$deb" != "$dbgsym" ] || fail "Deploy/package.sh made no package and symbols' package: $built"
say "built $(basename "$deb") ($(du -h "$deb" | cut -f1)) and $(basename "$dbgsym") in $((SECONDS - build_started)) s"
version=$(dpkg-deb -f "$deb" Version)
source_version=$(sed -n 's/^ *public static let current = "\(.*\)"$/\1/p' "$root/Sources/DepotCore/AssetDepotVersion.swift")
[ "$version" = "$source_version" ] || fail "the package's version is $version; AssetDepotVersion.current is $source_version"
say "Depends: $(dpkg-deb -f "$deb" Depends)"

# lintian: no error (--fail-on error), and none overridden: the overrides the package carries
# (Deploy/debian/lintian-overrides, each with its reason) are for warnings and notes only. What
# lintian still says is printed.
while read -r tag; do
  severity=$(sed -n 's/^Severity: //p' /usr/share/lintian/tags/*/"$tag".tag 2>/dev/null | head -n 1)
  [ "$severity" != error ] || fail "Deploy/debian/lintian-overrides overrides $tag, an error: fix it instead"
done < <(sed -n 's/^assetdepot: \([a-z0-9.+-]*\).*/\1/p' "$root/Deploy/debian/lintian-overrides" | sort -u)
if ! (cd / && runuser -u nobody -- lintian --fail-on error --display-info "$deb" "$dbgsym") > "$work/lintian.log" 2>&1; then
  cat "$work/lintian.log" >&2
  fail "lintian found errors in the package"
fi
if [ -s "$work/lintian.log" ]; then say "lintian says:"; sed 's/^/  /' "$work/lintian.log"; fi
say "ok: lintian finds no error ($(grep -c '^W:' "$work/lintian.log" || true) warnings not overridden)"

# Install.
made package
made data
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install $deb"; }
dpkg-query -W -f='${Status}' assetdepot | grep -q "install ok installed" || fail "assetdepot is not installed after apt-get install"

# depot on the PATH, its version, nothing from a Swift toolchain.
[ "$(command -v depot)" = /usr/bin/depot ] || fail "depot on the PATH is $(command -v depot), not /usr/bin/depot"
printed=$(env -i PATH=/usr/bin:/bin depot --version) || fail "depot --version failed"
[ "$printed" = "$version" ] || fail "depot --version printed '$printed'; the package's version is $version"
while read -r library; do
  [ "$library" = not ] && fail "/usr/bin/depot needs a library that is not found: $(ldd /usr/bin/depot | grep 'not found')"
  { dpkg -S "$library" || dpkg -S "$(readlink -f "$library")"; } >/dev/null 2>&1 \
    || fail "/usr/bin/depot links $library, which no Debian package provides"
done < <(ldd /usr/bin/depot | awk '/=>/ { print $3 }')
say "ok: depot --version is $version; ldd /usr/bin/depot lists only libraries of Debian packages"

# What the package says about itself: its copyright (DEP-5), both changelogs, the manual page.
doc=/usr/share/doc/assetdepot
head -n 1 $doc/copyright | grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' || fail "$doc/copyright is not machine-readable (DEP-5)"
grep -q '^License: Apache-2.0$' $doc/copyright || fail "$doc/copyright does not license AssetDepot under Apache-2.0"
zcat $doc/changelog.Debian.gz > "$work/changelog.Debian"
zcat $doc/changelog.gz > "$work/changelog"
zcat /usr/share/man/man1/depot.1.gz > "$work/depot.1"
[ "$(sed -n '1s/^assetdepot (\([^)]*\)).*/\1/p' "$work/changelog.Debian")" = "$version" ] || fail "$doc/changelog.Debian.gz's newest entry is not $version"
grep -q "^## $version " "$work/changelog" || fail "$doc/changelog.gz (CHANGELOG.md) has no section for $version"
grep -qx '.Dt DEPOT 1' "$work/depot.1" || fail "depot(1) is not installed"
grep -qx '.It Em serve' "$work/depot.1" || fail "depot(1) does not describe depot serve"
say "ok: $doc has the copyright file (DEP-5), changelog.Debian.gz and changelog.gz for $version; depot(1) is there"

# The unit.
unit=/lib/systemd/system/assetdepot.service
[ -f "$unit" ] || fail "no $unit"
verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify $unit said: $verify"
documentation=$(sed -n 's#^Documentation=file://##p' "$unit")
[ -n "$documentation" ] && [ -f "$documentation" ] || fail "the unit's Documentation= ($documentation) is not a file the package installed"
grep -qx "ExecStart=/usr/bin/depot serve" "$unit" || fail "the unit does not start /usr/bin/depot serve"
grep -q "^Environment=DEPOT_PUBLIC_URL=" "$unit" && fail "the unit sets DEPOT_PUBLIC_URL: an origin started without the operator's drop-in would sign manifests for it"
[ -e /etc/systemd/system/multi-user.target.wants/assetdepot.service ] && fail "the package enabled assetdepot.service"
say "ok: systemd-analyze verify passes; Documentation=$documentation exists; no public URL in the unit; not enabled"

# The service user and its data folder.
getent passwd assetdepot >/dev/null || fail "no user assetdepot after install"
uid=$(id -u assetdepot)
[ "$uid" -lt 1000 ] || fail "assetdepot is not a system user (uid $uid)"
[ "$(getent passwd assetdepot | cut -d: -f7)" = /usr/sbin/nologin ] || fail "assetdepot can log in: $(getent passwd assetdepot)"
[ "$(stat -c '%U:%G %a' /var/lib/assetdepot)" = "assetdepot:assetdepot 700" ] \
  || fail "/var/lib/assetdepot is $(stat -c '%U:%G %a' /var/lib/assetdepot), not assetdepot:assetdepot 700"
others=$(find /var/lib/assetdepot ! -user assetdepot)
[ -z "$others" ] || fail "files in /var/lib/assetdepot the service user does not own: $others"
[ -d /var/lib/assetdepot/apps ] && [ -f /var/lib/assetdepot/format.json ] || fail "the package did not initialise /var/lib/assetdepot (depot init)"
[ -z "$(ls -A /var/lib/assetdepot/apps)" ] || fail "the initialised data folder has apps: $(ls /var/lib/assetdepot/apps)"
say "ok: user assetdepot (uid $uid) owns /var/lib/assetdepot, mode 0700, initialised with no app"

# An upgrade (here a reinstall: postinst configure with the version before) leaves the admin's
# owner and mode alone; it makes no /var/lib/assetdepot when a drop-in moved the data folder; a
# folder made again takes the owner and mode registered with dpkg-statoverride.
reinstall() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "$deb" > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install --reinstall $deb"; }; }
chmod 0750 /var/lib/assetdepot
reinstall
[ "$(stat -c '%a' /var/lib/assetdepot)" = 750 ] || fail "an upgrade reset the data folder's mode 0750 to $(stat -c '%a' /var/lib/assetdepot)"
chmod 0700 /var/lib/assetdepot
made statoverride
dpkg-statoverride --add assetdepot assetdepot 0710 /var/lib/assetdepot
made "aside $work/data-aside"
mv /var/lib/assetdepot "$work/data-aside"
made drop-in
mkdir -p /etc/systemd/system/assetdepot.service.d
printf '[Service]\nEnvironment=DEPOT_DATA=%s\nReadWritePaths=%s\n' "$work/moved" "$work/moved" > /etc/systemd/system/assetdepot.service.d/moved.conf
reinstall
[ ! -e /var/lib/assetdepot ] || fail "an upgrade made /var/lib/assetdepot while a drop-in names the data folder $work/moved"
rm -r /etc/systemd/system/assetdepot.service.d
reinstall
[ "$(stat -c '%U:%G %a' /var/lib/assetdepot)" = "assetdepot:assetdepot 710" ] \
  || fail "the data folder made again is $(stat -c '%U:%G %a' /var/lib/assetdepot), not dpkg-statoverride's assetdepot:assetdepot 710"
[ -f /var/lib/assetdepot/format.json ] || fail "the data folder made again was not initialised"
rm -rf /var/lib/assetdepot
mv "$work/data-aside" /var/lib/assetdepot
dpkg-statoverride --remove /var/lib/assetdepot
say "ok: an upgrade keeps the data folder's mode and leaves a moved one alone; a folder made again takes dpkg-statoverride's owner and mode"

# The edge in Debian's stock layout: the site enabled, a throwaway certificate where it says.
# The site is the operator's (a conffile); the rules it includes are the package's: a link from
# snippets/ to /usr/share/assetdepot/nginx/, as shipped in Deploy/nginx/, not a conffile.
site=/etc/nginx/sites-available/assetdepot
rules=/usr/share/assetdepot/nginx/assetdepot-locations.conf
[ -f $site ] && [ -f $rules ] || fail "the nginx site or its rules are not installed"
dpkg-query -W -f='${Conffiles}\n' assetdepot | grep -q " $site " || fail "$site is not a conffile of the package"
[ "$(readlink /etc/nginx/snippets/assetdepot-locations.conf)" = $rules ] || fail "/etc/nginx/snippets/assetdepot-locations.conf is not a link to $rules"
dpkg-query -W -f='${Conffiles}\n' assetdepot | grep -q "assetdepot-locations.conf" && fail "the shipped nginx rules are a conffile"
cmp -s $rules "$root/Deploy/nginx/snippets/assetdepot-locations.conf" || fail "$rules is not Deploy/nginx/snippets/assetdepot-locations.conf"
certificate=$(awk '$1 == "ssl_certificate" { sub(";", "", $2); print $2; exit }' $site)
key=$(awk '$1 == "ssl_certificate_key" { sub(";", "", $2); print $2; exit }' $site)
host=$(awk '$1 == "server_name" { sub(";", "", $2); print $2; exit }' $site)
cache=$(awk '$1 == "proxy_cache_path" { print $2; exit }' $site)
[ -n "$certificate" ] && [ -n "$key" ] && [ -n "$host" ] && [ -n "$cache" ] || fail "could not read the certificate, server_name and cache from $site"
[ "$(dirname "$certificate")" = /etc/ssl/assetdepot ] && [ "$(dirname "$key")" = /etc/ssl/assetdepot ] \
  || fail "the site's certificate is not under /etc/ssl/assetdepot (the test makes only that folder)"
made ssl
mkdir -p /etc/ssl/assetdepot
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$host" -addext "subjectAltName=DNS:$host" \
  -keyout "$key" -out "$certificate" 2>/dev/null || fail "openssl could not make a certificate"
[ -e "$cache" ] || made "cache $cache"
made site-link
ln -s ../sites-available/assetdepot /etc/nginx/sites-enabled/
nginx -t > "$work/nginx-t.log" 2>&1 || { cat "$work/nginx-t.log" >&2; fail "nginx -t with Debian's stock nginx.conf and the site enabled"; }
say "ok: nginx -t passes with the stock nginx.conf and sites-enabled/assetdepot"

# The origin from the package, as the service user, with the unit's environment.
# (The public URL is the operator's drop-in's: the site's name, as the edge serves it.)
mapfile -t environment < <(sed -n 's/^Environment=//p' "$unit")
environment+=("DEPOT_PUBLIC_URL=https://$host")
listen=$(printf '%s\n' "${environment[@]}" | sed -n 's/^DEPOT_LISTEN=//p')
[ -n "$listen" ] || fail "the unit sets no DEPOT_LISTEN"
port=${listen##*:}
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  # Something here listens on the unit's port: the origin takes a free one, and the installed
  # site (a conffile, gone at purge) is pointed at it.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  environment+=("DEPOT_LISTEN=127.0.0.1:$port")
  sed -i "s/server 127.0.0.1:${listen##*:};/server 127.0.0.1:$port;/" $site
  say "port ${listen##*:} is taken here: the origin listens on $port"
fi
: > "$work/origin.log"
chmod 0644 "$work/origin.log"
(cd / && umask 0077 && exec runuser -u assetdepot -- env -i PATH=/usr/bin:/bin "${environment[@]}" /usr/bin/depot serve >> "$work/origin.log" 2>&1) &
runner=$!
timeout 60 grep -q -m1 "listening on" <(tail -n +1 --pid=$runner -f "$work/origin.log") || { cat "$work/origin.log" >&2; fail "the origin did not start"; }
# runuser waits for its command as a child (its PAM session); the origin is that child.
origin=$(pgrep -P $runner -x depot) || fail "no depot process under runuser ($runner)"
made "origin $origin"
[ "$(ps -o user= -p "$origin")" = assetdepot ] || fail "the origin runs as $(ps -o user= -p "$origin"), not assetdepot"
grep -q "warning: no dashboard" "$work/origin.log" && fail "the origin found no dashboard: $(grep 'no dashboard' "$work/origin.log")"
grep -q "DEPOT_TOKEN=\|DEPOT_ADMIN_TOKEN=\|com.example.dev" "$work/origin.log" && fail "the packaged origin's first start made the dev app or printed a token"
index=/usr/share/assetdepot/Public/index.html
[ "$(curl -s -o "$work/index.html" -w '%{http_code}' "http://127.0.0.1:$port/")" = 200 ] || fail "GET / from the origin did not answer 200"
cmp -s "$work/index.html" $index || fail "GET / from the origin did not answer the bytes of $index"
[ "$(curl -s -o "$work/healthz" -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ] || fail "GET /healthz did not answer 200: $(cat "$work/healthz")"
say "ok: the origin runs as assetdepot; GET / answers $index; GET /healthz answers 200"

# Through nginx, as installed.
made nginx
nginx || fail "nginx did not start with the stock nginx.conf"
through=(curl -s --resolve "$host:443:127.0.0.1" --resolve "$host:80:127.0.0.1" --cacert "$certificate")
[ "$("${through[@]}" -o "$work/edge.html" -w '%{http_code}' "https://$host/")" = 200 ] || fail "GET https://$host/ through nginx did not answer 200"
cmp -s "$work/edge.html" $index || fail "GET https://$host/ through nginx did not answer the bytes of $index"
[ "$("${through[@]}" -o /dev/null -w '%{http_code}' "https://$host/healthz")" = 404 ] || fail "nginx does not hide /healthz"
[ "$("${through[@]}" -o /dev/null -w '%{http_code} %{redirect_url}' "http://$host/x")" = "301 https://$host/x" ] || fail "plain http does not redirect to https"
say "ok: through nginx (https://$host/), / answers the dashboard, /healthz is hidden, http redirects"

# A first app, made by the packaged depot as the service user (the data folder is its own), then
# a pack published and synced through nginx: what a content team and a device do.
service_depot() { (cd / && umask 0077 && runuser -u assetdepot -- env -i PATH=/usr/bin:/bin /usr/bin/depot "$@"); }
app=com.example.packagetest
private=$work/private   # the token and the app's keys: not in the folder apt reads
mkdir -m 0700 "$private"
service_depot apps create "$app" --data /var/lib/assetdepot > "$private/apps.log" 2>&1 || fail "depot apps create as the service user: $(cat "$private/apps.log")"
token=$(service_depot tokens create --app "$app" --data /var/lib/assetdepot | tail -n 1) || fail "depot tokens create as the service user"
service_depot keys export --app "$app" --data /var/lib/assetdepot > "$private/client.json" || fail "depot keys export as the service user"
others=$(find /var/lib/assetdepot ! -user assetdepot)
[ -z "$others" ] || fail "the admin commands left files the service user does not own: $others"
head -c 300000 /dev/urandom > "$private/pack"
edge=(--server "https://$host" --resolve "$host:443:127.0.0.1" --ca-file "$certificate" --app "$app")
DEPOT_TOKEN=$token XDG_CACHE_HOME=$private/cache depot publish "$private/pack" "${edge[@]}" --pack hello --release --quiet > "$private/publish.log" 2>&1 \
  || fail "depot publish through nginx: $(cat "$private/publish.log")"
depot sync "${edge[@]}" --config "$private/client.json" --dest "$private/device" > "$private/sync.log" 2>&1 \
  || fail "depot sync through nginx: $(cat "$private/sync.log")"
cmp -s "$private/pack" "$private/device/packs/hello" || fail "the pack synced through nginx is not the one published"
say "ok: an app made as the service user; a pack published and synced through nginx, byte for byte"

# The origin stops cleanly on SIGTERM, as systemd stops it.
kill -TERM "$origin"
timeout 40 tail --pid="$origin" -f /dev/null || fail "the origin did not stop within 40 s of SIGTERM"
wait $runner || fail "the origin exited with status $? on SIGTERM"
grep -q "^stopped" "$work/origin.log" || fail "the origin did not say it stopped"

# The operator enables the unit (once its drop-in is there); purging the package removes the
# link that made (deb-systemd-helper purge), the package's files, the site; the data folder stays
# (Debian keeps data). Then the test's own leftovers go in clean_up.
made enabled
systemctl enable assetdepot.service > "$work/enable.log" 2>&1 || { cat "$work/enable.log" >&2; fail "systemctl enable assetdepot.service"; }
[ -L /etc/systemd/system/multi-user.target.wants/assetdepot.service ] || fail "systemctl enable made no link in multi-user.target.wants"
nginx -s quit 2>/dev/null
timeout 20 tail --pid="$(cat /run/nginx.pid 2>/dev/null || echo 1)" -f /dev/null 2>/dev/null || true
rm -f /etc/nginx/sites-enabled/assetdepot
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq assetdepot > "$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "apt-get purge assetdepot"; }
for gone in /usr/bin/depot $unit $site /etc/nginx/snippets/assetdepot-locations.conf /usr/share/assetdepot /usr/lib/sysusers.d/assetdepot.conf \
            /usr/share/doc/assetdepot /usr/share/man/man1/depot.1.gz /etc/systemd/system/multi-user.target.wants/assetdepot.service; do
  [ ! -e "$gone" ] && [ ! -L "$gone" ] || fail "$gone is still there after apt-get purge"
done
[ -d /var/lib/assetdepot ] || fail "apt-get purge removed /var/lib/assetdepot: data must be kept"
grep -q "kept /var/lib/assetdepot" "$work/purge.log" || fail "apt-get purge did not say it kept /var/lib/assetdepot"
say "ok: purged, the unit's enable link with it; /var/lib/assetdepot kept, as the package says"
say "passed in $((SECONDS - started)) s"
