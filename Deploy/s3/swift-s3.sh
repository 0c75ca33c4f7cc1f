#!/usr/bin/env bash
# A real S3 engine on loopback for tests and trials: a one-replica OpenStack Swift cluster
# (Debian's python3-swift) with its s3api and tempauth middleware, all in one folder.
#
#   Deploy/s3/swift-s3.sh start DIR    start it (installing python3-swift and memcached if missing);
#                                      prints endpoint=… access=… secret=… region=… and waits until
#                                      a signed S3 request is answered (a few seconds)
#   Deploy/s3/swift-s3.sh stop DIR     stop every process it started
#
# Rings, configuration, devices, logs and pids all live in DIR (which needs user xattrs: ext4,
# not an old tmpfs). Swift reads /etc/swift/swift.conf from that fixed path; the script writes
# one only if there is none. Credentials are tempauth's test users: access key test:tester,
# secret testing, and test:tester2 / testing2 of the same account (key rotation). Not for production: one replica, no auditors, no replicators.
set -euo pipefail
command=${1:?start or stop}; dir=${2:?folder}
# The servers outlive this script: they must not keep any descriptor it inherited beyond stdin,
# stdout and stderr (a caller waiting for a pipe of its own to close would wait for them too).
# Bash's own descriptor on this script stays.
self=$(readlink -f "$0")
for fd in /proc/$$/fd/*; do
  n=${fd##*/}
  [ "$n" -gt 2 ] 2>/dev/null || continue
  [ "$(readlink "$fd" 2>/dev/null)" = "$self" ] && continue
  eval "exec $n>&-" 2>/dev/null || true
done
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
py=/usr/bin/python3   # python3-swift lives in Debian's Python, whatever python is on PATH

stop() {
  [ -f "$dir/pids" ] || return 0
  while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$dir/pids"
  for _ in $(seq 50); do
    alive=0; while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done < "$dir/pids"
    [ $alive = 0 ] && break; sleep 0.1
  done
  while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$dir/pids"
  rm -f "$dir/pids"
}

if [ "$command" = stop ]; then stop; exit 0; fi
[ "$command" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
stop

if ! $py -c 'import swift' 2>/dev/null || ! command -v memcached >/dev/null; then
  # Package scripts would start system-wide services; policy-rc.d says no.
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null; $sudo chmod +x /usr/sbin/policy-rc.d
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-swift memcached >/dev/null
  $sudo rm -f /usr/sbin/policy-rc.d
fi
if [ ! -f /etc/swift/swift.conf ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo mkdir -p /etc/swift
  printf '[swift-hash]\nswift_hash_path_suffix = assetdepot-test\n\n[storage-policy:0]\nname = Policy-0\ndefault = yes\n' | $sudo tee /etc/swift/swift.conf >/dev/null
fi

# Free ports (the same ones again when the folder was used before, so that a restart keeps
# the endpoint), the rings (one device per server, one replica) and the configuration.
if [ ! -f "$dir/ports" ]; then
  $py - > "$dir/ports" <<'PY'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
fi
read -r proxy_port account_port container_port object_port cache_port < "$dir/ports"
mkdir -p "$dir/srv/d1" "$dir/logs"
$py - "$dir" "$account_port" "$container_port" "$object_port" <<'PY'
import sys
from swift.common.ring import RingBuilder
folder, ports = sys.argv[1], dict(zip(("account", "container", "object"), map(int, sys.argv[2:5])))
for kind, port in ports.items():
    builder = RingBuilder(6, 1, 1)
    builder.add_dev({"id": 0, "region": 1, "zone": 1, "ip": "127.0.0.1", "port": port, "device": "d1", "weight": 100})
    builder.rebalance()
    builder.get_ring().save(f"{folder}/{kind}.ring.gz")
PY
for kind in account container object; do
  port_var="${kind}_port"
  cat > "$dir/$kind-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = ${!port_var}
workers = 0
devices = $dir/srv
mount_check = false
swift_dir = $dir
log_level = WARNING
log_facility = LOG_LOCAL0
[pipeline:main]
pipeline = $kind-server
[app:$kind-server]
use = egg:swift#$kind
CONF
done
cat > "$dir/proxy-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $proxy_port
workers = 0
swift_dir = $dir
log_level = WARNING
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
user_test_tester2 = testing2 .admin
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$cache_port
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF

: > "$dir/pids"
memcached -l 127.0.0.1 -p "$cache_port" -U 0 -m 64 -u "$(id -un)" > "$dir/logs/memcached.log" 2>&1 &
echo $! >> "$dir/pids"
# Each server through python3-swift's own entry point (what /usr/bin/swift-*-server would run,
# without needing those packages and their system services).
for server in account-server container-server object-server proxy-server; do
  $py -c 'import sys; from swift.common.wsgi import run_wsgi; sys.exit(run_wsgi(sys.argv[1], sys.argv[2]))' \
    "$dir/$server.conf" "$server" > "$dir/logs/$server.log" 2>&1 &
  echo $! >> "$dir/pids"
done

# Ready when every server accepts connections and a signed S3 request (ListBuckets) is answered.
endpoint="http://127.0.0.1:$proxy_port"
for _ in $(seq 150); do
  if $py - "$endpoint" "$account_port" "$container_port" "$object_port" <<'PY' 2>/dev/null
import sys, hmac, hashlib, datetime, urllib.request, socket
endpoint = sys.argv[1]
for port in sys.argv[2:5]: socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
now = datetime.datetime.utcnow(); amz = now.strftime("%Y%m%dT%H%M%SZ"); day = now.strftime("%Y%m%d")
host = endpoint.split("//")[1]; empty = hashlib.sha256(b"").hexdigest()
canonical = f"GET\n/\n\nhost:{host}\nx-amz-content-sha256:{empty}\nx-amz-date:{amz}\n\nhost;x-amz-content-sha256;x-amz-date\n{empty}"
scope = f"{day}/us-east-1/s3/aws4_request"
to_sign = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
key = b"AWS4testing"
for part in (day, "us-east-1", "s3", "aws4_request"): key = hmac.new(key, part.encode(), hashlib.sha256).digest()
signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
request = urllib.request.Request(endpoint + "/", headers={"x-amz-date": amz, "x-amz-content-sha256": empty,
  "Authorization": f"AWS4-HMAC-SHA256 Credential=test:tester/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}"})
sys.exit(0 if urllib.request.urlopen(request, timeout=2).status == 200 else 1)
PY
  then
    echo "endpoint=$endpoint access=test:tester secret=testing region=us-east-1 access2=test:tester2 secret2=testing2"
    exit 0
  fi
  sleep 0.2
done
echo "the S3 engine did not answer; logs in $dir/logs" >&2
tail -5 "$dir"/logs/*.log >&2
stop
exit 1
