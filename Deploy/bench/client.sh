#!/usr/bin/env bash
# The client and the ingest path against sequential peer pipelines, on loopback, interleaved:
#   sync:   `depot sync` of one pack of SIZE MiB (download, SHA-256, decrypt, install) vs curl to a
#           file, then `openssl dgst -sha256`, then pack-tool.c decrypting it (fsync), one after another;
#   ingest: `depot publish` of SIZE MiB vs pack-tool.c encrypting it (fsync), `openssl dgst -sha256`,
#           and curl uploading the container (to nginx, which discards it), one after another.
# Both pipelines are checked: the peer's plaintext equals the original, and the origin's pack
# decrypts with the reference decryptor. Peak resident memory of the depot processes is reported.
# Round 0 of each is a warm-up, not counted (this VM's first touch of fresh memory is slow).
# Before every timed run the page cache is written back and dropped (when this user may) and the
# input is read once, so each pipeline starts from the same memory: a freshly booted VM pays for
# the first touch of every page, and the origin keeps each round's blob where the peers delete
# theirs, which otherwise charged depot alone for fresh memory.
# CPU seconds (user + system) of every process of a pipeline, servers included, are reported
# too: on 2 cores a pipeline cannot finish in less than half its CPU time.
# Prints a table of medians, spreads and ratios; writes it to Deploy/bench/last-client.txt (or $OUT; not committed).
#   Deploy/bench/client.sh [SIZE_MIB] [ROUNDS]     (defaults 1024, 3)
set -euo pipefail
size_mib=${1:-1024}; rounds=${2:-3}
out=${OUT:-$(cd "$(dirname "$0")" && pwd)/last-client.txt}
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

# settle FILE: written back, cache dropped (root only; BENCH_DROP_CACHES=0 to skip), FILE read once.
settle() { sync; if [ "${BENCH_DROP_CACHES:-1}" = 1 ] && [ -w /proc/sys/vm/drop_caches ]; then echo 1 > /proc/sys/vm/drop_caches; fi; cat "$1" > /dev/null; }
# tcpu CMD…: runs CMD, adding "user system maxRSS-KiB" to $work/cpu.txt.
tcpu() { /usr/bin/time -f "%U %S %M" -a -o "$work/cpu.txt" "$@"; }
# The servers' CPU ticks (the origin and nginx's workers).
server_ticks() { local t=0 p; for p in "${pids[0]}" $(pgrep -P "$(cat "$work/nginx/nginx.pid")"); do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo $t; }
cpu_begin() { : > "$work/cpu.txt"; ticks0=$(server_ticks); }
cpu_end() { awk -v t=$(( $(server_ticks) - ticks0 )) -v hz="$(getconf CLK_TCK)" '{ s += $1 + $2 } END { printf "%.2f", s + t / hz }' "$work/cpu.txt"; }
last_rss() { awk 'END { printf "%.1f", $3 / 1024 }' "$work/cpu.txt"; }

# Ingest first (it also puts the pack on the origin for the sync rounds).
ingest_depot=(); ingest_peer=(); publish_rss=(); ingest_depot_cpu=(); ingest_peer_cpu=()
for round in $(seq 0 "$rounds"); do
  settle "$work/pack.bin"; cpu_begin; t0=$(now)
  tcpu "$depot" publish "$work/pack.bin" --server "$origin" --app $app --pack big --token "$token" --release --quiet > /dev/null
  t1=$(now); [ "$round" = 0 ] || { ingest_depot+=("$(elapsed "$t0" "$t1")"); publish_rss+=("$(last_rss)"); ingest_depot_cpu+=("$(cpu_end)"); }
  rm -f "$work/peer.pack"; settle "$work/pack.bin"; cpu_begin; t0=$(now)
  tcpu "$work/pack-tool" encrypt "$work/pack.bin" "$work/peer.pack" "$key_id" "$key_hex"
  tcpu openssl dgst -sha256 "$work/peer.pack" > /dev/null
  tcpu curl -sf -o /dev/null -T "$work/peer.pack" "http://127.0.0.1:$nginx_port/upload"
  t1=$(now); [ "$round" = 0 ] || { ingest_peer+=("$(elapsed "$t0" "$t1")"); ingest_peer_cpu+=("$(cpu_end)"); }
  head -c 17 /dev/urandom >> "$work/pack.bin"   # new content each round, so each publish stores a new pack
