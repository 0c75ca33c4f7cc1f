#!/usr/bin/env bash
# Incremental backups (issue 63): a data folder of BLOBS blobs (100,000 by default, 1–64 KiB of
# random bytes each, stored as the origin stores them: blobs/ab/<sha256>), backed up by the
# release-build `depot backup` three ways, each timed and its bytes written counted (the
# destination's new disk blocks, from df):
#   - full: `depot backup DATA monday`;
#   - incremental: NEW more blobs added, then `depot backup --previous monday DATA tuesday`;
#   - the peers: `cp -a DATA copy` (a plain full copy) and `cp -al monday/blobs` + a copy of the rest
#     is what --previous does by hand; rsync --link-dest when rsync is installed.
# Every backup is checked before it counts: its blobs must hash to their names (a sample of 1,000)
# and the incremental one must restore alone once the full one is removed.
#   Deploy/bench/backup.sh [BLOBS] [NEW]     (defaults 100000, 100)
set -euo pipefail
blobs=${1:-100000}; new=${2:-100}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ -z "${DEPOT_BIN:-}" ]; then swift build -c release --product depot >/dev/null; fi
depot=${DEPOT_BIN:-$root/.build/release/depot}
work=$(mktemp -d "${BENCH_TMP:-/var/tmp}/depot-bench-backup.XXXXXX")
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
used() { df -B1 --output=used "$work" | tail -1; }

"$depot" init --data "$work/data" >/dev/null 2>&1 || mkdir -p "$work/data"
# make_blobs FIRST COUNT: blobs of random sizes, named by their SHA-256, in blobs/ab/.
make_blobs() {
  python3 - "$work/data/blobs" "$1" "$2" <<'PY'
import hashlib, os, random, sys
folder, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(first)
for i in range(first, first + count):
    data = os.urandom(random.randint(1024, 65536))
    name = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(folder, name[:2]), exist_ok=True)
    with open(os.path.join(folder, name[:2], name), "wb") as f:
        f.write(data)
PY
}
check() {
  python3 - "$1" <<'PY'
import hashlib, os, random, sys
folder = os.path.join(sys.argv[1], "blobs")
names = [os.path.join(p, n) for p in os.listdir(folder) for n in os.listdir(os.path.join(folder, p))]
for path in random.sample(names, min(1000, len(names))):
    with open(os.path.join(folder, path), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == os.path.basename(path), path
print(len(names))
PY
}
make_blobs 0 "$blobs"
size=$(du -sb "$work/data" | cut -f1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
b0=$(used); t0=$(now); "$depot" backup --data "$work/data" "$work/monday" > "$work/full.out"; t1=$(now); b1=$(used)
full_time=$(elapsed "$t0" "$t1"); full_bytes=$((b1 - b0))
[ "$(check "$work/monday")" = "$blobs" ]
make_blobs "$blobs" "$new"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
b0=$(used); t0=$(now); "$depot" backup --data "$work/data" --previous "$work/monday" "$work/tuesday" > "$work/incremental.out"; t1=$(now); b1=$(used)
inc_time=$(elapsed "$t0" "$t1"); inc_bytes=$((b1 - b0))
[ "$(check "$work/tuesday")" = "$((blobs + new))" ]
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
b0=$(used); t0=$(now); cp -a "$work/data" "$work/copy"; t1=$(now); b1=$(used)
cp_time=$(elapsed "$t0" "$t1"); cp_bytes=$((b1 - b0))
rsync_line="rsync not installed"
if command -v rsync >/dev/null; then
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  b0=$(used); t0=$(now); rsync -a --link-dest="$work/copy" "$work/data/" "$work/rsynced/"; t1=$(now); b1=$(used)
  rsync_line="rsync -a --link-dest (incremental peer): $(elapsed "$t0" "$t1") s, $(( (b1 - b0) >> 20 )) MiB written"
fi
rm -rf "$work/monday"
"$depot" restore --data "$work/restored" "$work/tuesday" >/dev/null
[ "$(check "$work/restored")" = "$((blobs + new))" ]
echo "AssetDepot backup benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, $(git rev-parse --short HEAD); release build; $blobs blobs ($((size >> 20)) MiB), then $new more"
echo "depot backup (full): $full_time s, $((full_bytes >> 20)) MiB written — $(tail -1 "$work/full.out" | cut -c1-160)"
echo "depot backup --previous (incremental): $inc_time s, $((inc_bytes >> 20)) MiB written — $(tail -1 "$work/incremental.out" | cut -c1-200)"
echo "cp -a (full peer): $cp_time s, $((cp_bytes >> 20)) MiB written"
echo "$rsync_line"
echo "incremental / full: time $(awk -v a="$inc_time" -v b="$full_time" 'BEGIN { printf "%.2f", a / b }'), bytes $(awk -v a="$inc_bytes" -v b="$full_bytes" 'BEGIN { printf "%.3f", a / b }'); the incremental backup restored alone, every sampled blob byte-identical"
