#!/usr/bin/env bash
# The client and the ingest path against sequential peer pipelines, on loopback, interleaved:
#   sync:   `depot sync` of one pack of SIZE MiB (download, SHA-256, decrypt, install) vs curl to a
#           file, then `openssl dgst -sha256`, then pack-tool.c decrypting it (fsync), one after another;
#   ingest: `depot publish` of SIZE MiB vs pack-tool.c encrypting it (fsync), `openssl dgst -sha256`,
#           and curl uploading the container (to nginx, which discards it), one after another.
# Both pipelines are checked: the peer's plaintext equals the original, and the origin's pack
# decrypts with the reference decryptor. Peak resident memory of the depot processes is reported.
# Round 0 of each is a warm-up, not counted (this VM's first touch of fresh memory is slow).
# Prints a table of medians, spreads and ratios; writes it to bench-client.txt (or $OUT).
#   Deploy/bench/client.sh [SIZE_MIB] [ROUNDS]     (defaults 1024, 3)
set -euo pipefail
size_mib=${1:-1024}; rounds=${2:-3}
out=${OUT:-$(cd "$(dirname "$0")/../.." && pwd)/bench-client.txt}
source "$(dirname "$0")/lib.sh" client --log-level warning
cc -O2 -o "$work/pack-tool" Deploy/bench/pack-tool.c $(pkg-config --cflags --libs libcrypto)

"$depot" keys export --data "$work/data" --app $app > "$work/client.json"
read -r key_id key_hex < <(python3 -c 'import json,sys,base64; k=json.load(open(sys.argv[1]))["packKeys"]; i=sorted(k)[0]; print(i, base64.b64decode(k[i]).hex())' "$work/client.json")
head -c $((size_mib << 20)) /dev/urandom > "$work/pack.bin"

# An nginx that takes an upload and discards it: the ingest pipeline's destination.
nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2; user root; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 256; }
http { access_log off; client_body_temp_path $work/nginx/body;
  server { listen 127.0.0.1:$nginx_port; client_max_body_size 0; location / { client_body_buffer_size 1m; proxy_request_buffering off; return 204; } } }
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"

peak_rss() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"; }

# Ingest first (it also puts the pack on the origin for the sync rounds).
ingest_depot=(); ingest_peer=(); publish_rss=()
for round in $(seq 0 "$rounds"); do
  sync; t0=$(now)
  "$depot" publish "$work/pack.bin" --server "$origin" --app $app --pack big --token "$token" --release --quiet > /dev/null &
  p=$!; rss=0; while kill -0 $p 2>/dev/null; do r=$(peak_rss $p); rss=$r; sleep 0.1; done; wait $p
  t1=$(now); [ "$round" = 0 ] || { ingest_depot+=("$(elapsed "$t0" "$t1")"); publish_rss+=("$rss"); }
  rm -f "$work/peer.pack"; sync; t0=$(now)
  "$work/pack-tool" encrypt "$work/pack.bin" "$work/peer.pack" "$key_id" "$key_hex"
  openssl dgst -sha256 "$work/peer.pack" > /dev/null
  curl -sf -o /dev/null -T "$work/peer.pack" "http://127.0.0.1:$nginx_port/upload"
  t1=$(now); [ "$round" = 0 ] || ingest_peer+=("$(elapsed "$t0" "$t1")")
  head -c 17 /dev/urandom >> "$work/pack.bin"   # new content each round, so each publish stores a new pack
done

read -r blob size sha < <(curl -sf "$origin/v1/apps/$app/manifest" | python3 -c 'import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); p=[p for p in m["packs"] if p["id"]=="big"][0]; print(p["url"], p["size"], p["sha256"])')
# The origin's pack decrypts with the reference decryptor to what depot sync installs.
curl -sf -o "$work/check.pack" "$blob"
"$work/pack-tool" decrypt "$work/check.pack" "$work/check.bin" "$key_id" "$key_hex"
sync_depot=(); sync_peer=(); sync_rss=()
for round in $(seq 0 "$rounds"); do
  rm -rf "$work/dest"; sync; t0=$(now)
  "$depot" sync --server "$origin" --app $app --config "$work/client.json" --dest "$work/dest" --quiet > /dev/null &
  p=$!; rss=0; while kill -0 $p 2>/dev/null; do r=$(peak_rss $p); rss=$r; sleep 0.1; done; wait $p
  t1=$(now); [ "$round" = 0 ] || { sync_depot+=("$(elapsed "$t0" "$t1")"); sync_rss+=("$rss"); }
  cmp -s "$work/dest/packs/big" "$work/check.bin" || { echo "depot sync installed other bytes" >&2; exit 1; }
  rm -f "$work/peer.pack" "$work/peer.bin"; sync; t0=$(now)
  curl -sf -o "$work/peer.pack" "$blob"
  [ "$(openssl dgst -sha256 -r "$work/peer.pack" | cut -d' ' -f1)" = "$sha" ] || { echo "curl got other bytes" >&2; exit 1; }
  "$work/pack-tool" decrypt "$work/peer.pack" "$work/peer.bin" "$key_id" "$key_hex"
  t1=$(now); [ "$round" = 0 ] || sync_peer+=("$(elapsed "$t0" "$t1")")
done
origin_peak=$(peak_rss "${pids[0]}")
{
echo "AssetDepot client and ingest benchmark, $(date -u +%Y-%m-%d), $(nproc) cores; ${size_mib} MiB, $rounds interleaved rounds"
echo
printf '%-34s %-22s %-22s %-12s %s\n' "path" "depot s, median (spread)" "peer pipeline s" "depot/peer" "depot peak RSS MiB"
printf '%-34s %-22s %-22s %-12s %s\n' "sync (download, verify, decrypt)" "$(median "${sync_depot[@]}") ($(spread "${sync_depot[@]}"))" \
  "$(median "${sync_peer[@]}") ($(spread "${sync_peer[@]}"))" "$(ratio "$(median "${sync_depot[@]}")" "$(median "${sync_peer[@]}")")" "$(median "${sync_rss[@]}")"
printf '%-34s %-22s %-22s %-12s %s\n' "ingest (encrypt, hash, upload)" "$(median "${ingest_depot[@]}") ($(spread "${ingest_depot[@]}"))" \
  "$(median "${ingest_peer[@]}") ($(spread "${ingest_peer[@]}"))" "$(ratio "$(median "${ingest_depot[@]}")" "$(median "${ingest_peer[@]}")")" "$(median "${publish_rss[@]}")"
echo "origin peak RSS over the whole run (ingesting and serving ${size_mib} MiB packs): $origin_peak MiB"
} | tee "$out"
