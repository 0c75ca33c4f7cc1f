#!/usr/bin/env bash
# A realistic revision pair: two releases of a real archive from a package registry (numpy's
# manylinux wheels 1.26.3 and 1.26.4 from PyPI: zips of a few hundred entries), patched as whole
# files by depot, xdelta3, zstd --patch-from, rdiff and bsdiff, and as trees (entry by entry, as
# a device with the zip pack unpacked gets it) by depot. Every result is checked before it is
# reported. Needs the release depot (swift build -c release) and network access to PyPI.
#   Deploy/bench/delta-real.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
for tool in xdelta3 zstd rdiff bsdiff unzip; do command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xdelta3 zstd rdiff bsdiff unzip time >/dev/null; break; }; done
depot=.build/release/depot
work=$(mktemp -d /var/tmp/depot-delta-real.XXXXXX)
trap 'rm -rf "$work"' EXIT
for v in 1.26.3 1.26.4; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 -d "$work/$v" "numpy==$v" >/dev/null 2>&1
done
old=$(ls "$work"/1.26.3/*.whl); new=$(ls "$work"/1.26.4/*.whl)
mkdir "$work/old-tree" "$work/new-tree"
unzip -q "$old" -d "$work/old-tree"; unzip -q "$new" -d "$work/new-tree"
echo "numpy 1.26.3 -> 1.26.4 wheels: $(stat -c %s "$old") -> $(stat -c %s "$new") bytes, $(find "$work/new-tree" -type f | wc -l) files"
measure() { local out=$1; shift; /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null 2>&1; }
printf '%-12s %12s %8s %10s %8s %10s\n' tool patch_bytes make_s make_MiB apply_s apply_MiB
report() {  # tool patch
  read -r ms mk < "$work/make.t"; read -r as ak < "$work/apply.t"
  printf '%-12s %12s %8s %10s %8s %10s\n' "$1" "$(stat -c %s "$2")" "$ms" "$((mk / 1024))" "$as" "$((ak / 1024))"
}
p=$work/p; r=$work/r
measure "$work/make.t" $depot delta make "$old" "$new" "$p"; measure "$work/apply.t" $depot delta apply "$old" "$p" "$r"; cmp -s "$r" "$new"; report depot "$p"; rm -f "$p" "$r"
measure "$work/make.t" xdelta3 -e -f -s "$old" "$new" "$p"; measure "$work/apply.t" xdelta3 -d -f -s "$old" "$p" "$r"; cmp -s "$r" "$new"; report xdelta3 "$p"; rm -f "$p" "$r"
measure "$work/make.t" zstd -q -f --long=31 --patch-from="$old" "$new" -o "$p"; measure "$work/apply.t" zstd -q -f -d --long=31 --patch-from="$old" "$p" -o "$r"; cmp -s "$r" "$new"; report zstd "$p"; rm -f "$p" "$r"
measure "$work/make.t" sh -c "rdiff signature '$old' '$work/sig' && rdiff delta '$work/sig' '$new' '$p'"; measure "$work/apply.t" rdiff patch "$old" "$p" "$r"; cmp -s "$r" "$new"; report rdiff "$p"; rm -f "$p" "$r"
measure "$work/make.t" bsdiff "$old" "$new" "$p"; measure "$work/apply.t" bspatch "$old" "$r" "$p"; cmp -s "$r" "$new"; report bsdiff "$p"; rm -f "$p" "$r"
measure "$work/make.t" $depot delta make "$work/old-tree" "$work/new-tree" "$p"; measure "$work/apply.t" $depot delta apply "$work/old-tree" "$p" "$work/result-tree"
diff -r "$work/result-tree" "$work/new-tree" >/dev/null; report "depot-tree" "$p"