done

read -r blob size sha < <(curl -sf "$origin/v1/apps/$app/manifest" | python3 -c 'import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); p=[p for p in m["packs"] if p["id"]=="big"][0]; print(p["url"], p["size"], p["sha256"])')
# The origin's pack decrypts with the reference decryptor to what depot sync installs.
curl -sf -o "$work/check.pack" "$blob"
"$work/pack-tool" decrypt "$work/check.pack" "$work/check.bin" "$key_id" "$key_hex"
sync_depot=(); sync_peer=(); sync_rss=(); sync_depot_cpu=(); sync_peer_cpu=()
for round in $(seq 0 "$rounds"); do
  rm -rf "$work/dest"; settle "$work/check.pack"; cpu_begin; t0=$(now)
  tcpu "$depot" sync --server "$origin" --app $app --config "$work/client.json" --dest "$work/dest" --quiet > /dev/null
  t1=$(now); [ "$round" = 0 ] || { sync_depot+=("$(elapsed "$t0" "$t1")"); sync_rss+=("$(last_rss)"); sync_depot_cpu+=("$(cpu_end)"); }
  cmp -s "$work/dest/packs/big" "$work/check.bin" || { echo "depot sync installed other bytes" >&2; exit 1; }
  rm -f "$work/peer.pack" "$work/peer.bin"; settle "$work/check.pack"; cpu_begin; t0=$(now)
  tcpu curl -sf -o "$work/peer.pack" "$blob"
  [ "$(tcpu openssl dgst -sha256 -r "$work/peer.pack" | cut -d' ' -f1)" = "$sha" ] || { echo "curl got other bytes" >&2; exit 1; }
  tcpu "$work/pack-tool" decrypt "$work/peer.pack" "$work/peer.bin" "$key_id" "$key_hex"
  t1=$(now); [ "$round" = 0 ] || { sync_peer+=("$(elapsed "$t0" "$t1")"); sync_peer_cpu+=("$(cpu_end)"); }
done
origin_peak=$(awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/${pids[0]}/status")
{
echo "AssetDepot client and ingest benchmark, $(date -u +%Y-%m-%d), $(nproc) cores; ${size_mib} MiB, $rounds interleaved rounds"
echo
printf '%-34s %-22s %-22s %-12s %-18s %s\n' "path" "depot s, median (spread)" "peer pipeline s" "depot/peer" "CPU s depot / peer" "depot peak RSS MiB"
printf '%-34s %-22s %-22s %-12s %-18s %s\n' "sync (download, verify, decrypt)" "$(median "${sync_depot[@]}") ($(spread "${sync_depot[@]}"))" \
  "$(median "${sync_peer[@]}") ($(spread "${sync_peer[@]}"))" "$(ratio "$(median "${sync_depot[@]}")" "$(median "${sync_peer[@]}")")" \
  "$(median "${sync_depot_cpu[@]}") / $(median "${sync_peer_cpu[@]}")" "$(median "${sync_rss[@]}")"
printf '%-34s %-22s %-22s %-12s %-18s %s\n' "ingest (encrypt, hash, upload)" "$(median "${ingest_depot[@]}") ($(spread "${ingest_depot[@]}"))" \
  "$(median "${ingest_peer[@]}") ($(spread "${ingest_peer[@]}"))" "$(ratio "$(median "${ingest_depot[@]}")" "$(median "${ingest_peer[@]}")")" \
  "$(median "${ingest_depot_cpu[@]}") / $(median "${ingest_peer_cpu[@]}")" "$(median "${publish_rss[@]}")"
echo "origin peak RSS over the whole run (ingesting and serving ${size_mib} MiB packs): $origin_peak MiB"
} | tee "$out"
