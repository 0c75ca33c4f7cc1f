#!/usr/bin/env bash
# The client over https: `depot fetch` (the code `depot sync` downloads with: its own HTTP/1.1
# engine, TLS through OpenSSL's libssl) against curl, fetching the same blob through the same
# real nginx TLS edge (Deploy/nginx/snippets/assetdepot-locations.conf, a CA made here) on loopback,
# interleaved; both are checked to answer 200 with the right bytes before anything is timed.
# Then `depot publish` of the same size through the edge.
#   Deploy/bench/https.sh [SIZE_MIB] [ROUNDS]     (defaults 1024, 5)
set -euo pipefail
size_mib=${1:-1024}
rounds=${2:-5}
host=assets.example.test
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
source "$(dirname "$0")/origin.sh" --log-level warning --public-url "https://$host:$port"
origin_port=${url##*:}
edge_url="https://$host:$port"
resolve=(--resolve "$host:$port:127.0.0.1")

# A CA and a certificate for the edge.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 1 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/leaf.key" -out "$work/leaf.csr" -subj "/CN=$host" 2>/dev/null
printf 'subjectAltName=DNS:%s\n' "$host" > "$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -out "$work/leaf.pem" -days 1 -extfile "$work/leaf.ext" 2>/dev/null

mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
daemon off; worker_processes 2; user root; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  upstream assetdepot_origin { server 127.0.0.1:$origin_port; keepalive 8; }
  proxy_cache_path $work/nginx/cache keys_zone=assetdepot:8m use_temp_path=off;
  limit_conn_zone \$binary_remote_addr zone=assetdepot_per_ip:1m;
  server {
    listen 127.0.0.1:$port ssl http2;
    ssl_certificate $work/leaf.pem; ssl_certificate_key $work/leaf.key;
    include $root/Deploy/nginx/snippets/assetdepot-locations.conf;
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
nginx_pid=$!
trap 'kill $server_pid $nginx_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null --cacert "$work/ca.pem" "${resolve[@]}" "$edge_url/nothing" && break; sleep 0.1; done

head -c $((size_mib << 20)) /dev/urandom > "$work/pack.bin"
t0=$(now)
"$depot" publish "$work/pack.bin" --server "$edge_url" --app $app --pack big --token "$token" --release --quiet \
  --ca-file "$work/ca.pem" "${resolve[@]}" >/dev/null
t1=$(now)
echo "depot publish of ${size_mib} MiB over https through the edge: $(elapsed "$t0" "$t1") s"

read -r blob size sha < <(curl -sf --cacert "$work/ca.pem" "${resolve[@]}" "$edge_url/v1/apps/$app/manifest" \
  | python3 -c 'import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); p=[p for p in m["packs"] if p["id"]=="big"][0]; print(p["url"], p["size"], p["sha256"])')
# Both peers answer 200 with the blob's bytes (this also fills the edge's cache).
code=$(curl -s -o "$work/curl.bin" -w '%{http_code}' --cacert "$work/ca.pem" "${resolve[@]}" "$blob")
[ "$code" = 200 ] && [ "$(sha256sum < "$work/curl.bin" | cut -d' ' -f1)" = "$sha" ] || { echo "curl did not get the blob (HTTP $code)" >&2; exit 1; }
"$depot" fetch "$blob" --out "$work/depot.bin" --size "$size" --sha256 "$sha" --ca-file "$work/ca.pem" "${resolve[@]}" --quiet >/dev/null

echo "download of a ${size_mib} MiB blob over https from the edge's cache, $rounds interleaved rounds:"
ratios=(); curl_times=(); depot_times=()
run_curl() { rm -f "$work/curl.bin"; sync; t0=$(now); curl -sf -o "$work/curl.bin" --cacert "$work/ca.pem" "${resolve[@]}" "$blob"; t1=$(now); c=$(elapsed "$t0" "$t1"); }
run_depot() {
  rm -f "$work/depot.bin"*; sync; t0=$(now)
  "$depot" fetch "$blob" --out "$work/depot.bin" --size "$size" --ca-file "$work/ca.pem" "${resolve[@]}" --quiet >/dev/null
  t1=$(now); d=$(elapsed "$t0" "$t1")
}
for round in $(seq "$rounds"); do
  if ((round % 2)); then run_curl; run_depot; else run_depot; run_curl; fi
  cmp -s "$work/curl.bin" "$work/depot.bin" || { echo "downloads differ" >&2; exit 1; }
  ratios+=("$(awk -v a="$d" -v b="$c" 'BEGIN { printf "%.2f", b / a }')"); curl_times+=("$c"); depot_times+=("$d")
  echo "  round $round: curl $c s ($(awk -v s="$size" -v t="$c" 'BEGIN { printf "%.2f", s / t / 1e9 }') GB/s), depot fetch $d s ($(awk -v s="$size" -v t="$d" 'BEGIN { printf "%.2f", s / t / 1e9 }') GB/s), depot/curl ${ratios[-1]}"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "depot/curl throughput over https: median $(median "${ratios[@]}"), range $(printf '%s\n' "${ratios[@]}" | sort -n | head -1)–$(printf '%s\n' "${ratios[@]}" | sort -n | tail -1)"
