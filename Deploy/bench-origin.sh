#!/usr/bin/env bash
# Serving benchmark: the origin (release build) and nginx serve the same blob files side by side.
#   1. CLIENTS concurrent curl downloads of one SIZE_MIB blob: wall time, aggregate throughput,
#      and the server's peak resident memory (sampled every 100 ms).
#   2. wrk on a 1 KiB and a 64 KiB blob, interleaved A B A B, requests per second.
# Prints each figure for both servers and the ratio origin / nginx.
#   Deploy/bench-origin.sh [SIZE_MIB] [CLIENTS]      (defaults: 1024, 50)
set -euo pipefail
size_mib=${1:-1024}
clients=${2:-50}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
for tool in nginx wrk curl bc; do
  command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk curl bc >/dev/null; break; }
done
swift build -c release --product depot >/dev/null
depot="$root/.build/release/depot"
work=$(mktemp -d /tmp/depot-bench-origin.XXXXXX)
cleanup() { kill "$depot_pid" 2>/dev/null || true; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$depot" serve --data "$work/data" --listen 127.0.0.1:0 --threads 2 2> /dev/null > "$work/serve.log" &
depot_pid=$!
for _ in $(seq 100); do grep -q "depot sync" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
depot_url=$(head -1 "$work/serve.log" | sed -E 's/.*listening on ([^,]+),.*/http:\/\/\1/')
token=$(grep 'export DEPOT_TOKEN=' "$work/serve.log" | sed 's/.*=//')
app=com.example.dev

publish() { # name size_bytes -> blob path (relative to blobs/)
  head -c "$2" /dev/urandom > "$work/$1"
  "$depot" publish "$work/$1" --server "$depot_url" --app $app --pack "$1" --token "$token" --release >/dev/null
  curl -sf "$depot_url/v1/apps/$app/manifest" | python3 -c "import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)['payload'])); print([p['sha256'] for p in m['packs'] if p['id']=='$1'][0])"
}
big=$(publish big $((size_mib << 20)))
small=$(publish small 1024)
medium=$(publish medium 65536)

nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/nginx/v1/apps/$app"
ln -s "$work/data/blobs" "$work/nginx/blobs-src"
mkdir -p "$work/nginx/v1/apps/$app/blobs"
for h in $big $small $medium; do ln -s "$work/data/blobs/${h:0:2}/$h" "$work/nginx/v1/apps/$app/blobs/$h"; done
cat > "$work/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on; tcp_nopush on; keepalive_requests 1000000;
  default_type application/octet-stream;
  server { listen 127.0.0.1:$nginx_port; root $work/nginx; etag on;
           add_header Cache-Control "public, max-age=31536000, immutable"; }
}
CONF
# nginx's workers run as an unprivileged user: let them read the blobs (keys/ stays 0700).
chmod 755 "$work" "$work/data" "$work/data/blobs" "$work/data/blobs"/*
nginx -c "$work/nginx.conf"
sleep 0.5
nginx_url="http://127.0.0.1:$nginx_port"
# Both servers must return the same bytes before anything is timed.
for h in $big $small $medium; do
  for url in "$depot_url" "$nginx_url"; do
    got=$(curl -sf "$url/v1/apps/$app/blobs/$h" | sha256sum | cut -c1-64)
    [ "$got" = "$h" ] || { echo "error: $url did not serve blob $h correctly" >&2; exit 1; }
  done
done

rss_of() { local sum=0; for p in "$@"; do sum=$((sum + $(awk '/VmRSS/ {print $2}' "/proc/$p/status"))); done; echo $sum; }
nginx_pids() { pgrep -f "nginx: " | tr '\n' ' '; }

parallel_download() { # url pids... -> prints "seconds peak_rss_kib"
  local url=$1; shift
  local peak=0 pids=()
  local t0=$(date +%s.%N)
  for _ in $(seq "$clients"); do curl -sf -o /dev/null "$url" & pids+=($!); done
  while kill -0 "${pids[@]}" 2>/dev/null; do
    local now=$(rss_of "$@"); ((now > peak)) && peak=$now; sleep 0.1
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  local t1=$(date +%s.%N)
  ((failed == 0)) || { echo "error: $failed downloads from $url failed" >&2; exit 1; }
  echo "$(echo "$t1 - $t0" | bc) $peak"
}

echo "== $clients concurrent downloads of a ${size_mib} MiB blob =="
read -r d_time d_rss < <(parallel_download "$depot_url/v1/apps/$app/blobs/$big" "$depot_pid")
read -r n_time n_rss < <(parallel_download "$nginx_url/v1/apps/$app/blobs/$big" $(nginx_pids))
total_mib=$((size_mib * clients))
printf "origin: %6.2f s  %7.0f MiB/s  peak RSS %5.1f MiB\n" "$d_time" "$(echo "$total_mib / $d_time" | bc -l)" "$(echo "$d_rss / 1024" | bc -l)"
printf "nginx:  %6.2f s  %7.0f MiB/s  peak RSS %5.1f MiB (master + workers)\n" "$n_time" "$(echo "$total_mib / $n_time" | bc -l)" "$(echo "$n_rss / 1024" | bc -l)"
printf "throughput ratio origin/nginx: %.2f\n" "$(echo "$n_time / $d_time" | bc -l)"

[ "${SKIP_WRK:-}" = 1 ] && exit 0
echo "== wrk, 2 threads, 64 connections, 5 s each, interleaved =="
for name in small medium; do
  hash=$([ $name = small ] && echo "$small" || echo "$medium")
  d_sum=0; n_sum=0
  for round in 1 2 3; do
    d=$(wrk -t2 -c64 -d5s "$depot_url/v1/apps/$app/blobs/$hash" | tee "$work/wrk.out" | awk '/Requests\/sec/ {print $2}')
    ! grep -q "Non-2xx" "$work/wrk.out" || { echo "error: origin answered non-2xx under load" >&2; exit 1; }
    n=$(wrk -t2 -c64 -d5s "$nginx_url/v1/apps/$app/blobs/$hash" | tee "$work/wrk.out" | awk '/Requests\/sec/ {print $2}')
    ! grep -q "Non-2xx" "$work/wrk.out" || { echo "error: nginx answered non-2xx under load" >&2; exit 1; }
    echo "  $name round $round: origin $d req/s, nginx $n req/s"
    d_sum=$(echo "$d_sum + $d" | bc); n_sum=$(echo "$n_sum + $n" | bc)
  done
  printf "%s blob (%s bytes): origin/nginx = %.2f\n" "$name" "$(stat -c %s "$work/data/blobs/${hash:0:2}/$hash")" "$(echo "$d_sum / $n_sum" | bc -l)"
done
echo "origin peak RSS over the whole run: $(echo "$(awk '/VmHWM/ {print $2}' /proc/$depot_pid/status) / 1024" | bc -l | xargs printf '%.1f') MiB"
