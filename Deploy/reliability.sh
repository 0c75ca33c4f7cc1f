#!/usr/bin/env bash
# The reliability suite at full size, one command, on a debug build (what the tests use):
#   load          wrk, 256 connections of mixed reads for 60 s; 8 publishers racing, 50 publishes each
#   uploads       1,000 resumable uploads in flight at once, a tenth dropped and resumed
#   hostile HTTP  oversized heads, unknown methods, half-closing clients, slowhttptest vs --per-ip-limit
#   secrets       token comparison timing; no secret in logs, answers or files
#   faults        20 fresh installs through a proxy failing at random (503, 500, stalls, cut bodies)
#   crashes       100 rounds of SIGKILL over uploads, releases, promotions and garbage collection
#   crash points  every crash point of every durable sequence (client, extension, origin), killed
#                 and cut by a power loss in three ways (DEPOT_CRASH_ALL=1)
#   disks         a full disk (507) and a failing one (EIO)
#   fuzzing       every libFuzzer target for FUZZ_SECONDS (default 60) each
# Suites run one after another (the load ones would make the others' timing flaky). Prints each
# suite's figures and a summary; writes them to Deploy/reliability-results.txt (or $OUT).
# About 35 minutes on 2 cores (the crash points, every one killed and cut three ways, are about 20 of them).
#   Deploy/reliability.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-Deploy/reliability-results.txt}
Deploy/setup.sh deps >/dev/null
swift build --build-tests 2>&1 | grep -E "error|warning: .*Sources/" ; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
export DEPOT_HEAVY_TESTS=1 DEPOT_LOAD_SECONDS=${DEPOT_LOAD_SECONDS:-60} DEPOT_LOAD_PUBLISHES=${DEPOT_LOAD_PUBLISHES:-50} \
  DEPOT_CONCURRENT_UPLOADS=${DEPOT_CONCURRENT_UPLOADS:-1000} DEPOT_FAULT_ROUNDS=${DEPOT_FAULT_ROUNDS:-20} DEPOT_CRASH_ROUNDS=${DEPOT_CRASH_ROUNDS:-100}
suites=(LoadTests ConcurrentUploadTests HostileHTTPTests "TokenTimingTests|SecretsTests" FaultySyncTests CrashTests "FullDiskTests|IOErrorTests"
  "ClientCrashPointTests|OriginCrashPointTests|ExtensionCrashPointTests")
status=0
{
  echo "AssetDepot reliability suite, $(date -u +%Y-%m-%d), $(nproc) cores; load ${DEPOT_LOAD_SECONDS} s, ${DEPOT_CONCURRENT_UPLOADS} uploads, ${DEPOT_FAULT_ROUNDS} fault rounds, ${DEPOT_CRASH_ROUNDS} crash rounds"
  for suite in "${suites[@]}"; do
    start=$(date +%s)
    log=$(mktemp)
    DEPOT_CRASH_ALL=$([[ $suite == *CrashPoint* ]] && echo 1 || echo 0) swift test --disable-xctest --skip-build --filter "$suite" > "$log" 2>&1
    result=$?
    summary=$(grep -E "^✔ Test run|^✘ Test run" "$log" | tail -1)
    echo "$suite: $([ $result -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s — ${summary#* }"
    grep -E "^(load|ConcurrentUploadTests|FaultySyncTests|CrashTests|HostileHTTPTests|TokenTimingTests):|CrashPointTests " "$log" | sed 's/^/    /'
    if [ $result -ne 0 ]; then status=1; grep -E "✘|recorded an issue" "$log" | head -20 | sed 's/^/    /'; fi
    rm -f "$log"
  done
  echo "fuzzing:"
  Deploy/fuzz/run.sh "${FUZZ_SECONDS:-60}" | sed 's/^/    /' || status=1
  echo "$([ $status -eq 0 ] && echo "all passed" || echo "FAILURES above")"
} 2>&1 | tee "$out"
exit $status
