#!/usr/bin/env bash
# Device reports accepted per second and per core of the origin while the day holds 0, about
# 10,000 and about 50,000 counts: the cost of a report must not grow with the day (it is queued,
# then added in place by the writer thread, and only what changed is appended to the day's log).
#   Deploy/bench/reports.sh [SECONDS] [PACKS]
# One origin (release build, rate limits lifted) with an app of PACKS packs (3,000: 54,000
# possible counts of its live release); the day is filled by real reports (256 packs each, every
# outcome and error kind); wrk then POSTs one valid report again and again for SECONDS (10). The
# report is checked to answer 202 before it is timed, and after each run every request wrk made
# is checked to be counted (the fleet's reports of the day).
set -euo pipefail
seconds=${1:-10}
packs=${2:-3000}
source "$(dirname "$0")/lib.sh" reports --report-rate-per-address 100000000 --report-rate-total 100000000
pid=${pids[0]}
auth="Authorization: Bearer $token"

# The app: PACKS small packs, released once.
for i in $(seq 0 $((packs - 1))); do
  printf 'pack %d\n' "$i" > "$work/p"
  curl -sf -o /dev/null -X PUT -H "$auth" --data-binary @"$work/p" "$origin/v1/apps/$app/packs/p$i"
done
curl -sf -o /dev/null -X POST -H "$auth" "$origin/v1/apps/$app/releases"
release=$(curl -sf "$origin/v1/apps/$app/releases" | python3 -c 'import json, sys; print(json.load(sys.stdin)["live"])')

# The reports: the measured one (one pack, installed: a count that exists after its first time),
# and the fillers, each 256 packs with one outcome or error kind.
python3 - "$work" "$packs" "$release" <<'EOF'
import json, sys
work, packs, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def report(items): return json.dumps({"channel": "production", "release": release, "packs": items})
open(f"{work}/one.json", "w").write(report([{"id": "p0", "revision": 1, "outcome": "installed", "bytes": 10}]))
variants = [("installed", None), ("patched", None), ("deferred", None)] + [("failed", k) for k in
    ["http", "transport", "manifest", "rollback", "expired", "wrongApp", "integrity", "install", "state", "cancelled", "tooLarge", "noSpace", "wrongChannel", "tls", "other"]]
n = 0
for outcome, kind in variants:
    for start in range(0, packs, 256):
        items = []
        for i in range(start, min(start + 256, packs)):
            item = {"id": f"p{i}", "revision": 1, "outcome": outcome, "bytes": 1}
            if kind: item["error"] = kind
            items.append(item)
        items.sort(key=lambda x: x["id"])
        open(f"{work}/fill-{n:04d}.json", "w").write(report(items))
        n += 1
EOF
cat > "$work/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$work/one.json", "rb"); wrk.body = f:read("*a"); f:close()
EOF

fleet() { curl -sf -H "$auth" "$origin/v1/apps/$app/fleet?days=1" > "$work/fleet.json"; }
# The day's distinct counts (one channel and release: per revision, each outcome and failure
# kind seen) and its reports.
day_rows() {
  fleet
  python3 -c 'import json, sys
f = json.load(open(sys.argv[1]))
rows = sum((r["installed"] > 0) + (r["patched"] > 0) + (r["deferred"] > 0) + len(r["failuresByKind"]) for r in f["revisions"])
print(rows, f["reports"][-1])' "$work/fleet.json"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
ticks=$(getconf CLK_TCK)

status=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$work/one.json" "$origin/v1/apps/$app/reports")
[ "$status" = 202 ] || { echo "the report answered $status, not 202" >&2; exit 1; }

fill_to() {
  local target=$1 sent=0 rows
  for file in "$work"/fill-*.json; do
    [ -f "$file.sent" ] && continue
    if [ $((sent % 8)) = 0 ]; then
      sleep 1.2  # counted within a second
      read -r rows _ < <(day_rows)
      [ "$rows" -ge "$target" ] && return
    fi
    curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary @"$file" "$origin/v1/apps/$app/reports"
    touch "$file.sent"
    sent=$((sent + 1))
  done
  sleep 1.2
}

echo "device reports: one report POSTed again and again by wrk (1 thread, 16 connections, ${seconds} s), origin on 2 threads; $packs packs in the live release"
echo "| counts in the day | reports/s | origin CPU | reports per CPU-second | all counted |"
echo "| ---: | ---: | ---: | ---: | --- |"
for target in 0 10000 50000; do
  fill_to "$target"
  read -r rows before < <(day_rows)
  start=$(cpu_ticks)
  out=$(wrk -t1 -c16 -d"${seconds}s" -s "$work/post.lua" "$origin/v1/apps/$app/reports")
  end=$(cpu_ticks)
  if grep -q "Non-2xx" <<<"$out"; then echo "wrk saw answers other than 202:" >&2; echo "$out" >&2; exit 1; fi
  requests=$(awk '/ requests in / { print $1 }' <<<"$out")
  rate=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' <<<"$out")
  cpu=$(awk -v a="$start" -v b="$end" -v t="$ticks" 'BEGIN { printf "%.2f", (b - a) / t }')
  # Counted within a second: the writer's next pass.
  sleep 1.5
  read -r _ after < <(day_rows)
  # wrk counts the answers it read; the ones in flight when it stopped (at most one per
  # connection) were sent and counted too.
  counted=$([ "$((after - before))" -ge "$requests" ] && [ "$((after - before))" -le "$((requests + 16))" ] && echo "yes ($((after - before)))" || echo "NO: $((after - before)) for $requests")
  per_cpu=$(awk -v r="$requests" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", r / c; else print 0 }')
  echo "| $rows | $rate | ${cpu} s of ${seconds} s | $per_cpu | $counted |"
done
