#!/usr/bin/env bash
# Publishes and syncs one large pack through a release build and reports the peak resident
# memory of the origin and of the client, with curl doing the same transfers side by side.
#   Deploy/bench/memory.sh [SIZE_MIB]     (default 1024)
set -euo pipefail
size_mib=${1:-1024}
source "$(dirname "$0")/origin.sh" --log-level info   # explicit: with no arguments, source passes this script's own
head -c $((size_mib << 20)) /dev/urandom > "$work/pack.bin"

hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }   # peak RSS in KiB
mib() { echo "scale=1; $1 / 1024" | bc; }

echo "pack: ${size_mib} MiB; origin $url"
echo "origin RSS at start: $(mib "$(hwm $server_pid)") MiB"

t0=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$work/publish.rss" "$depot" publish "$work/pack.bin" --server "$url" --app $app --pack big --token "$token" --release --quiet >/dev/null
t1=$(date +%s.%N)
echo "depot publish: peak RSS $(mib "$(cat "$work/publish.rss")") MiB, $(elapsed "$t0" "$t1") s"
echo "origin peak RSS after publish: $(mib "$(hwm $server_pid)") MiB"

t0=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$work/curl-up.rss" curl -sf -o /dev/null -T "$work/pack.bin" -H "Authorization: Bearer $token" "$url/v1/apps/$app/packs/big2?release=true"
t1=$(date +%s.%N)
echo "curl upload (peer): peak RSS $(mib "$(cat "$work/curl-up.rss")") MiB, $(elapsed "$t0" "$t1") s"

"$depot" keys export --data "$work/data" --app $app > "$work/client.json"
t0=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$work/sync.rss" "$depot" sync --server "$url" --app $app --config "$work/client.json" --dest "$work/dest" --quiet >/dev/null
t1=$(date +%s.%N)
echo "depot sync (download, verify, decrypt, install 2 packs): peak RSS $(mib "$(cat "$work/sync.rss")") MiB, $(elapsed "$t0" "$t1") s"
cmp "$work/pack.bin" "$work/dest/packs/big" && echo "installed pack is byte-identical"

blob=$(curl -sf "$url/v1/apps/$app/manifest" | python3 -c 'import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); print([p["url"] for p in m["packs"] if p["id"]=="big"][0])')
t0=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$work/curl-down.rss" curl -sf -o "$work/curl.bin" "$blob"
t1=$(date +%s.%N)
echo "curl download of the blob (peer): peak RSS $(mib "$(cat "$work/curl-down.rss")") MiB, $(elapsed "$t0" "$t1") s"
echo "origin peak RSS after everything: $(mib "$(hwm $server_pid)") MiB"
