#!/usr/bin/env bash
# libFuzzer over the parsers that face untrusted bytes. Each target is built with
# `swiftc -sanitize=fuzzer,address` together with the sources it exercises (so it reaches their
# internal functions), then run from its committed seed corpus (Deploy/fuzz/corpus/TARGET; new
# inputs go to a scratch copy, not into git) for SECONDS each.
#   Deploy/fuzz/run.sh [SECONDS] [TARGET ...]      (defaults: 60; range target metadata zippath envelope pack archive response delta cbor)
# Prints a line per target: executions, new corpus entries, and whether it crashed. A crash
# leaves its input in .build/fuzz/TARGET/crash-*; make it a regression test, then a seed.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(range target metadata zippath envelope pack archive response delta cbor)
out=.build/fuzz
flags=(-sanitize=fuzzer,address -parse-as-library -O -g -suppress-warnings -package-name AssetDepot)

# DepotCore without ZIPFoundation: the zip code and the tree patches that use it.
core_sources() { find Sources/DepotCore -name '*.swift' ! -path '*/Zip/*' ! -name TreePatch.swift | sort; }
build() {
  local name=$1; shift
  mkdir -p "$out/$name"
  swiftc "${flags[@]}" -module-name "Fuzz_$name" "$@" "Deploy/fuzz/targets/$name.swift" -o "$out/$name/fuzz" 2> "$out/$name/build.log" \
    || { cat "$out/$name/build.log" >&2; exit 1; }
}

status=0
for name in "${targets[@]}"; do
  case $name in
    range) build range Sources/DepotServer/HTTPSupport/ByteRange.swift ;;
    target) build target Sources/DepotHTTP/RequestTarget.swift ;;
    metadata) build metadata Sources/DepotServer/Uploads/TusMetadata.swift ;;
    zippath) build zippath Sources/DepotCore/Zip/ZipEntryPath.swift ;;
    response) build response Sources/DepotTransport/HTTPResponseParser.swift ;;
    cbor) build cbor Sources/DepotServer/Attest/CBOR.swift ;;
    envelope | pack | archive | delta) build "$name" -I Sources/COpenSSL $(core_sources) -lcrypto ;;
    *) echo "unknown target $name" >&2; exit 2 ;;
  esac
  rm -rf "$out/$name/corpus"; mkdir -p "$out/$name/corpus"
  cp Deploy/fuzz/corpus/"$name"/* "$out/$name/corpus/"
  seeds=$(ls "$out/$name/corpus" | wc -l)
  # Inputs up to 4 KiB, except App Attest's objects (Apple's sample attestation is 5,906 bytes).
  max_len=4096; [ "$name" = cbor ] && max_len=16384
  set +e
  (cd "$out/$name" && ./fuzz -max_total_time="$seconds" -print_final_stats=1 -max_len=$max_len -timeout=10 -rss_limit_mb=2048 corpus > run.log 2>&1)
  result=$?
  set -e
  runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$out/$name/run.log")
  entries=$(ls "$out/$name/corpus" | wc -l)
  if [ $result -eq 0 ]; then
    echo "$name: ${runs:-?} executions in ${seconds} s, corpus $seeds -> $entries, no crash"
  else
    status=1
    echo "$name: CRASH after ${runs:-?} executions; see $out/$name/run.log and $out/$name/crash-*"
    grep -m3 -E "Fatal error|Precondition failed|ERROR: AddressSanitizer|deadly signal" "$out/$name/run.log" || true
  fi
done
exit $status
