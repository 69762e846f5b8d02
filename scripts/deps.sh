#!/usr/bin/env bash
# Installs the host packages fencecheck's Docker targets need, when missing:
#   iptables      partitions are iptables rules set inside our containers'
#                 network namespaces (nsenter comes with util-linux)
#   redis-server  the Redis image is assembled from Debian's redis-server
#   gcc           the Redis image's clock-skew library is compiled at build
#   chromium      the browser test loads report.html in headless Chromium
# It never changes host firewall rules or anything else.
set -euo pipefail
need=()
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
[ -x /usr/bin/redis-server ] || need+=(redis-server)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
# `deps.sh docker` (make test) needs no browser; `deps.sh` (make check) does.
if [ "${1:-all}" = all ]; then command -v chromium >/dev/null 2>&1 || need+=(chromium); fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "deps: installing ${need[*]} (Debian packages)"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "deps: need root (or sudo) to apt-get install ${need[*]}; install them by hand" >&2; exit 3
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }; then
  echo "deps: could not install ${need[*]} with apt-get; install them by hand" >&2
  exit 3
fi
# Debian starts redis-server as a service on install; fencecheck only needs
# the binary.
if [[ " ${need[*]} " == *" redis-server "* ]]; then
  ($SUDO systemctl stop redis-server 2>/dev/null || $SUDO service redis-server stop 2>/dev/null || true) >/dev/null 2>&1
fi
