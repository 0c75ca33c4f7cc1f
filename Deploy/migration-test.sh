#!/usr/bin/env bash
# Builds in the field through issue 52's migration (CI: .ci/run, after the package's test):
#
#   Deploy/migration-test.sh [OLD_REVISION]
#
# A client built BEFORE roots of trust and staged pack keys — the `depot` of OLD_REVISION (by
# default c23fbf5, the last commit before them), built here into a worktree of its own (about
# 100 s), or DEPOT_OLD_BINARY when set — keeps syncing while the origin is upgraded and the
# operator follows the book:
#
#   1. the old origin (the old binary) serves an app; the old client syncs with the configuration
#      exported then ("today's exported configuration");
#   2. the new origin takes over the same data folder (the upgrade);
#   3. a release goes to beta; a root of trust is made offline and added, production is
#      protected and re-signed by the running origin (a release above beta's), and beta's release
#      is signed by a release key and promoted over it;
#   4. the pack key is rotated (staged) and the manifest signing key rotated, and a release is
#      signed and promoted again;
#
# after each step the old client, with the old configuration, installs production's packs byte
# for byte, and a build exported after step 3 (pinning the root) does too with the new client.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old_revision=${1:-c23fbf5}
new=$root/.build/debug/depot
say() { echo "migration-test: $*"; }
fail() { echo "migration-test: FAIL: $*" >&2; exit 1; }

[ -x "$new" ] || (cd "$root" && swift build --product depot >/dev/null)
work=$(mktemp -d /tmp/depot-migration.XXXXXX)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
    if [ -z "${DEPOT_OLD_BINARY:-}" ] && [ -d "$work/old" ]; then git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

old=${DEPOT_OLD_BINARY:-}
if [ -z "$old" ]; then
    git -C "$root" cat-file -e "$old_revision^{commit}" 2>/dev/null || fail "revision $old_revision is not in this clone (a shallow clone? fetch its history, or set DEPOT_OLD_BINARY)"
    say "building depot at $old_revision (the client before roots of trust)"
    git -C "$root" worktree add --detach "$work/old" "$old_revision" >/dev/null 2>&1
    (cd "$work/old" && swift build --product depot >"$work/old-build.log" 2>&1) || { tail -20 "$work/old-build.log"; fail "the old revision did not build"; }
    old=$work/old/.build/debug/depot
fi
data=$work/data
cd "$work"

# Starts `BINARY serve` on the data folder at a fixed free port; waits for its banner.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
start() {
    DEPOT_DATA=$data DEPOT_LISTEN=127.0.0.1:$port DEPOT_PATCH_DEPTH=0 "$1" serve >"$work/serve.out" 2>"$work/serve.err" &
    server_pid=$!
    until grep -q "public URL\|depot sync" "$work/serve.out" 2>/dev/null; do
        kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.err"; fail "$1 serve exited"; }
        sleep 0.1
    done
}
stop() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=; }
app=com.example.dev
publish() {  # BINARY FILE PACK CHANNEL: prints the release number
    "$1" publish "$2" --server "$url" --app $app --pack "$3" --token "$token" --release --channel "$4" --quiet | sed -n 's/.* in release \([0-9]*\) .*/\1/p'
}
check() {  # LABEL BINARY CONFIG DEVICE PACK FILE: the build syncs production and holds the file's bytes
    "$2" sync --server "$url" --app $app --config "$3" --dest "$work/$4" --quiet >/dev/null 2>"$work/sync.err" || { cat "$work/sync.err"; fail "$1: the sync failed"; }
    cmp -s "$work/$4/packs/$5" "$6" || fail "$1: $4 does not hold $6 as pack $5"
    say "ok: $1"
}

# 1. The old origin and the old client, as an app in the field runs today.
start "$old"
token=$(sed -n 's/.*export DEPOT_TOKEN=//p' "$work/serve.out" | head -1)
[ -n "$token" ] || fail "no token in the old origin's banner"
echo "levels v1" > levels-1.bin
"$old" publish levels-1.bin --server "$url" --app $app --pack levels --token "$token" --release --quiet >/dev/null
"$old" keys export --data "$data" --app $app > legacy.json
check "the old client on the old origin" "$old" legacy.json device-old levels levels-1.bin
stop

# 2. The upgrade: the new origin on the same folder.
start "$new"
check "the old client after the upgrade" "$old" legacy.json device-old levels levels-1.bin

# 3. A release on beta (CI's), then a root of trust, offline; production protected, and re-signed
#    by the running origin with the root (a release above beta's); beta's release signed and
#    promoted over it.
echo "levels v2" > levels-2.bin
beta_release=$(publish "$new" levels-2.bin levels beta)
[ -n "$beta_release" ] || fail "publishing levels-2.bin on beta"
production_release() {
    python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["channels"]["production"])' "$url/v1/apps/$app/releases"
}
"$new" root keygen --out root-key.json >/dev/null
release_public=$("$new" root keygen --out release-key.json | grep -o '[A-Za-z0-9+/]\{43\}=' | head -1)
[ -n "$release_public" ] || fail "root keygen printed no public key"
"$new" root sign --app $app --key root-key.json --online-keys-from legacy.json --release-key "$release_public" --out root-1.json >/dev/null
"$new" root add --data "$data" --app $app root-1.json >/dev/null
"$new" keys export --data "$data" --app $app > rooted.json
# The origin re-signs production with the root within seconds (the event waited for).
for _ in $(seq 1 600); do [ "$(production_release)" -gt "$beta_release" ] && break; sleep 0.1; done
[ "$(production_release)" -gt "$beta_release" ] || fail "the origin did not re-sign production after root add"
if publish "$new" levels-2.bin levels production 2>/dev/null; then fail "an unsigned publish reached protected production"; fi
sign_and_promote() {  # FILE RELEASE: signed, to production; prints what depot said
    "$new" channels promote --server "$url" --app $app --token "$token" --channel production --release "$2" --sign release-key.json --config rooted.json --pack-file levels="$1"
}
promoted=$(sign_and_promote levels-2.bin "$beta_release")
case $promoted in
    *"(release $beta_release's packs, published anew above the release the origin re-signed)"*) ;;
    *) fail "the promotion over the re-signed release did not say so: $promoted" ;;
esac
[ "$(production_release)" -gt "$beta_release" ] || fail "production went back below the re-signed release"
check "the old client, production protected" "$old" legacy.json device-old levels levels-2.bin
check "a build pinning the root" "$new" rooted.json device-rooted levels levels-2.bin

# 4. Both keys rotated (the pack key staged, the signing key co-signing), another signed release.
"$new" keys rotate --data "$data" --app $app >/dev/null
"$new" keys rotate-signing --data "$data" >/dev/null
echo "levels v3" > levels-3.bin
number=$(publish "$new" levels-3.bin levels beta)
[ -n "$number" ] || fail "publishing levels-3.bin on beta"
sign_and_promote levels-3.bin "$number" >/dev/null
check "the old client after both rotations" "$old" legacy.json device-old levels levels-3.bin
check "the rooted build after both rotations" "$new" rooted.json device-rooted levels levels-3.bin
say "PASS: a client built at $old_revision kept every release through the upgrade, the root, the protection and both rotations"
