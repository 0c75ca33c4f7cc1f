#!/usr/bin/env bash
# Does the origin's memory level off under hours-like churn? The history fixture at 10×
# (Tests/EndToEndTests/HistoryFixture.swift: com.example.old1 with 300 releases, the last 6 of
# 350 packs, 30 channels; com.example.big's 1,000-pack manifest) served by a release-build origin
# (2 threads, report rate limits lifted, every other option its default: patches on, the answer
# caches at their defaults) for MINUTES, while
#   - a publisher publishes a new release of old1 every PUBLISH_EVERY_SECONDS: a new revision of
#     one small pack (`soak`, 600 bytes) by `PUT …/packs/soak?release=true` with an admin token
#     (each answer checked: 201), so the release count grows and the live release keeps its shape;
#   - wrk (-t2 -c16, soak-mix.lua) cycles the live manifest, /releases, /channels, a release by
#     number (any, at random), the Info.plist keys, a device report about the live release and
#     /healthz, counting answers by status;
#   - the origin's VmRSS (and RssAnon) is sampled every 30 s.
# Every route is first asked once and must answer its status. Prints minute | releases published
# | RSS, and whether RSS levels off: the maximum of each quarter of the run, the last quarter's
# against the second's (levels off: within 2% or 1 MiB), and the slope over the second half.
# Only loopback; everything started is stopped on exit.
#   Deploy/bench/soak.sh [MINUTES] [PUBLISH_EVERY_SECONDS]     (defaults 60, 2)
# To tell causes apart: PUBLISH_EVERY_SECONDS 0 runs the load alone, LOAD=0 the publisher alone,
# SOAK_SERVE_OPTIONS adds depot serve options (e.g. --patch-depth 0); SOAK_PACK=zip publishes a
# 12-entry zip pack (one entry random each release, the others fixed) instead of 600 random bytes.
# Writes the table to Deploy/bench/last-soak.txt.
set -euo pipefail
minutes=${1:-60}; every=${2:-2}
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
source "$(dirname "$0")/history-lib.sh" soak
out_file="$root/Deploy/bench/last-soak.txt"
app=com.example.old1; scale=10; pack=w$((35 * scale - 1))
data="$work/data"
fixture "$scale" "$data" >&2
token=$("$depot" tokens create --data "$data" --app "$app" --role admin | tail -1)
# SOAK_SERVE_OPTIONS: more depot serve options (--patch-depth 0, …).
# shellcheck disable=SC2086
serve "$data" --threads 2 --report-rate-per-address 100000000 --report-rate-total 100000000 ${SOAK_SERVE_OPTIONS:-}
# The start-up pass (patches looked for in the whole history) runs its course first.
settle 300
echo $((30 * scale)) > "$work/live"
: > "$work/published"; : > "$work/failures"

# publish: one new release (a new revision of pack soak); its number into $work/live.
# SOAK_PACK=zip: the pack is a zip of 12 deflated entries of 16 KiB (written by Python's zipfile),
# entry (n mod 12) random at the nth release and the others fixed (so a release differs from the
# one before in two entries), sent as application/zip, so that each release's patches are made
# entry by entry (the zip patch format).
publish() {
  local code type=application/octet-stream
  if [ "${SOAK_PACK:-}" = zip ]; then
    type=application/zip
    python3 - "$work/pack" "$(( $(wc -l < "$work/published") % 12 ))" <<'PY'
import os, random, sys, zipfile
path, changed = sys.argv[1], int(sys.argv[2])
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for i in range(12):
        body = random.Random(i).randbytes(8192) + bytes(8192) if i != changed else os.urandom(8192) + bytes(8192)
        z.writestr(f"level/entry-{i:02d}.bin", body)
os.replace(path + ".tmp", path)
PY
  else
    head -c 450 /dev/urandom | base64 -w0 > "$work/pack"
  fi
  code=$(curl -s -o "$work/publish.json" -w '%{http_code}' -X PUT --data-binary @"$work/pack" -H "Content-Type: $type" \
    -H "Authorization: Bearer $token" "$url/v1/apps/$app/packs/soak?release=true")
  if [ "$code" = 201 ]; then
    curl -sf "$url/v1/apps/$app/releases?limit=1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["live"])' > "$work/live.next"
    mv "$work/live.next" "$work/live"
    echo "$(date +%s)" >> "$work/published"
  else
    echo "$(date +%s) $code $(head -c 300 "$work/publish.json")" >> "$work/failures"
  fi
}

