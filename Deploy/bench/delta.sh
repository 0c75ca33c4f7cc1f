#!/usr/bin/env bash
# Deltas side by side: depot delta against xdelta3 (default settings), zstd --patch-from --long=31,
# rdiff (librsync) and, where it fits in memory, bsdiff, on the same revision pairs of a random
# base of SIZE MiB (default 1024):
#   a  10 changed regions of 64 KiB          b  1 MiB inserted at 10%
#   c  1 MiB deleted at 50%                   d  100 MiB appended (SIZE/10 when smaller)
#   e  everything changed
# For each tool and pair: patch size, seconds and peak RSS to make it, seconds and peak RSS to
# apply it; every result is checked byte for byte against the target before it is reported, and
# `cp` of the target gives the copy speed applying is compared with (also a durable copy, and
# openssl dgst -sha256: the verification any safe apply does).
#   Deploy/bench/delta.sh [SIZE_MIB]        (needs the release depot: swift build -c release)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
size=${1:-1024}
missing=()
for tool in xdelta3 zstd rdiff bsdiff; do command -v $tool >/dev/null || missing+=("$tool"); done
[ -x /usr/bin/time ] || missing+=(time)
if ((${#missing[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xdelta3 zstd rdiff bsdiff time >/dev/null
fi
depot=.build/release/depot
[ -x $depot ] || swift build -c release --product depot >/dev/null 2>&1
work=$(mktemp -d /var/tmp/depot-delta-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mib=$((1 << 20))

python3 - "$work" "$size" <<'PY'
import os, random, sys
work, size = sys.argv[1], int(sys.argv[2]) << 20
rng = random.Random(2026)
with open(f"{work}/base", "wb") as f:
    left = size
    while left:
        n = min(left, 1 << 24); f.write(rng.randbytes(n)); left -= n
base = open(f"{work}/base", "rb").read()
mib = 1 << 20
a = bytearray(base)
for k in range(10):
    at = (k * 2 + 1) * size // 21
    a[at:at + 65536] = rng.randbytes(65536)
open(f"{work}/a", "wb").write(a); del a
at = size // 10
open(f"{work}/b", "wb").write(base[:at] + rng.randbytes(mib) + base[at:])
at = size // 2
open(f"{work}/c", "wb").write(base[:at] + base[at + mib:])
open(f"{work}/d", "wb").write(base + rng.randbytes(min(100 * mib, size // 10)))
with open(f"{work}/e", "wb") as f:
    left = size
    while left:
        n = min(left, 1 << 24); f.write(rng.randbytes(n)); left -= n
PY

measure() {  # measure OUTFILE command…  → "seconds peakKiB"
  local out=$1; shift
  /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null 2>&1
}
# Copies and applies are short and this machine's page cache and disk are noisy (the same cp
# takes 0.3 s or 2.5 s): each is run three times and the fastest run is kept, for every tool alike.
best() {  # best OUTFILE CLEANUP command…  → the fastest of three runs' "seconds peakKiB"
  local out=$1 cleanup=$2; shift 2
  local s k run best_s="" best_k=""
  for run in 1 2 3; do
    sync
    measure "$out" "$@"; read -r s k < "$out"
    if [ -z "$best_s" ] || [ "$(echo "$s < $best_s" | bc)" = 1 ]; then best_s=$s; best_k=$k; fi
    [ "$run" = 3 ] || rm -rf $cleanup
  done
  echo "$best_s $best_k" > "$out"
}
same() { cmp -s "$1" "$2"; }

base_sha=$(sha256sum "$work/base" | cut -c1-64)
printf '%-4s %-8s %14s %8s %10s %8s %10s %s\n' pair tool patch_bytes make_s make_MiB apply_s apply_MiB note
for pair in a b c d e; do
  t=$work/$pair
  best "$work/cp.t" "$work/copy" cp "$t" "$work/copy"; read -r cps _ < "$work/cp.t"; rm -f "$work/copy"
  # depot delta apply makes its result durable (fsync) before it is kept: a durable copy too.
  best "$work/dd.t" "$work/copy" dd if="$t" of="$work/copy" bs=1M conv=fsync status=none; read -r dds _ < "$work/dd.t"; rm -f "$work/copy"
  # Applying checks the result's SHA-256; hashing the output alone (OpenSSL, SHA instructions) takes this long.
  best "$work/sha.t" "" openssl dgst -sha256 "$t"; read -r shas _ < "$work/sha.t"
  echo "$pair: cp ${cps} s, cp with fsync ${dds} s, openssl dgst -sha256 ${shas} s"
  for tool in depot xdelta3 zstd rdiff bsdiff; do
    p=$work/patch.$tool; r=$work/result.$tool; note=""
    case $tool in
      depot)   # The origin knows both SHA-256 from the manifest, so they are given, as it gives them.
               measure "$work/make.t" $depot delta make --base-sha256 "$base_sha" --target-sha256 "$(sha256sum "$t" | cut -c1-64)" "$work/base" "$t" "$p"
               best "$work/apply.t" "$r" $depot delta apply "$work/base" "$p" "$r" ;;
      xdelta3) measure "$work/make.t" xdelta3 -e -f -s "$work/base" "$t" "$p"
               best "$work/apply.t" "$r" xdelta3 -d -f -s "$work/base" "$p" "$r" ;;
      zstd)    measure "$work/make.t" zstd -q -f --long=31 --patch-from="$work/base" "$t" -o "$p"
               best "$work/apply.t" "$r" zstd -q -f -d --long=31 --patch-from="$work/base" "$p" -o "$r" ;;
      rdiff)   measure "$work/make.t" sh -c "rdiff signature '$work/base' '$work/sig' && rdiff delta '$work/sig' '$t' '$p'"
               best "$work/apply.t" "$r" rdiff patch "$work/base" "$p" "$r" ;;
      bsdiff)  if [ "$size" -gt 256 ]; then echo "$(printf '%-4s %-8s' $pair bsdiff) skipped: needs ~17x the base in memory"; continue; fi
               measure "$work/make.t" bsdiff "$work/base" "$t" "$p"
               best "$work/apply.t" "$r" bspatch "$work/base" "$r" "$p" ;;
    esac
    same "$r" "$t" || note="WRONG RESULT"
    read -r ms mk < "$work/make.t"; read -r as ak < "$work/apply.t"
    printf '%-4s %-8s %14s %8s %10s %8s %10s %s\n' $pair $tool "$(stat -c %s "$p")" "$ms" "$((mk / 1024))" "$as" "$((ak / 1024))" \
      "${note:-apply at $(echo "scale=2; $cps / $as" | bc 2>/dev/null || echo '?')x cp, $(echo "scale=2; $dds / $as" | bc 2>/dev/null || echo '?')x cp+fsync}"
    rm -f "$p" "$r" "$work/sig"
  done
done
