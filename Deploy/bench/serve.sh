#!/usr/bin/env bash
# Serving benchmark, side by side on loopback: the origin (release build), nginx (as shipped
# here: sendfile, tcp_nopush, 2 workers), nginx with open_file_cache on, and the plain-C
# libmicrohttpd file server of mhd-fileserver.c (the origin's MHD options: turbo, 8 KiB
# connection memory), serving the same bytes. Every peer is checked to answer 200 with the right
# bytes before anything is timed.
#   small objects: a 1 KiB blob, a 64 KiB blob and the live manifest of a release of PACKS packs,
#     wrk -t2 -c64 for SECONDS each, ROUNDS interleaved rounds (A B C D A B C D …): req/s and p99;
#   large objects: a BIG_MIB blob with curl, alone and 4 at once (GB/s), the file read once
#     before, each round in another peer order;
#   memory: the origin's resident set sampled every 0.1 s through the whole run, and with 100
#     curls downloading the big blob at once. With FILL=N the store holds N more blobs (files named
#     as blobs, never served) and, before anything is timed, 500 more released blobs are fetched
#     once each (48 KiB and 100 KiB), more than the origin keeps answers of: its cache is full.
# Prints a table of medians, spreads and ratios, and writes it to Deploy/bench/last-serve.txt (or $OUT; not committed).
#   Deploy/bench/serve.sh [ROUNDS] [SECONDS] [PACKS] [BIG_MIB]     (defaults 3, 5, 1000, 1024)
set -euo pipefail
rounds=${1:-3}; seconds=${2:-5}; packs=${3:-1000}; big_mib=${4:-1024}
out=${OUT:-$(cd "$(dirname "$0")" && pwd)/last-serve.txt}
for tool in nginx wrk curl; do
  command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk curl >/dev/null; break; }
done
source "$(dirname "$0")/lib.sh" serve --log-level info
cc -O2 -o "$work/mhd-fileserver" Deploy/bench/mhd-fileserver.c $(pkg-config --cflags --libs libmicrohttpd)
origin_pid=${pids[0]}
fill=${FILL:-0}

# The origin's resident set, sampled every 0.1 s until the end (the highest is reported).
( while kill -0 "$origin_pid" 2>/dev/null; do awk '/VmRSS/ { print $2 }' /proc/$origin_pid/status 2>/dev/null; sleep 0.1; done ) > "$work/rss.log" &
pids+=($!)

# The store of FILL more blobs first, so that every figure below is taken with it.
if [ "$fill" -gt 0 ]; then
  python3 - "$work/data/blobs" "$fill" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    name = os.urandom(32).hex()
    os.makedirs(os.path.join(root, name[:2]), exist_ok=True)
    with open(os.path.join(root, name[:2], name), "wb") as f: f.write(b"filler")
PY
fi

# Staging PACKS small packs on one keep-alive connection, then one release of them all, timed;
# with FILL, 200 packs of 48 KiB and 300 of 100 KiB besides, released with them.
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
if [ "$fill" -gt 0 ]; then
  python3 - "$origin" "$token" "$app" <<'PY'
import http.client, os, sys, urllib.parse
url, token, app = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPConnection(url.hostname, url.port)
for i, size in enumerate([48 << 10] * 200 + [100 << 10] * 300):
    c.request("PUT", f"/v1/apps/{app}/packs/fill{i}", body=os.urandom(size), headers={"Authorization": "Bearer " + token})
    r = c.getresponse(); r.read()
    assert r.status == 202, r.status
PY
fi
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

# The cache filled: every fill blob fetched once (checked: 200 and the manifest's size).
if [ "$fill" -gt 0 ]; then
  python3 - "$origin" "$work/manifest.json" <<'PY'
import base64, http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
m = json.loads(base64.b64decode(json.load(open(sys.argv[2]))["payload"]))
c = http.client.HTTPConnection(url.hostname, url.port)
for p in m["packs"]:
    if not p["id"].startswith("fill"): continue
    c.request("GET", urllib.parse.urlparse(p["url"]).path)
    r = c.getresponse(); body = r.read()
    assert r.status == 200 and len(body) == p["size"], (p["id"], r.status, len(body))
