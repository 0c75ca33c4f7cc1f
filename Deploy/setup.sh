#!/usr/bin/env bash
# AssetDepot set-up, shared by the README's commands and CI (.ci/run).
#
#   Deploy/setup.sh serve [depot serve options]   install what serving needs, build, start the origin
#   Deploy/setup.sh test                          install what the tests need too, run the whole test suite
#   Deploy/setup.sh deps                          only install what is missing (serving and tests)
#
# Needs a Swift 6 toolchain on PATH (https://www.swift.org/install/linux/); system packages
# come from apt (Debian 12 / Ubuntu 22.04 or later).
set -euo pipefail
cd "$(dirname "$0")/.."

# What building and serving need: the two C libraries (and pkg-config to find them), p11-kit's
# PKCS#11 header (depot signs with keys in hardware tokens; nothing is linked), openssl for
# `depot bootstrap`'s keys and certificates, curl for checks.
serve_packages=(libmicrohttpd-dev libssl-dev libp11-kit-dev openssl pkg-config curl)
# What only the tests and benchmarks need: the peers and tools they start themselves.
test_packages=(python3 python3-pip python3-cryptography nginx-light systemd wrk slowhttptest time
  python3-swift memcached  # the S3 engine the object-storage tests start (Deploy/s3/swift-s3.sh)
  chromium chromium-driver  # the browser the dashboard's test drives (Tests/Browser)
  prometheus  # its promtool checks Deploy/prometheus/alerts.yml (Tests/EndToEndTests/AlertRulesTests.swift)
  dpkg-dev  # dpkg-shlibdeps names the package's Depends (Deploy/package.sh, Deploy/package-test.sh)
  lintian  # checks the Debian package; an error fails Deploy/package-test.sh
  strace  # counts each anonymous route's system calls at small and large history (Tests/EndToEndTests/CostTests.swift)
  softhsm2 opensc)  # a PKCS#11 token and pkcs11-tool, for the root and release keys in hardware (Tests/EndToEndTests/HardwareKeyTests.swift)

install_missing() {  # install_missing PACKAGE…
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: ${missing[*]}" >&2
    $sudo apt-get update -qq
    # Packages are installed, not started: the tests start nginx, memcached and Swift themselves.
    local policy=/usr/sbin/policy-rc.d
    local own_policy=0
    if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null && $sudo chmod +x $policy && own_policy=1; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ $own_policy = 0 ] || $sudo rm -f $policy
    # Only promtool is wanted of prometheus: its server (open on :9090) must not start at boot.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
      $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
  if ! command -v swift >/dev/null; then
    echo "error: no Swift toolchain on PATH; install Swift 6 from https://www.swift.org/install/linux/" >&2
    exit 1
  fi
}

# From PyPI: tuspy, the reference Python tus client (a standard tus 1.0 client works against the
# origin), and Selenium, which drives Chromium through chromedriver for the dashboard's test.
install_test_tools() {
  python3 -c "import tusclient, selenium" 2>/dev/null && return
  echo "installing: tuspy, selenium (PyPI)" >&2
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages tuspy==1.1.0 selenium==4.51.0 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check tuspy==1.1.0 selenium==4.51.0
}

case "${1:-}" in
  deps)
    install_missing "${serve_packages[@]}" "${test_packages[@]}" ;;
  serve)
    shift
    install_missing "${serve_packages[@]}"
    swift build -c release --product depot
    exec .build/release/depot serve "$@" ;;
  test)
    install_missing "${serve_packages[@]}" "${test_packages[@]}"
    install_test_tools
    swift test --disable-xctest
    # The DocC catalogs of the modules apps import, built as their users read them; a broken
    # link or an undocumented parameter fails the run.
    for target in DepotCore DepotTransport DepotClient; do
      swift package generate-documentation --target $target --warnings-as-errors
    done
    # Then the suites that load the whole machine or time themselves, alone (in the parallel run
    # they would make others' timing flaky, or be made flaky).
    DEPOT_HEAVY_TESTS=1 swift test --disable-xctest --skip-build --filter 'LoadTests|HostileHTTPTests|TokenTimingTests|ConcurrentUploadTests|InstallStepTests|LargePatchTests|RolloutEndToEndTests|CostTests|LongLifeMemoryTests|BackgroundCostTests'
    # An origin through 42 simulated days (YearOfLife): alone, as it counts its CPU and memory.
    DEPOT_HEAVY_TESTS=1 swift test --disable-xctest --skip-build --filter YearOfLifeTests
    # Every route an anonymous client reaches, flooded from 8 addresses while another app's blob
    # is measured, on an origin with years of history (HistoryFixture): alone, as it compares rates.
    DEPOT_HEAVY_TESTS=1 swift test --disable-xctest --skip-build --filter FloodTests
    # The power cuts at the crash points of every durable sequence (the kills ran in the parallel
    # run), after the suites that time themselves: each crash point is a few processes.
    DEPOT_HEAVY_TESTS=1 swift test --disable-xctest --skip-build --filter 'ClientCrashPointTests|OriginCrashPointTests|ExtensionCrashPointTests|ManagedCrashPointTests|StateMoveCrashPointTests'
    # The suites that run the client again with the engine apps use, URLSession (FoundationNetworking
    # here): downloads, resumes, faulty proxies, the extension's flow, resumable publishing, edges.
    # (Not the TLS edge suite: FoundationNetworking takes no CA file and no --resolve.)
    DEPOT_CLIENT_ENGINE=urlsession swift test --disable-xctest --skip-build --filter \
      'DepotClientTests\.(DownloaderTests|DownloadFollowerTests|URLSessionEngineTests)|EndToEndTests\.(ClientEndToEndTests|EndToEndTests|FaultySyncTests|ExtensionFlowTests|ResumableUploadEndToEndTests|ManagedDeviceTests|ManagedDeviceHostileTests|NginxEdgeTests|ChannelBindingTests|FullDiskTests|PublishingCLITests|RolloutGuardTests)'
    # The dashboard in real Chromium (screenshots in .build/artifacts/dashboard).
    DEPOT_BROWSER_TESTS=1 swift test --disable-xctest --skip-build --filter DashboardTests
    # Last, the suites that start a real S3 engine (OpenStack Swift), one engine at a time per suite.
    DEPOT_S3_TESTS=1 exec swift test --disable-xctest --skip-build --filter 'S3BlobStoreTests|ObjectStorageTests|CredentialChainTests|RootRotationRaceTests' ;;
  *)
    echo "usage: Deploy/setup.sh serve [options] | test | deps" >&2
    exit 2 ;;
esac
