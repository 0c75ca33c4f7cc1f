# Shared by Deploy/bench/fetch.sh, https.sh and memory.sh (sourced): builds the release binary
# and starts an origin on a fresh data folder, its access log kept in $work/access.log. Sets
# depot, work, server_pid, url, token and app; stops and cleans up on exit. (serve.sh and
# client.sh use lib.sh, which starts nginx and the C peer besides.)
#   source "$(dirname "$0")/origin.sh" [depot serve options]
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
swift build -c release --product depot >/dev/null
depot="$root/.build/release/depot"
work=$(mktemp -d /tmp/depot-bench.XXXXXX)
trap 'kill $server_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$depot" serve --data "$work/data" --listen 127.0.0.1:0 "$@" > "$work/serve.log" 2> "$work/access.log" &
server_pid=$!
for _ in $(seq 100); do grep -q "depot sync" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
url=$(head -1 "$work/serve.log" | sed -E 's/.*listening on ([^,]+),.*/http:\/\/\1/')
token=$(grep 'export DEPOT_TOKEN=' "$work/serve.log" | sed 's/.*=//')
app=com.example.dev
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