# Checked before anything is timed: a publish, then every route of the mix.
publish
[ -s "$work/published" ] || { echo "publishing failed:" >&2; cat "$work/failures" >&2; exit 1; }
live=$(cat "$work/live")
printf '{"channel":"production","release":%d,"packs":[{"id":"%s","revision":1,"outcome":"installed","bytes":10}]}' "$live" "$pack" > "$work/report.json"
for check in "GET /v1/apps/$app/manifest 200" "GET /v1/apps/$app/releases 200" "GET /v1/apps/$app/channels 200" \
  "GET /v1/apps/$app/releases/1 200" "GET /v1/apps/$app/releases/$live 200" "GET /v1/apps/$app/info-plist 200" \
  "POST /v1/apps/$app/reports 202" "GET /healthz 200"; do
  read -r m p want <<<"$check"
  got=$(status "$m" "$p" "$([ "$m" = POST ] && echo "$work/report.json")")
  [ "$got" = "$want" ] || { echo "$m $p answered $got, not $want" >&2; exit 1; }
done

# The publisher, a release every PUBLISH_EVERY_SECONDS (the next one is due every seconds after
# the last one was due, however long it took).
# PUBLISH_EVERY_SECONDS 0: no publisher (the load alone).
(
  trap 'exit 0' TERM
  [ "$every" != 0 ] || exec sleep infinity
  due=$(date +%s.%N)
  while :; do
    due=$(awk -v d="$due" -v e="$every" 'BEGIN { printf "%.3f", d + e }')
    wait_s=$(awk -v d="$due" -v n="$(date +%s.%N)" 'BEGIN { w = d - n; printf "%.3f", (w > 0 ? w : 0) }')
    sleep "$wait_s"
    publish
  done
) &
pids+=($!)

# The load, for MINUTES (LOAD=0: none, the publisher alone).
if [ "${LOAD:-1}" = 0 ]; then sleep "$((minutes * 60))" > "$work/wrk.txt" &
else
  SOAK_APP=$app SOAK_PACK=$pack SOAK_LIVE_FILE=$work/live \
    wrk -t2 -c16 -d"$((minutes * 60))s" --timeout 10s -s "$root/Deploy/bench/soak-mix.lua" "$url" > "$work/wrk.txt" 2>&1 &
fi
wrk_pid=$!
pids+=($wrk_pid)

# The samples: seconds, releases published, VmRSS and RssAnon (MiB), the live release, the
# origin's CPU share since the last sample (% of one core).
t0=$(date +%s)
published0=$(wc -l < "$work/published")
: > "$work/samples"
last_ticks=$(cpu_ticks); last_t=$(now)
sample() {
  local ticks t; ticks=$(cpu_ticks); t=$(now)
  echo "$(( $(date +%s) - t0 )) $(( $(wc -l < "$work/published") - published0 )) $(rss VmRSS) $(rss RssAnon) $(cat "$work/live") $(awk -v a="$last_ticks" -v b="$ticks" -v s="$(elapsed "$last_t" "$t")" -v h="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (s > 0 ? (b - a) / h / s * 100 : 0) }')" >> "$work/samples"
  last_ticks=$ticks; last_t=$t
}
sample
while kill -0 "$wrk_pid" 2>/dev/null; do
  for _ in $(seq 30); do kill -0 "$wrk_pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null || { echo "the origin stopped:" >&2; tail -20 "$work/serve.log" >&2; exit 1; }
  sample
