#!/usr/bin/env bash
# A year of an origin's life, simulated (issue 63): Tests/EndToEndTests/YearOfLife.swift runs a
# release-build `depot serve` on its default settings through DAYS simulated days — three apps,
# RELEASES releases a day (zips among them), a channel made and one removed a day, a rollout
# started and halted (or completed) a day, device reports every day, an incremental backup each
# week, a restart each month — its calendar read from a file the generator rewrites
# (DEPOT_CLOCK_FILE). After each day's background work it counts resident memory, patch making's
# CPU seconds, a maintenance pass's CPU seconds, the data folder's bytes (blobs, the rest), open
# files, and at each restart the seconds to listening and to the first maintenance pass and the
# release files read. The test's checks (level after the first month) hold for the whole year.
#   Deploy/bench/year.sh [DAYS] [RELEASES]      (defaults 365, 100)
# Writes the table to Deploy/bench/last-year.txt. Needs the debug test build (the generator is
# the test) and builds the release `depot` unless DEPOT_BIN names one.
set -euo pipefail
days=${1:-365}; releases=${2:-100}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ -z "${DEPOT_BIN:-}" ]; then swift build -c release --product depot >/dev/null; fi
depot=${DEPOT_BIN:-$root/.build/release/depot}
swift build --build-tests >/dev/null
# The test binary run from a copy, not through `swift test`: a run of an hour or more holds no
# lock on .build and survives a rebuild meanwhile.
tests=$(mktemp -d "${BENCH_TMP:-/tmp}/depot-bench-year.XXXXXX")
trap 'rm -rf "$tests"' EXIT
cp "$(swift build --show-bin-path)/AssetDepotPackageTests.xctest" "$tests/"
out="$root/Deploy/bench/last-year.txt"
t0=$(date +%s)
set +e
DEPOT_HEAVY_TESTS=1 DEPOT_TEST_BINARY="$depot" DEPOT_YEAR_DAYS="$days" DEPOT_YEAR_RELEASES="$releases" \
  DEPOT_YEAR_RESTART_EVERY=30 DEPOT_YEAR_BACKUP_EVERY=7 DEPOT_YEAR_TABLE="$out.partial" TMPDIR="$tests" \
  "$tests/AssetDepotPackageTests.xctest" --testing-library swift-testing --filter YearOfLifeTests > "$root/Deploy/bench/last-year.log" 2>&1
status=$?
set -e
{
  echo "AssetDepot year of life, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(git rev-parse --short HEAD); release build $depot; lived in $(( $(date +%s) - t0 )) s; checks $([ "$status" = 0 ] && echo passed || echo FAILED)"
  cat "$out.partial" 2>/dev/null || echo "(no table: see Deploy/bench/last-year.log)"
} > "$out"
rm -f "$out.partial"
grep -E '^(✘|✔) Test' "$root/Deploy/bench/last-year.log" | cut -c1-400 || true
head -3 "$out"
exit "$status"
