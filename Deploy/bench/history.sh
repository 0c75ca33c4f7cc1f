#!/usr/bin/env bash
# What an anonymous request costs as an app's history grows: the history fixture
# (Tests/EndToEndTests/HistoryFixture.swift) at 1×, 10× and 100× — 30, 300 and 3,000 releases
# of com.example.old1 and old2 (the last 3, 6 and 64 listing 35, 350 and 3,500 packs), 3, 30 and
# 300 channels, and com.example.big's live release of 100, 1,000 and 10,000 packs — each served
# by a release-build origin (2 threads, report rate limits lifted), and per route:
#   - data-folder system calls per request: strace -f -yy on the origin while REQUESTS requests
#     (8 keep-alive connections, every answer's status checked) are answered; a call counts when
#     its line (an unfinished call joined with its resumption) names the data folder;
#   - req/s: wrk -t2 -c32 for SECONDS, ROUNDS rounds, each beside a /healthz run (the control,
#     alternating route, healthz, route, …); the table's ratio to 1× is (route / healthz at this
#     scale) / (route / healthz at 1×), so machine drift between scales cancels;
#   - the origin's peak RSS (VmHWM) once every route has been run.
# The routes are measured with --patch-depth 0: with patches on, an origin starts by going
# through every channel's packs for patches to make, reading the app's whole history again for
# each pack (PatchMaker.turn: ReleaseStore.list), which at 100× keeps a core busy for longer than
# the run and would be counted with the requests. That start-up pass is measured first, on its
# own, with every default: the time until the origin's CPU time stops growing (at most
# START_CAP seconds, 300), the CPU seconds spent and the RSS then.
# Each route is first asked once and must answer its status (200, 202 or 404) before it is counted
# or timed. The claim tested: the counts are flat across scales.
#   Deploy/bench/history.sh [REQUESTS]     (default 2000; SECONDS_PER_RUN=3 ROUNDS=3 SCALES="1 10 100")
# Writes the table to Deploy/bench/last-history.txt.
set -euo pipefail
requests=${1:-2000}
seconds=${SECONDS_PER_RUN:-3}; rounds=${ROUNDS:-3}; scales=${SCALES:-1 10 100}
command -v strace >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null; }
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
source "$(dirname "$0")/history-lib.sh" history
out_file="$root/Deploy/bench/last-history.txt"
old=com.example.old1; big=com.example.big

# The routes: name, method, path (SCALE-dependent parts filled per scale), body file, status.
route_names=(manifest channel-manifest releases releases-page release-live release-1 channels info-plist
  blob-named blob-unknown big-manifest big-info-plist report-live report-window healthz)
declare -A label=(
  [manifest]="GET old1 /manifest" [channel-manifest]="GET old1 /channels/c1/manifest" [releases]="GET old1 /releases"
  [releases-page]="GET old1 /releases?before=11&limit=10" [release-live]="GET old1 /releases/LIVE" [release-1]="GET old1 /releases/1"
  [channels]="GET old1 /channels" [info-plist]="GET old1 /info-plist" [blob-named]="GET old1 /blobs/ (named, not stored)"
  [blob-unknown]="GET old1 /blobs/ (made up)" [big-manifest]="GET big /manifest" [big-info-plist]="GET big /info-plist"
  [report-live]="POST old1 /reports (live)" [report-window]="POST old1 /reports (window)" [healthz]="GET /healthz")
declare -A method path body expect
declare -A calls rate control norm names hwm rss_start startup settle_time fixture_time fixture_size background
declare -A d_startup d_settle d_cpu d_rss d_hwm size
start_cap=${START_CAP:-300}

# client METHOD PATH BODY EXPECT COUNT: COUNT requests on 8 keep-alive connections, each answer's
# status checked.
client() {
  python3 - "$url" "$@" <<'PY'
import http.client, sys, urllib.parse
url, method, path, body, expect, n = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
data = open(body, "rb").read() if body != "-" else None
headers = {"Content-Type": "application/json"} if data else {}
conns = [http.client.HTTPConnection(url.hostname, url.port) for _ in range(8)]
for i in range(n):
    c = conns[i % 8]; c.request(method, path, body=data, headers=headers); r = c.getresponse(); r.read()
    assert r.status == expect, f"{method} {path}: {r.status}, not {expect}"
PY
}