done
wait "$wrk_pid" || true
hwm=$(rss VmHWM)
kill "${pids[-2]}" 2>/dev/null || true; wait "${pids[-2]}" 2>/dev/null || true

{
  echo "AssetDepot soak, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources && [ -z "$(git ls-files --others --exclude-standard Sources)" ] || echo ' (Sources with uncommitted changes)'); release build of $(date -u -r "$depot" '+%H:%M UTC'), origin --threads 2 ${SOAK_SERVE_OPTIONS:-}"
  echo "data: the history fixture at ${scale}x ($app: $((30 * scale)) releases before the run; $([ "$every" = 0 ] && echo "no publisher" || echo "a new release every ${every} s$([ "${SOAK_PACK:-}" = zip ] && echo ", a 12-entry zip pack, one entry random")")); $([ "${LOAD:-1}" = 0 ] && echo "no load" || echo "wrk -t2 -c16 ${minutes} min, soak-mix.lua")"
  echo "origin: listening after $started s, its start-up work (patches looked for) done after $settled s ($settle_cpu CPU seconds)"
  echo "published: $(( $(wc -l < "$work/published") - published0 )) releases during the run, $(wc -l < "$work/failures") publishes failed$( [ -s "$work/failures" ] && echo ": $(head -3 "$work/failures" | tr '\n' ' ')")"
  if [ "${LOAD:-1}" = 0 ]; then echo "wrk: none (LOAD=0)"; else
    echo "wrk: $(awk '/ requests in / { print $1, "requests in", $4 }' "$work/wrk.txt" | tr -d ','), $(awk '/^Requests\/sec:/ { printf "%.0f req/s", $2 }' "$work/wrk.txt"); by status: $(awk '/^status / { printf "%s %s; ", $2, $3 }' "$work/wrk.txt")$(grep -h 'Socket errors' "$work/wrk.txt" || true)"
  fi
  echo
  echo "| minute | releases published | live release | RSS MiB | anonymous MiB | origin CPU, % of a core |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
  awk '{ printf "| %.1f | %d | %d | %s | %s | %s |\n", $1 / 60, $2, $5, $3, $4, $6 }' "$work/samples"
  echo
  echo "peak RSS (VmHWM): $hwm MiB"
  python3 - "$work/samples" "$((minutes * 60))" <<'PY'
import sys
rows = [tuple(float(x) for x in l.split()) for l in open(sys.argv[1]) if l.strip()]
total = float(sys.argv[2])
quarter = [max((r[2] for r in rows if q * total / 4 < r[0] <= (q + 1) * total / 4 + 1), default=float("nan")) for q in range(4)]
print("max RSS by quarter of the run: " + ", ".join(f"Q{q + 1} {v:.1f}" for q, v in enumerate(quarter)) + " MiB")
grow = quarter[3] - quarter[1]
level = grow <= max(1.0, 0.02 * quarter[1])
half = [r for r in rows if r[0] >= total / 2]
if len(half) >= 2:
    n = len(half); mx = sum(r[0] for r in half) / n; my = sum(r[2] for r in half) / n
    den = sum((r[0] - mx) ** 2 for r in half)
    slope = sum((r[0] - mx) * (r[2] - my) for r in half) / den * 3600 if den else 0.0
    pub = (half[-1][1] - half[0][1]) or 1
    per = (half[-1][2] - half[0][2]) / pub * 100
    slope_text = f"; over the second half {slope:+.1f} MiB/hour ({per:+.2f} MiB per 100 releases)"
else:
    slope_text = ""
print(f"last quarter's max - second quarter's max: {grow:+.1f} MiB ({grow / quarter[1] * 100:+.1f}%): "
      + ("levels off (within 2% or 1 MiB)" if level else "DOES NOT level off (more than 2% and 1 MiB)") + slope_text)
PY
} | tee "$out_file"
