# Shared by Deploy/bench/history.sh and soak.sh (sourced): the release binary, a work folder in
# /dev/shm removed on exit with every process started (pids), the history fixture written by the
# test target (Tests/EndToEndTests/HistoryFixture.swift, through `swift test --skip-build`: it
# needs the debug test build) and an origin serving it with the public URL the fixture's
# manifests were signed for.
#   source "$(dirname "$0")/history-lib.sh" NAME
# Sets root, depot, work, pids; defines quiet, fixture, serve, status, rss and the statistics.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
# Another SwiftPM command holds .build's lock, and a build takes both cores: wait until none runs
# (the fixture writer and the release build wait too), polling every 30 s.
quiet() {
  local said=
  # By process name (a command line naming --testing-library swift-testing is no build).
  while pgrep -x swift-build >/dev/null || pgrep -x swift-test >/dev/null || pgrep -x swift-frontend >/dev/null; do
    [ -n "$said" ] || { echo "(waiting for another swift build or test to finish)" >&2; said=1; }
    sleep 30
  done
}
if [ -z "${DEPOT_BIN:-}" ]; then quiet; swift build -c release --product depot >/dev/null; fi
depot=${DEPOT_BIN:-$root/.build/release/depot}
work=$(mktemp -d "${BENCH_TMP:-/dev/shm}/depot-bench-$1.XXXXXX")
chmod 755 "$work"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fixture SCALE DIR: writes the history fixture at SCALE (1, 10, 100) into DIR (a new folder);
# sets fixture_seconds (the writing alone, not the waits).
fixture() {
  local out t0
  quiet
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    t0=$(now)
    out=$(DEPOT_HISTORY_FIXTURE="$2" DEPOT_HISTORY_SCALE="$1" swift test --disable-xctest --skip-build --filter HistoryFixtureTool 2>&1) || true
    if grep -q '^history fixture:' <<<"$out"; then fixture_seconds=$(elapsed "$t0" "$(now)"); grep '^history fixture:' <<<"$out" | sed "s|$work/||"; return; fi
    # The test target may not have been built with the fixture tool yet: wait for a build.
    echo "the fixture tool did not run (attempt $attempt); waiting 60 s:" >&2; tail -3 <<<"$out" >&2
    rm -rf "$2"; sleep 60; quiet
  done
  echo "could not write the history fixture" >&2; exit 1
}

# serve DATA [options]: starts the origin on DATA; sets pid (also appended to pids), url and
# started (seconds from exec to listening).
serve() {
  local data=$1 t0; shift
  t0=$(now)
  "$depot" serve --data "$data" --listen 127.0.0.1:0 --public-url http://127.0.0.1:8080 "$@" > "$work/serve.log" 2> "$work/access.log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1200); do grep -q "listening on" "$work/serve.log" 2>/dev/null && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  grep -q "listening on" "$work/serve.log" || { echo "the origin did not start:" >&2; cat "$work/serve.log" "$work/access.log" >&2; exit 1; }
  started=$(elapsed "$t0" "$(now)")
  url=$(head -1 "$work/serve.log" | sed -E 's/.*listening on ([^,]+),.*/http:\/\/\1/')
}
# settle [CAP]: waits until the origin's CPU time stops growing (under 2 ticks in 2 s), at most
# CAP seconds (600): at start it works through the history in the background (with patches on,
# the patch maker's start-up pass over every channel's packs). Sets settled (seconds waited, or
# "over CAP") and settle_cpu (CPU seconds the origin used meanwhile).
settle() {
  local cap=${1:-600} t0 c0 prev cur quiet_now=
  t0=$(now); c0=$(cpu_ticks); prev=$c0
  for _ in $(seq $((cap / 2))); do sleep 2; cur=$(cpu_ticks); [ $((cur - prev)) -le 1 ] && { quiet_now=1; break; }; prev=$cur; done
  settled=$(elapsed "$t0" "$(now)"); [ -n "$quiet_now" ] || settled="over $cap"
  settle_cpu=$(awk -v a="$c0" -v b="$(cpu_ticks)" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (b - a) / t }')
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
# stop: stops the origin started last.
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

# status METHOD PATH [BODYFILE]: the status of one request.
status() {
  if [ -n "${3:-}" ]; then curl -s -o /dev/null -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' --data-binary @"$3" "$url$2"
  else curl -s -o /dev/null -w '%{http_code}' -X "$1" "$url$2"; fi
}
# rss FIELD: a field of the origin's /proc status (VmRSS, VmHWM, RssAnon), in MiB.
rss() { awk -v f="$1:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
spread() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s–%s", lo, hi }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
