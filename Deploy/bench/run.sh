#!/usr/bin/env bash
# The benchmark suite, one command: builds the release binary, then runs, each on loopback with
# its peers started and checked by the script itself,
#   serve.sh              origin vs nginx (also with open_file_cache) vs plain-C libmicrohttpd: small
#                         objects, the manifest of a 1,000-pack release, a 1 GiB blob alone and 4 at
#                         once (5 rounds), RSS through the run with a 100,000-blob store and the answer
#                         cache full; staging and releasing
#   syscalls.sh           system calls per request of the origin, the C server and nginx
#   client.sh             depot sync and depot publish of 1 GiB vs sequential peer pipelines, peak RSS
#   callgrind-request.sh  instructions per 1 KiB blob GET, origin vs the C server, by function
#   memory.sh             peak RSS of the origin ingesting 4 GiB, depot publish and depot sync of 4 GiB
#   reports.sh            device reports accepted per second and per core with 0, 10,000 and 50,000
#                         counts in the day (flat)
# and writes everything to Deploy/bench/results.txt (takes about 20 minutes on 2 cores).
#   Deploy/bench/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
missing=()
for tool in nginx wrk curl bc valgrind strace openssl cc; do command -v $tool >/dev/null || missing+=("$tool"); done
[ -x /usr/bin/time ] || missing+=(time)
if ((${#missing[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk curl bc valgrind strace openssl gcc time >/dev/null
fi
swift build -c release --product depot >/dev/null 2>&1
results="$here/results.txt"
{
  OUT=/dev/null FILL=100000 BIG_ROUNDS=5 "$here/serve.sh" 3 5 1000 1024
  echo
  "$here/syscalls.sh" 2000 1024
  echo
  echo "a 10,000-pack release:"
  log=$(mktemp)
  OUT=/dev/null CLIENTS=4 "$here/serve.sh" 1 1 10000 16 > "$log" 2>&1 || { echo "the 10,000-pack run failed:"; tail -20 "$log"; }
  grep -e '^publishing:' -e '^memory:' "$log" || true
  rm -f "$log"
  echo
  OUT=/dev/null "$here/client.sh" 1024 3
  echo
  "$here/callgrind-request.sh" 2000 | sed -n 1,5p
  echo
  "$here/memory.sh" 4096
  echo
  "$here/reports.sh" 10 3000
} 2>&1 | grep -v -e "^warning: 'zipfoundation'" -e PrivacyInfo | tee "$results"
