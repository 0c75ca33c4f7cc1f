#!/usr/bin/env bash
# Serving benchmark, side by side on loopback: the origin (release build), nginx, and the plain-C
# libmicrohttpd file server of mhd-fileserver.c (the origin's MHD options), serving the same
# bytes. Every peer is checked to answer 200 with the right bytes before anything is timed.
#   small objects: a 1 KiB blob, a 64 KiB blob and the live manifest of a release of PACKS packs,
#     wrk -t2 -c64 for SECONDS each, ROUNDS interleaved rounds (A B C A B C …): req/s and p99;
#   large objects: a 1 GiB blob with curl, alone and 4 at once (GB/s), origin and nginx interleaved.
# Prints a table of medians, spreads and ratios, and writes it to bench-serve.txt (or $OUT).
#   Deploy/bench/serve.sh [ROUNDS] [SECONDS] [PACKS] [BIG_MIB]     (defaults 3, 5, 1000, 1024)
set -euo pipefail
rounds=${1:-3}; seconds=${2:-5}; packs=${3:-1000}; big_mib=${4:-1024}
out=${OUT:-$(cd "$(dirname "$0")/../.." && pwd)/bench-serve.txt}
for tool in nginx wrk curl; do
  command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk curl >/dev/null; break; }
done
source "$(dirname "$0")/lib.sh" serve --log-level info
cc -O2 -o "$work/mhd-fileserver" Deploy/bench/mhd-fileserver.c $(pkg-config --cflags --libs libmicrohttpd)

# Staging PACKS small packs on one keep-alive connection, then one release of them all, timed.
stage_start=$(date +%s.%N)
python3 - "$origin" "$token" "$app" "$packs" <<'PY'
import http.client, sys, urllib.parse
url, token, app, n = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
c = http.client.HTTPConnection(url.hostname, url.port)
for i in range(1, n + 1):
    c.request("PUT", f"/v1/apps/{app}/packs/p{i}", body=f"pack {i}\n".encode(), headers={"Authorization": "Bearer " + token})
    r = c.getresponse(); r.read()
    assert r.status == 202, r.status
PY
stage_end=$(date +%s.%N)
head -c 1024 /dev/urandom > "$work/small"; head -c 65536 /dev/urandom > "$work/medium"; head -c $((big_mib << 20)) /dev/urandom > "$work/big"
for name in small medium big; do
  curl -sf -o /dev/null -X PUT -T "$work/$name" -H "Authorization: Bearer $token" "$origin/v1/apps/$app/packs/$name"
done
release_start=$(date +%s.%N)
curl -sf -o /dev/null -X POST -H "Authorization: Bearer $token" "$origin/v1/apps/$app/releases"
release_end=$(date +%s.%N)
curl -sf -o "$work/manifest.json" "$origin/v1/apps/$app/manifest"
paths=$(python3 - "$work/manifest.json" <<'PY'
import base64, json, sys, urllib.parse
m = json.loads(base64.b64decode(json.load(open(sys.argv[1]))["payload"]))
by = {p["id"]: urllib.parse.urlparse(p["url"]).path for p in m["packs"]}
print(by["small"], by["medium"], by["big"])
PY
)
read -r small medium big <<< "$paths"
manifest=/v1/apps/$app/manifest

# The same bytes for nginx and the C server: the blob files and the envelope, at the same paths.
mkdir -p "$work/www/v1/apps/$app/blobs"
for p in $small $medium $big; do h=$(basename "$p"); ln "$work/data/blobs/${h:0:2}/$h" "$work/www$p"; done
cp "$work/manifest.json" "$work/www$manifest"
chmod -R a+rX "$work/www" "$work/data/blobs"
nginx_port=$(free_port); c_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2; user root; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; default_type application/octet-stream;
  server { listen 127.0.0.1:$nginx_port; root $work/www; etag on; add_header Cache-Control "public, max-age=31536000, immutable"; }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"
