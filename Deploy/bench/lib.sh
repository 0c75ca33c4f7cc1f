# Shared by Deploy/bench/serve.sh and client.sh (sourced): the depot binary (DEPOT_BIN, or a
# release build), a work folder removed on exit with everything started (pids, nginx), an origin
# on a fresh data folder, and the statistics the tables print.
#   source "$(dirname "$0")/lib.sh" NAME [depot serve options]
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
if [ -z "${DEPOT_BIN:-}" ]; then swift build -c release --product depot >/dev/null 2>&1; fi
depot=${DEPOT_BIN:-$root/.build/release/depot}
work=$(mktemp -d "${BENCH_TMP:-/tmp}/depot-bench-$1.XXXXXX")
shift
chmod 755 "$work"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; [ -f "$work/nginx/nginx.pid" ] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"' EXIT

# The origin: sets origin (its URL), token, app; its pid is pids[0].
"$depot" serve --data "$work/data" --listen 127.0.0.1:0 --threads 2 "$@" > "$work/serve.log" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do grep -q "depot sync" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
origin=$(head -1 "$work/serve.log" | sed -E 's/.*listening on ([^,]+),.*/http:\/\/\1/')
token=$(grep 'export DEPOT_TOKEN=' "$work/serve.log" | sed 's/.*=//')
app=com.example.dev

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
spread() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s–%s", lo, hi }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
