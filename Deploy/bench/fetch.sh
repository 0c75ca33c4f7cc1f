#!/usr/bin/env bash
# Compares the client's downloader (`depot fetch`, the code `depot sync` downloads with) with
# curl on the same blob over loopback, interleaved, and reports the throughput ratio; then
# times `depot publish` against a curl upload of the same file.
#   Deploy/bench/fetch.sh [SIZE_MIB] [ROUNDS]     (defaults 1024, 3)
set -euo pipefail
size_mib=${1:-1024}
rounds=${2:-3}
source "$(dirname "$0")/origin.sh" --log-level warning
head -c $((size_mib << 20)) /dev/urandom > "$work/pack.bin"

t0=$(now); "$depot" publish "$work/pack.bin" --server "$url" --app $app --pack big --token "$token" --release --quiet >/dev/null; t1=$(now)
publish=$(elapsed "$t0" "$t1")
t0=$(now); curl -sf -o /dev/null -T "$work/pack.bin" -H "Authorization: Bearer $token" "$url/v1/apps/$app/packs/big2"; t1=$(now)
curl_up=$(elapsed "$t0" "$t1")
echo "upload of ${size_mib} MiB: depot publish ${publish} s, curl PUT ${curl_up} s, depot/curl speed $(awk -v a="$publish" -v b="$curl_up" 'BEGIN { printf "%.2f", b / a }')"

read -r blob size _ < <(curl -sf "$url/v1/apps/$app/manifest" | python3 -c 'import sys,json,base64; m=json.loads(base64.b64decode(json.load(sys.stdin)["payload"])); p=[p for p in m["packs"] if p["id"]=="big"][0]; print(p["url"], p["size"], p["sha256"])')
echo "download of a ${size_mib} MiB blob, $rounds interleaved rounds:"
ratios=()
curl_times=()
depot_times=()
# Each transfer starts with no dirty pages (sync), and the order alternates, so that neither
# pays for the other's writeback.
run_curl() { rm -f "$work/curl.bin"; sync; t0=$(now); curl -sf -o "$work/curl.bin" "$blob"; t1=$(now); c=$(elapsed "$t0" "$t1"); }
run_depot() { rm -f "$work/depot.bin"*; sync; t0=$(now); "$depot" fetch "$blob" --out "$work/depot.bin" --size "$size" --quiet >/dev/null; t1=$(now); d=$(elapsed "$t0" "$t1"); }
for round in $(seq "$rounds"); do
  if ((round % 2)); then run_curl; run_depot; else run_depot; run_curl; fi
  cmp -s "$work/curl.bin" "$work/depot.bin" || { echo "downloads differ" >&2; exit 1; }
  ratio=$(awk -v a="$d" -v b="$c" 'BEGIN { printf "%.2f", b / a }')
  ratios+=("$ratio")
  curl_times+=("$c")
  depot_times+=("$d")
  echo "  round $round: curl $c s, depot fetch $d s, depot/curl throughput $ratio"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
best() { printf '%s\n' "$@" | sort -n | head -1; }
echo "median of the per-round depot/curl throughput ratios: $(median "${ratios[@]}")"
echo "best times: curl $(best "${curl_times[@]}") s, depot fetch $(best "${depot_times[@]}") s, ratio $(awk -v a="$(best "${depot_times[@]}")" -v b="$(best "${curl_times[@]}")" 'BEGIN { printf "%.2f", b / a }')"
echo "median times: curl $(median "${curl_times[@]}") s, depot fetch $(median "${depot_times[@]}") s, ratio $(awk -v a="$(median "${depot_times[@]}")" -v b="$(median "${curl_times[@]}")" 'BEGIN { printf "%.2f", b / a }')"