"$work/mhd-fileserver" "$work/www" "$c_port" 2 > "$work/c.log" &
pids+=($!)
sleep 0.5
declare -A base=([origin]=$origin [nginx]=http://127.0.0.1:$nginx_port [mhd-c]=http://127.0.0.1:$c_port)
peers=(origin mhd-c nginx)

# Every peer answers 200 with the same bytes as the origin.
for p in $small $medium $manifest; do
  want=$(curl -sf "$origin$p" | sha256sum)
  for peer in "${peers[@]}"; do
    code=$(curl -s -o "$work/check" -w '%{http_code}' "${base[$peer]}$p")
    [ "$code" = 200 ] && [ "$(sha256sum < "$work/check")" = "$want" ] || { echo "$peer: HTTP $code or other bytes for $p" >&2; exit 1; }
  done
done

declare -A rps p99
wrk_once() { # peer path -> "req/s p99_ms"
  wrk -t2 -c64 -d"${seconds}s" --latency "${base[$1]}$2" > "$work/wrk.out"
  ! grep -q "Non-2xx" "$work/wrk.out" || { echo "$1: non-2xx answers for $2" >&2; exit 1; }
  local r l
  r=$(awk '/Requests\/sec/ { print int($2) }' "$work/wrk.out")
  l=$(awk '$1 == "99%" { v = $2; if (v ~ /us$/) { sub("us", "", v); v = v / 1000 } else if (v ~ /ms$/) { sub("ms", "", v) } else if (v ~ /s$/) { sub("s", "", v); v = v * 1000 } print v }' "$work/wrk.out")
  echo "$r $l"
}
{
echo "AssetDepot serving benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r); wrk -t2 -c64 ${seconds}s x $rounds interleaved rounds"
echo
printf '%-22s %-8s %-22s %-14s %s\n' "object" "peer" "req/s median (spread)" "p99 ms median" "origin / peer"
for object in small medium manifest; do
  case $object in small) p=$small; label="1 KiB blob";; medium) p=$medium; label="64 KiB blob";; manifest) p=$manifest; label="manifest ($packs packs)";; esac
  for peer in "${peers[@]}"; do rps[$peer]=""; p99[$peer]=""; done
  for round in $(seq "$rounds"); do
    for peer in "${peers[@]}"; do
      read -r r l <<< "$(wrk_once "$peer" "$p")"
      rps[$peer]+="$r "; p99[$peer]+="$l "
    done
  done
  o=$(median ${rps[origin]})
  for peer in "${peers[@]}"; do
    m=$(median ${rps[$peer]})
    printf '%-22s %-8s %-22s %-14s %s\n' "$label" "$peer" "$m ($(spread ${rps[$peer]}))" "$(median ${p99[$peer]})" \
      "$([ "$peer" = origin ] && echo "" || ratio "$o" "$m")"
  done
done
echo
big_size=$(stat -c %s "$work/www$big")
gbps() { awk -v s="$1" -v t="$2" 'BEGIN { printf "%.2f", s / t / 1e9 }'; }
fetch() { # peer count -> seconds for COUNT parallel downloads of the big blob
  local start end
  start=$(date +%s.%N)
  for _ in $(seq "$2"); do curl -sf -o /dev/null "${base[$1]}$big" & done
  wait
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
printf '%-30s %-8s %-18s %s\n' "large object (${big_mib} MiB)" "peer" "GB/s median" "origin / peer"
for count in 1 4; do
  declare -A speeds=([origin]="" [nginx]="" [mhd-c]="")
  for round in $(seq "$rounds"); do
    for peer in "${peers[@]}"; do t=$(fetch "$peer" "$count"); speeds[$peer]+="$(gbps $((big_size * count)) "$t") "; done
  done
  o=$(median ${speeds[origin]})
  for peer in "${peers[@]}"; do
    m=$(median ${speeds[$peer]})
    printf '%-30s %-8s %-18s %s\n' "curl x$count" "$peer" "$m ($(spread ${speeds[$peer]}))" "$([ "$peer" = origin ] && echo "" || ratio "$o" "$m")"
  done
done
echo
# Memory: the origin's peak resident set while CLIENTS curls download the big blob at once.
clients=${CLIENTS:-100}
origin_pid=${pids[0]}
before=$(awk '/VmHWM/ { print $2 }' /proc/$origin_pid/status)
start=$(date +%s.%N)
for _ in $(seq "$clients"); do curl -sf -o /dev/null "$origin$big" & done
wait
end=$(date +%s.%N)
peak=$(awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' /proc/$origin_pid/status)
echo "memory: origin peak RSS $peak MiB with $clients curls downloading the ${big_mib} MiB blob at once ($(awk -v a="$start" -v b="$end" -v s="$big_size" -v n="$clients" 'BEGIN { printf "%.2f", s * n / (b - a) / 1e9 }') GB/s in all; peak before: $(awk -v k="$before" 'BEGIN { printf "%.1f", k / 1024 }') MiB)"
# Store size: the 1 KiB blob again once the store holds FILL more blobs (files named as blobs,
# never served), origin only, interleaved with the same number of rounds.
fill=${FILL:-0}
if [ "$fill" -gt 0 ]; then
  small_before=$(wrk_once origin "$small" | cut -d' ' -f1)
  python3 - "$work/data/blobs" "$fill" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    name = os.urandom(32).hex()
    os.makedirs(os.path.join(root, name[:2]), exist_ok=True)
    with open(os.path.join(root, name[:2], name), "wb") as f: f.write(b"filler")
PY
  small_after=$(wrk_once origin "$small" | cut -d' ' -f1)
  echo "store size: 1 KiB blob at $small_before req/s with $((packs + 3)) blobs, $small_after req/s with $((packs + 3 + fill)) ($(ratio "$small_after" "$small_before"))"
fi
echo "publishing: $packs packs staged by PUT on one connection in $(awk -v a="$stage_start" -v b="$stage_end" 'BEGIN { printf "%.2f", b - a }') s; one release of them all in $(awk -v a="$release_start" -v b="$release_end" 'BEGIN { printf "%.3f", b - a }') s"
} | tee "$out"
