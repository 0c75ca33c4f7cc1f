#!/usr/bin/env bash
# Start-up at any history (issue 63): a release-build origin with every default (patches on,
# depth 3) started on the history fixture at SCALE (100: 3,000 releases of two apps, the last 64
# of 3,500 packs, 300 channels each, a 10,000-pack app), three times:
#   1. as an origin of an earlier version left it: no catalog (apps/*/catalog), no patch state
#      and no record of the retention's blobs (apps/*/retained), so every release file is read
#      once and the catalog written, the patch maker looks at every channel's live packs once,
#      and the first sweep reads the releases within the retention;
#   2. restarted: the catalog, the patch state and the sweep's record kept;
#   3. restarted again after one more release was published on the second run.
# Each: seconds until it listens, then until its start-up work is done (its CPU time stops
# growing: under 2 ticks in 2 s, so up to 2 s more than the work), the CPU seconds it took and
# its RSS then; before each start the manifest must answer 200 once listening.
#   Deploy/bench/startup.sh [SCALE]
set -euo pipefail
scale=${1:-100}
source "$(dirname "$0")/history-lib.sh" startup
fixture "$scale" "$work/data"
rm -f "$work"/data/apps/*/catalog "$work"/data/apps/*/patch-state "$work"/data/apps/*/retained
echo "AssetDepot start-up benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, $(git rev-parse --short HEAD); release build; fixture ${scale}x written in $fixture_seconds s"
for run in 1 2 3; do
  serve "$work/data"
  code=$(status GET /v1/apps/com.example.old1/manifest)
  [ "$code" = 200 ] || { echo "manifest answered $code" >&2; exit 1; }
  settle 600
  printf 'start %s: listening after %s s; start-up work done %s s later, %s CPU s; RSS %s MiB\n' "$run" "$started" "$settled" "$settle_cpu" "$(rss VmRSS)"
  if [ "$run" = 2 ]; then
    # One release more (a publisher's token made by the CLI, as an operator would).
    token=$("$depot" tokens create --data "$work/data" --app com.example.old1 --role publisher | tail -1)
    head -c 65536 /dev/urandom > "$work/pack"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $token" --data-binary @"$work/pack" "$url/v1/apps/com.example.old1/packs/fresh?release=true")
    [ "$code" = 201 ] || { echo "publish answered $code" >&2; exit 1; }
  fi
  stop
done