PY
fi

# The same bytes for nginx and the C server: the blob files and the envelope, at the same paths.
mkdir -p "$work/www/v1/apps/$app/blobs"
for p in $small $medium $big; do h=$(basename "$p"); ln "$work/data/blobs/${h:0:2}/$h" "$work/www$p"; done
cp "$work/manifest.json" "$work/www$manifest"
chmod -R a+rX "$work/www" "$work/data/blobs"
nginx_port=$(free_port); ofc_port=$(free_port); c_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2; user root; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; default_type application/octet-stream;
  server { listen 127.0.0.1:$nginx_port; root $work/www; etag on; add_header Cache-Control "public, max-age=31536000, immutable"; }
  server { listen 127.0.0.1:$ofc_port; root $work/www; etag on; add_header Cache-Control "public, max-age=31536000, immutable";
           open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s; }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"
"$work/mhd-fileserver" "$work/www" "$c_port" 2 > "$work/c.log" &
pids+=($!)
for _ in $(seq 50); do grep -q "listening on" "$work/c.log" 2>/dev/null && break; sleep 0.1; done
declare -A base=([origin]=$origin [nginx]=http://127.0.0.1:$nginx_port [nginx-ofc]=http://127.0.0.1:$ofc_port [mhd-c]=http://127.0.0.1:$c_port)
peers=(origin mhd-c nginx nginx-ofc)

# Every peer answers 200 with the same bytes as the origin.
for p in $small $medium $manifest; do
  want=$(curl -sf "$origin$p" | sha256sum)
  for peer in "${peers[@]}"; do
    code=$(curl -s -o "$work/check" -w '%{http_code}' "${base[$peer]}$p")
    [ "$code" = 200 ] && [ "$(sha256sum < "$work/check")" = "$want" ] || { echo "$peer: HTTP $code or other bytes for $p" >&2; exit 1; }
  done
done

declare -A rps p99 headline
wrk_once() { # peer path -> "req/s p99_ms"
  wrk -t2 -c64 -d"${seconds}s" --latency "${base[$1]}$2" > "$work/wrk.out"
  ! grep -q "Non-2xx" "$work/wrk.out" || { echo "$1: non-2xx answers for $2" >&2; exit 1; }
  local r l
  r=$(awk '/Requests\/sec/ { print int($2) }' "$work/wrk.out")
  l=$(awk '$1 == "99%" { v = $2; if (v ~ /us$/) { sub("us", "", v); v = v / 1000 } else if (v ~ /ms$/) { sub("ms", "", v) } else if (v ~ /s$/) { sub("s", "", v); v = v * 1000 } print v }' "$work/wrk.out")
  echo "$r $l"
}
{
echo "AssetDepot serving benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); wrk -t2 -c64 ${seconds}s x $rounds interleaved rounds"
echo "store: $((packs + 3 + (fill > 0 ? 500 : 0))) released blobs$([ "$fill" -gt 0 ] && echo ", $fill more in the store, the origin's kept answers full")"
echo
printf '%-22s %-9s %-22s %-14s %s\n' "object" "peer" "req/s median (spread)" "p99 ms median" "origin / peer"
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
    printf '%-22s %-9s %-22s %-14s %s\n' "$label" "$peer" "$m ($(spread ${rps[$peer]}))" "$(median ${p99[$peer]})" \
      "$([ "$peer" = origin ] && echo "" || ratio "$o" "$m")"
  done
  faster=$(median ${rps[nginx]}); c=$(median ${rps[mhd-c]}); [ "$c" -gt "$faster" ] && faster=$c
  headline[$object]="$(ratio "$o" "$faster") $(ratio "$o" "$(median ${rps[nginx]})") $(ratio "$o" "$(median ${rps[nginx-ofc]})")"
done
echo
big_size=$(stat -c %s "$work/www$big")
gbps() { awk -v s="$1" -v t="$2" 'BEGIN { printf "%.2f", s / t / 1e9 }'; }
fetch() { # peer count -> seconds for COUNT parallel downloads of the big blob (each checked: 200, every byte)
  local start end
  start=$(date +%s.%N)
  for _ in $(seq "$2"); do curl -sf -o /dev/null -w '%{http_code} %{size_download}\n' "${base[$1]}$big" >> "$work/big.codes" & done
  wait
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
cat "$work/www$big" > /dev/null   # in the page cache before the first round, for every peer alike
big_peers=(origin mhd-c nginx)
big_rounds=${BIG_ROUNDS:-$rounds}   # single large streams vary most here: run.sh gives them more rounds
printf '%-30s %-9s %-22s %s\n' "large object (${big_mib} MiB)" "peer" "GB/s median (spread)" "origin / peer"
for count in 1 4; do
  declare -A speeds=([origin]="" [nginx]="" [mhd-c]="")
  for round in $(seq "$big_rounds"); do
    # Each round starts with another peer: none always goes first (or last).
    for i in 0 1 2; do
      peer=${big_peers[$(( (i + round) % 3 ))]}
      t=$(fetch "$peer" "$count"); speeds[$peer]+="$(gbps $((big_size * count)) "$t") "
    done
  done
  o=$(median ${speeds[origin]})
  for peer in "${big_peers[@]}"; do
    m=$(median ${speeds[$peer]})
    printf '%-30s %-9s %-22s %s\n' "curl x$count" "$peer" "$m ($(spread ${speeds[$peer]}))" "$([ "$peer" = origin ] && echo "" || ratio "$o" "$m")"
  done
  headline[big$count]="$(ratio "$o" "$(median ${speeds[nginx]})") ($(spread ${speeds[origin]}) GB/s origin, $(spread ${speeds[nginx]}) nginx)"
done
! grep -v "^200 $big_size$" "$work/big.codes" | grep -q . || { echo "a big download was not 200 with every byte: $(sort "$work/big.codes" | uniq -c)" >&2; exit 1; }
echo
# Memory: the origin's peak resident set while CLIENTS curls download the big blob at once.
clients=${CLIENTS:-100}
before=$(awk '/VmHWM/ { print $2 }' /proc/$origin_pid/status)
start=$(date +%s.%N)
for _ in $(seq "$clients"); do curl -sf -o /dev/null "$origin$big" & done
wait
end=$(date +%s.%N)
peak=$(awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' /proc/$origin_pid/status)
sampled=$(sort -n "$work/rss.log" | tail -1 | awk '{ printf "%.1f", $1 / 1024 }')
echo "memory: origin peak RSS $peak MiB with $clients curls downloading the ${big_mib} MiB blob at once ($(awk -v a="$start" -v b="$end" -v s="$big_size" -v n="$clients" 'BEGIN { printf "%.2f", s * n / (b - a) / 1e9 }') GB/s in all; peak before: $(awk -v k="$before" 'BEGIN { printf "%.1f", k / 1024 }') MiB); highest sample through the run $sampled MiB"
echo "publishing: $packs packs staged by PUT on one connection in $(awk -v a="$stage_start" -v b="$stage_end" 'BEGIN { printf "%.2f", b - a }') s; one release of them all in $(awk -v a="$release_start" -v b="$release_end" 'BEGIN { printf "%.3f", b - a }') s"
echo
echo "targets (medians of this run)                 origin / peer                                       target"
read -r f n o <<< "${headline[small]}"; echo "1 KiB blob, req/s                              $f the faster of nginx and mhd-c (nginx $n, nginx open_file_cache $o)   >= 1.0"
read -r f n o <<< "${headline[medium]}"; echo "64 KiB blob, req/s                             $f the faster of nginx and mhd-c (nginx $n)   >= 1.0"
read -r f n o <<< "${headline[manifest]}"; echo "live manifest, req/s                           $n nginx   >= 1.0"
echo "${big_mib} MiB blob, one curl, GB/s                  ${headline[big1]}   >= 1.0"
echo "${big_mib} MiB blob, four curls at once, GB/s        ${headline[big4]}   >= 1.0"
echo "origin RSS, MiB                                $(awk -v a="$peak" -v b="$sampled" 'BEGIN { print (a > b ? a : b) }') (peak through the run)   < 64"
} | tee "$out"