# count FILE: data-folder calls in an strace -f output, unfinished calls joined with their
# resumptions; prints "total name=count,…".
count() {
  python3 - "$1" "$data" <<'PY'
import collections, re, sys
trace, data = sys.argv[1], sys.argv[2]
pending, names = {}, collections.Counter()
line_re = re.compile(r"^(\d+)\s+(.*)$")
for line in open(trace, errors="replace"):
    m = line_re.match(line.rstrip("\n"))
    if not m: continue
    tid, text = m.groups()
    if text.endswith("<unfinished ...>"):
        pending[tid] = text; continue
    r = re.match(r"<\.\.\. (\w+) resumed>", text)
    if r:
        text = pending.pop(tid, r.group(1) + "(") + text
    if text.startswith("+++") or text.startswith("---"): continue
    if data in text:
        names[re.match(r"(\w+)", text).group(1)] += 1
print(sum(names.values()), ",".join(f"{k}={v}" for k, v in names.most_common()))
PY
}
# trace NAME N: the origin's data-folder calls while N requests of route NAME are answered.
trace() {
  local out="$work/strace.$1" tracer
  strace -f -yy -o "$out" -p "$pid" 2>/dev/null & tracer=$!
  sleep 0.5
  client "${method[$1]}" "${path[$1]}" "${body[$1]}" "${expect[$1]}" "$2"
  sleep 0.2; kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
  count "$out"
}
# check NAME: one request must answer the route's status (a report about a release whose listing
# is not kept answers 503 while the origin reads it: asked again, up to 10 s).
check() {
  local got
  for _ in $(seq 50); do
    got=$(status "${method[$1]}" "${path[$1]}" "$([ "${body[$1]}" = - ] || echo "${body[$1]}")")
    [ "$got" = 503 ] && [ "${method[$1]}" = POST ] || break
    sleep 0.2
  done
  [ "$got" = "${expect[$1]}" ] || { echo "scale $scale: ${label[$1]} answered $got, not ${expect[$1]}" >&2; exit 1; }
  if [ "${body[$1]}" = - ]; then size[$1,$scale]=$(curl -s -o /dev/null -w '%{size_download}' "$url${path[$1]}")
  else size[$1,$scale]=$(curl -s -o /dev/null -w '%{size_download}' -X POST -H 'Content-Type: application/json' --data-binary @"${body[$1]}" "$url${path[$1]}"); fi
}
# bench NAME: one wrk run; prints req/s, or req/s! when answers were not all the route's status.
bench() {
  local args=() out n bad
  [ "${method[$1]}" = POST ] && args=(-s "$work/$1.lua")
  out=$(wrk -t2 -c32 -d"${seconds}s" "${args[@]}" "$url${path[$1]}")
  n=$(awk '/ requests in / { print $1 }' <<<"$out")
  bad=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out"); bad=${bad:-0}
  if { [ "${expect[$1]}" = 404 ] && [ "$bad" != "$n" ]; } || { [ "${expect[$1]}" != 404 ] && [ "$bad" != 0 ]; } || grep -q 'Socket errors' <<<"$out"; then
    echo "scale $scale: ${label[$1]}: $bad of $n answers non-2xx, or socket errors:" >&2; echo "$out" >&2
    awk '/^Requests\/sec:/ { printf "%.0f!", $2 }' <<<"$out"
  else
    awk '/^Requests\/sec:/ { printf "%.0f", $2 }' <<<"$out"
  fi
}

busy_note=""
for scale in $scales; do
  data="$work/data-${scale}x"
  fixture "$scale" "$data" >&2
  fixture_time[$scale]=$fixture_seconds
  fixture_size[$scale]=$(du -sm "$data" | awk '{ print $1 }')
  live=$((30 * scale)); window=$(( 64 * scale / 100 > 3 ? 64 * scale / 100 : 3 )); window=$(( window > 64 ? 64 : window ))
  first_window=$((live - window + 1)); last_pack="w$((35 * scale - 1))"
  # Every default: the start-up pass.
  serve "$data" --threads 2
  d_startup[$scale]=$started; settle "$start_cap"; d_settle[$scale]=$settled; d_cpu[$scale]=$settle_cpu; d_rss[$scale]=$(rss VmRSS); d_hwm[$scale]=$(rss VmHWM)
  stop
  # Measured: patches off, report rate limits lifted.
  serve "$data" --threads 2 --patch-depth 0 --report-rate-per-address 100000000 --report-rate-total 100000000
  startup[$scale]=$started; settle 120; settle_time[$scale]=$settled; rss_start[$scale]=$(rss VmRSS)
  python3 - "$work" "$live" "$first_window" "$last_pack" <<'PY'
