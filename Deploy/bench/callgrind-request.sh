#!/usr/bin/env bash
# Instructions per request for a 1 KiB blob GET on keep-alive connections, counted by valgrind's
# callgrind (repeatable on a noisy machine): the origin, the plain-C libmicrohttpd file server of
# Deploy/bench/mhd-fileserver.c with the same MHD options on the same file (the difference is the
# Swift layer's cost), and nginx (one process, as serve.sh configures it); then the origin's
# parts, by function. (System calls per request: Deploy/bench/syscalls.sh.)
#   Deploy/bench/callgrind-request.sh [REQUESTS]     (default 2000)
set -euo pipefail
requests=${1:-2000}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
swift build -c release --product depot >/dev/null
depot="$root/.build/release/depot"
work=$(mktemp -d /tmp/depot-callgrind.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
# valgrind 3.19 cannot read the DWARF 5 that this toolchain writes: count a copy without it
# (function names stay, from the symbol table).
cp "$depot" "$work/depot" && strip --strip-debug "$work/depot"

# A data folder with one 1 KiB blob, made by a normal origin run.
"$depot" serve --data "$work/data" --listen 127.0.0.1:0 > "$work/setup.log" 2>/dev/null &
pid=$!
for _ in $(seq 100); do grep -q "depot sync" "$work/setup.log" 2>/dev/null && break; sleep 0.1; done
url=$(head -1 "$work/setup.log" | sed -E 's/.*listening on ([^,]+),.*/http:\/\/\1/')
token=$(grep 'export DEPOT_TOKEN=' "$work/setup.log" | sed 's/.*=//')
head -c 1024 /dev/urandom > "$work/small"
"$depot" publish "$work/small" --server "$url" --app com.example.dev --pack small --token "$token" --release --quiet >/dev/null
read -r path size < <(curl -sf "$url/v1/apps/com.example.dev/manifest" | python3 -c 'import sys,json,base64,urllib.parse; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); p=m["packs"][0]; print(urllib.parse.urlparse(p["url"]).path, p["size"])')
kill $pid; wait $pid 2>/dev/null || true

# n requests on 8 keep-alive connections; every answer checked (200, the blob's size).
client() {
  python3 - "$1" "$2" "$path" "$size" <<'PY'
import http.client, sys
port, n, path, size = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
conns = [http.client.HTTPConnection("127.0.0.1", port) for _ in range(8)]
for i in range(n):
    c = conns[i % 8]
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    assert r.status == 200 and len(body) == size, (r.status, len(body))
PY
}

count() { # requests -> total instructions of the origin process
  local n=$1 out="$work/callgrind.$1"
  valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no "$work/depot" serve --data "$work/data" --listen 127.0.0.1:0 --threads 1 \
    --log-level info > "$work/serve.$n.log" 2>"$work/access.$n.log" &
  local vpid=$!
  for _ in $(seq 600); do grep -q "listening on" "$work/serve.$n.log" 2>/dev/null && break; sleep 0.1; done
  local port
  port=$(head -1 "$work/serve.$n.log" | sed -E 's/.*listening on [^:]+:([0-9]+),.*/\1/')
  client "$port" 50   # warm-up: caches, first allocations
  [ "$n" -gt 0 ] && client "$port" "$n"
  kill -TERM $vpid; wait $vpid 2>/dev/null || true
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }'
}
low=$(count 0)
high=$(count "$requests")
per=$(( (high - low) / requests ))

# The plain-C peer on the same bytes at the same path.
cc -O2 -o "$work/mhd-fileserver" "$root/Deploy/bench/mhd-fileserver.c" $(pkg-config --cflags --libs libmicrohttpd)
mkdir -p "$work/croot$(dirname "$path")"
blob=$(basename "$path")
cp "$work/data/blobs/${blob:0:2}/$blob" "$work/croot$path"
count_c() {
  local n=$1 out="$work/callgrind.c.$1"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$work/mhd-fileserver" "$work/croot" 0 1 > "$work/c.$n.log" 2>/dev/null &
  local vpid=$!
  for _ in $(seq 600); do grep -q "listening on" "$work/c.$n.log" 2>/dev/null && break; sleep 0.1; done
  local port
  port=$(sed -E 's/listening on ([0-9]+)/\1/' "$work/c.$n.log")
  client "$port" 50
  [ "$n" -gt 0 ] && client "$port" "$n"
  kill -TERM $vpid; wait $vpid 2>/dev/null || true
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }'
}
c_low=$(count_c 0)
c_high=$(count_c "$requests")
c_per=$(( (c_high - c_low) / requests ))
# nginx, one process (no master), on the same file; counted as the others.
cat > "$work/nginx.conf" <<CONF
worker_processes 1; daemon off; master_process off; user root; pid $work/nginx.pid; error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; default_type application/octet-stream;
  server { listen 127.0.0.1:NGINX_PORT; root $work/croot; etag on; add_header Cache-Control "public, max-age=31536000, immutable"; }
}
CONF
count_nginx() {
  local n=$1 out="$work/callgrind.nginx.$1" port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed "s/NGINX_PORT/$port/" "$work/nginx.conf" > "$work/nginx.$n.conf"
  valgrind --tool=callgrind --callgrind-out-file="$out" nginx -c "$work/nginx.$n.conf" -p "$work" > /dev/null 2>&1 &
  local vpid=$!
  for _ in $(seq 600); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  client "$port" 50
  [ "$n" -gt 0 ] && client "$port" "$n"
  kill -QUIT $vpid; wait $vpid 2>/dev/null || true
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }'
}
chmod -R a+rX "$work/croot"
n_low=$(count_nginx 0)
n_high=$(count_nginx "$requests")
n_per=$(( (n_high - n_low) / requests ))
echo "instructions per 1 KiB blob GET on keep-alive connections (each answer checked):"
echo "  origin (access log and metrics on): $per"
echo "  plain-C libmicrohttpd file server, same options: $c_per"
echo "  nginx, as serve.sh runs it (no open_file_cache, no access log): $n_per"
echo "  the Swift layer: $((per - c_per)) ($(awk -v a="$per" -v b="$c_per" 'BEGIN { printf "%.2f", a / b }')x the C server's total)"
echo "per request, inclusive, by function (the difference between the two runs, top 30):"
callgrind_annotate --inclusive=yes --threshold=100 "$work/callgrind.0" 2>/dev/null > "$work/annotate.0" || true
callgrind_annotate --inclusive=yes --threshold=100 "$work/callgrind.$requests" 2>/dev/null > "$work/annotate.n" || true
python3 - "$work/annotate.0" "$work/annotate.n" "$requests" <<'PY'
import re, subprocess, sys
def read(path):
    out = {}
    for line in open(path, errors="replace"):
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+\S*?:(\S+)", line)
        if m: out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out
low, high, n = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
rows = sorted(((high[k] - low.get(k, 0)) / n, k) for k in high)[::-1][:30]
names = subprocess.run(["swift", "demangle", "--simplified", "--compact"], input="\n".join(k for _, k in rows), capture_output=True, text=True).stdout.split("\n")
for (cost, _), name in zip(rows, names):
    print(f"{cost:10.0f}  {name[:150]}")
PY
