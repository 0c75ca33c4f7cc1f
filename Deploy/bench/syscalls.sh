#!/usr/bin/env bash
# System calls per request, counted by strace (repeatable on a noisy machine): the origin, the
# plain-C libmicrohttpd file server (mhd-fileserver.c, the origin's MHD options) and nginx (as
# serve.sh runs it, one worker here), each serving the same 1 KiB and 64 KiB blobs to REQUESTS
# GETs on 8 keep-alive connections (each answer checked: 200 and the blob's bytes), minus a run
# of 50; and one download of a BIG_MIB blob. What a target missed by a small margin costs.
#   Deploy/bench/syscalls.sh [REQUESTS] [BIG_MIB]     (defaults 2000, 1024)
set -euo pipefail
requests=${1:-2000}; big_mib=${2:-1024}
command -v strace >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null; }
source "$(dirname "$0")/lib.sh" syscalls --log-level info --threads 1
cc -O2 -o "$work/mhd-fileserver" Deploy/bench/mhd-fileserver.c $(pkg-config --cflags --libs libmicrohttpd)
head -c 1024 /dev/urandom > "$work/small"; head -c 65536 /dev/urandom > "$work/medium"; head -c $((big_mib << 20)) /dev/urandom > "$work/big"
for name in small medium big; do curl -sf -o /dev/null -X PUT -T "$work/$name" -H "Authorization: Bearer $token" "$origin/v1/apps/$app/packs/$name"; done
curl -sf -o /dev/null -X POST -H "Authorization: Bearer $token" "$origin/v1/apps/$app/releases"
curl -sf -o "$work/manifest.json" "$origin/v1/apps/$app/manifest"
read -r small medium big <<< "$(python3 - "$work/manifest.json" <<'PY'
import base64, json, sys, urllib.parse
m = json.loads(base64.b64decode(json.load(open(sys.argv[1]))["payload"]))
by = {p["id"]: urllib.parse.urlparse(p["url"]).path for p in m["packs"]}
print(by["small"], by["medium"], by["big"])
PY
)"
mkdir -p "$work/www/v1/apps/$app/blobs"
for p in $small $medium $big; do h=$(basename "$p"); ln "$work/data/blobs/${h:0:2}/$h" "$work/www$p"; done
chmod -R a+rX "$work/www" "$work/data/blobs"
nginx_port=$(free_port); c_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1; user root; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; default_type application/octet-stream;
  server { listen 127.0.0.1:$nginx_port; root $work/www; etag on; add_header Cache-Control "public, max-age=31536000, immutable"; }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"
"$work/mhd-fileserver" "$work/www" "$c_port" 1 > "$work/c.log" &
pids+=($!)
sleep 0.5
nginx_worker=$(pgrep -P "$(cat "$work/nginx/nginx.pid")" | head -1)
declare -A base=([origin]=$origin [mhd-c]=http://127.0.0.1:$c_port [nginx]=http://127.0.0.1:$nginx_port)
declare -A pid=([origin]=${pids[0]} [mhd-c]=${pids[-1]} [nginx]=$nginx_worker)

client() { # url path count: GETs on 8 keep-alive connections, each checked against the file
  python3 - "$1" "$2" "$3" "$work/www$2" <<'PY'
import http.client, sys, urllib.parse
url, path, n, want = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], int(sys.argv[3]), open(sys.argv[4], "rb").read()
conns = [http.client.HTTPConnection(url.hostname, url.port) for _ in range(8)]
for i in range(n):
    c = conns[i % 8]; c.request("GET", path); r = c.getresponse(); body = r.read()
    assert r.status == 200 and body == want, (r.status, len(body))
PY
}
count() { # peer path n -> "name=calls …" for the traced process (all threads)
  local out="$work/strace.$1.$3"
  strace -f -c -o "$out" -p "${pid[$1]}" 2>/dev/null & local tracer=$!
  sleep 0.5
  client "${base[$1]}" "$2" "$3"
  sleep 0.2; kill -INT $tracer; wait $tracer 2>/dev/null || true
  awk 'NF >= 5 && $4 ~ /^[0-9]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" { print $NF, $4 }' "$out"
}
per_request() { # peer path -> calls per request by name, total first
  local low high
  low=$(count "$1" "$2" 50); high=$(count "$1" "$2" "$requests")
  python3 - "$requests" <<PY
import sys
n = int(sys.argv[1]) - 50
def parse(text): return {l.split()[0]: int(l.split()[1]) for l in text.strip().splitlines() if l.strip()}
low, high = parse("""$low"""), parse("""$high""")
skip = {"futex", "clock_nanosleep", "restart_syscall", "write", "madvise", "mprotect", "mmap", "munmap"}
rows = {k: (high[k] - low.get(k, 0)) / n for k in high if k not in skip}
rows = {k: v for k, v in rows.items() if v >= 0.05}
print(f"{sum(rows.values()):.1f}  (" + ", ".join(f"{k} {v:.2f}" for k, v in sorted(rows.items(), key=lambda kv: -kv[1])) + ")")
PY
}
echo "system calls per request, $(date -u +%Y-%m-%d), one server thread or worker each; $requests GETs on 8 keep-alive connections (each checked) minus 50"
echo "(futex, timers and the origin's buffered log writes left out; they are not per request)"
for object in small medium; do
  case $object in small) p=$small; label="1 KiB blob";; medium) p=$medium; label="64 KiB blob";; esac
  for peer in origin mhd-c nginx; do printf '  %-12s %-7s %s\n' "$label" "$peer" "$(per_request "$peer" "$p")"; done
done
echo "one download of the ${big_mib} MiB blob with curl:"
for peer in origin mhd-c nginx; do
  out="$work/strace.big.$peer"
  strace -f -c -o "$out" -p "${pid[$peer]}" 2>/dev/null & tracer=$!
  sleep 0.5; code=$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "${base[$peer]}$big"); sleep 0.2
  kill -INT $tracer; wait $tracer 2>/dev/null || true
  [ "$code" = "200 $(stat -c %s "$work/www$big")" ] || { echo "$peer: $code for the big blob" >&2; exit 1; }
  printf '  %-7s %s\n' "$peer" "$(awk '$NF == "sendfile" || $NF == "epoll_wait" || $NF == "writev" { print $NF, $4 }' "$out" | tr '\n' ' ')"
done