import json, sys
work, live, first, pack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for name, release in (("report-live", live), ("report-window", first)):
    report = {"channel": "production", "release": release, "packs": [{"id": pack, "revision": 1, "outcome": "installed", "bytes": 10}]}
    open(f"{work}/{name}.json", "w").write(json.dumps(report))
    open(f"{work}/{name}.lua", "w").write(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{work}/{name}.json", "rb"); wrk.body = f:read("*a"); f:close()\n')
PY
  # A blob the live release names (its container is not stored), from the manifest itself.
  named=$(curl -sf "$url/v1/apps/$old/manifest" | python3 -c 'import base64, json, sys
m = json.loads(base64.b64decode(json.load(sys.stdin)["payload"]))
print(m["packs"][0]["url"].rsplit("/", 1)[1])')
  a=/v1/apps/$old
  for r in "${route_names[@]}"; do method[$r]=GET; body[$r]=-; expect[$r]=200; done
  path=([manifest]=$a/manifest [channel-manifest]=$a/channels/c1/manifest [releases]=$a/releases
    [releases-page]="$a/releases?before=11&limit=10" [release-live]=$a/releases/$live [release-1]=$a/releases/1
    [channels]=$a/channels [info-plist]=$a/info-plist [blob-named]=$a/blobs/$named
    [blob-unknown]=$a/blobs/$(printf 'made up %s' "$scale" | sha256sum | cut -c1-64)
    [big-manifest]=/v1/apps/$big/manifest [big-info-plist]=/v1/apps/$big/info-plist
    [report-live]=$a/reports [report-window]=$a/reports [healthz]=/healthz)
  expect[blob-named]=404; expect[blob-unknown]=404
  for r in report-live report-window; do method[$r]=POST; body[$r]=$work/$r.json; expect[$r]=202; done

  # Counted: every route checked, warmed (20 requests), then traced; the idle origin first.
  strace -f -yy -o "$work/strace.idle" -p "$pid" 2>/dev/null & tracer=$!
  sleep 3; kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
  background[$scale]=$(count "$work/strace.idle" | awk '{ printf "%.1f", $1 / 3 }')
  for r in "${route_names[@]}"; do
    check "$r"; client "${method[$r]}" "${path[$r]}" "${body[$r]}" "${expect[$r]}" 20
    sleep 1.2  # the report writer's pass for the route before (it writes within a second)
    read -r total detail < <(trace "$r" "$requests")
    calls[$r,$scale]=$(awk -v t="$total" -v n="$requests" 'BEGIN { printf "%.2f", t / n }')
    names[$r,$scale]=$detail
  done

  # Timed: route and healthz alternately, ROUNDS rounds each.
  for r in "${route_names[@]}"; do
    [ "$r" = healthz ] && continue
    rs=(); hs=(); ns=()
    for _ in $(seq "$rounds"); do
      pgrep -f 'swift-build|swift-frontend|swift-test' >/dev/null && busy_note="yes"
      x=$(bench "$r"); h=$(bench healthz)
      rs+=("$x"); hs+=("$h"); ns+=("$(ratio "${x%!}" "${h%!}")")
    done
    rate[$r,$scale]=$(median "${rs[@]%!}"); [[ "${rs[*]}" == *"!"* ]] && rate[$r,$scale]+="!"
    control[$r,$scale]=$(median "${hs[@]%!}"); norm[$r,$scale]=$(median "${ns[@]}")
  done
  hwm[$scale]=$(rss VmHWM)
  stop
  rm -rf "$data"
done

{
  echo "AssetDepot history benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources && [ -z "$(git ls-files --others --exclude-standard Sources)" ] || echo ' (Sources with uncommitted changes)'); release build of $(date -u -r "$depot" '+%H:%M UTC'), origin --threads 2 --patch-depth 0, report rate limits lifted"
  echo "data-folder system calls per request: strace -f -yy, $requests requests on 8 keep-alive connections (every status checked), after 20 warm-up requests"
  echo "req/s: wrk -t2 -c32 ${seconds}s x $rounds rounds, each beside a /healthz run; (x) = (route/healthz) / (route/healthz at 1x)"
  for s in $scales; do
    printf 'fixture %sx: %s MiB on /dev/shm, written in %s s; origin listening after %s s, its start-up work done %s s later (RSS then %s MiB); data-folder calls while idle after that %s/s\n' \
      "$s" "${fixture_size[$s]}" "${fixture_time[$s]}" "${startup[$s]}" "${settle_time[$s]}" "${rss_start[$s]}" "${background[$s]}"
  done
  [ -z "$busy_note" ] || echo "note: another swift build or test ran during some timed rounds (the healthz control is beside each)"
  echo
  printf '| route | expect |'; for s in $scales; do printf ' calls/req %sx |' "$s"; done; for s in $scales; do printf ' req/s %sx |' "$s"; done; echo
  printf '| --- | --- |'; for s in $scales; do printf ' ---: |'; done; for s in $scales; do printf ' ---: |'; done; echo
  for r in "${route_names[@]}"; do
    printf '| %s | %s |' "${label[$r]}" "${expect[$r]}"
    for s in $scales; do printf ' %s |' "${calls[$r,$s]}"; done
    first=${scales%% *}
    for s in $scales; do
      if [ "$r" = healthz ]; then printf ' %s |' "$(median $(for q in "${route_names[@]}"; do [ "$q" = healthz ] || echo "${control[$q,$s]}"; done))"
      elif [ "$s" = "$first" ]; then printf ' %s |' "${rate[$r,$s]}"
      else printf ' %s (%s) |' "${rate[$r,$s]}" "$(ratio "${norm[$r,$s]}" "${norm[$r,$first]}")"; fi
    done
    echo
  done
  echo
  printf '| origin | '; for s in $scales; do printf '%sx | ' "$s"; done; echo
  printf '| --- | '; for s in $scales; do printf -- '---: | '; done; echo
  printf '| RSS once started (start-up work done), MiB | '; for s in $scales; do printf '%s | ' "${rss_start[$s]}"; done; echo
  printf '| peak RSS (VmHWM) after every route, MiB | '; for s in $scales; do printf '%s | ' "${hwm[$s]}"; done; echo
  printf '| every default (patches on): listening after, s | '; for s in $scales; do printf '%s | ' "${d_startup[$s]}"; done; echo
  printf '| every default: start-up work done after, s | '; for s in $scales; do printf '%s | ' "${d_settle[$s]}"; done; echo
  printf '| every default: CPU seconds until then | '; for s in $scales; do printf '%s | ' "${d_cpu[$s]}"; done; echo
  printf '| every default: RSS then (peak), MiB | '; for s in $scales; do printf '%s (%s) | ' "${d_rss[$s]}" "${d_hwm[$s]}"; done; echo
  echo
  printf '| answer body, bytes (and MB/s at the median req/s) |'; for s in $scales; do printf ' %sx |' "$s"; done; echo
  printf '| --- |'; for s in $scales; do printf ' ---: |'; done; echo
  for r in "${route_names[@]}"; do
    printf '| %s |' "${label[$r]}"
    for s in $scales; do printf ' %s (%s) |' "${size[$r,$s]}" "$(awk -v b="${size[$r,$s]}" -v r="${rate[$r,$s]:-${control[manifest,$s]}}" 'BEGIN { printf "%.0f", b * r / 1e6 }')"; done
    echo
  done
  echo
  echo "data-folder calls by name (all $requests requests):"
  for r in "${route_names[@]}"; do
    printf '  %-38s' "${label[$r]}"; for s in $scales; do printf ' %sx: %-40s' "$s" "${names[$r,$s]:-none}"; done; echo
  done
} | tee "$out_file"
