#!/usr/bin/env bash
# Installs the host packages fencecheck's Docker targets need, when missing:
#   iptables      partitions are iptables rules set inside our containers'
#                 network namespaces (nsenter comes with util-linux)
#   redis-server  the Redis image is assembled from Debian's redis-server
#   postgresql-15 the PostgreSQL image is assembled from Debian's PostgreSQL 15
#   mariadb-server the MariaDB image (target mysql) from Debian's MariaDB 10.11
#   gcc           the Redis image's clock-skew library is compiled at build
#   zookeeper     the ZooKeeper image is assembled from Debian's zookeeper
#                 and the Java runtime it depends on (default-jre-headless)
#   chromium      the browser test loads report.html in headless Chromium
#   fuse3         the power-loss nemesis's lazyfs layer is a FUSE mount
#                 (fusermount3 for unprivileged mounts and detaching)
# It never changes host firewall rules or anything else.
set -euo pipefail
need=()
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
[ -x /usr/bin/redis-server ] || need+=(redis-server)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
{ [ -f /usr/share/java/zookeeper.jar ] && [ -x /usr/bin/java ]; } || need+=(zookeeper default-jre-headless)
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
# Debian starts these servers as services on install; fencecheck only needs
# their files.
for svc in redis-server:redis-server postgresql-15:postgresql mariadb-server:mariadb; do
  if [[ " ${need[*]} " == *" ${svc%%:*} "* ]]; then
    ($SUDO systemctl stop "${svc#*:}" 2>/dev/null || $SUDO service "${svc#*:}" stop 2>/dev/null || true) >/dev/null 2>&1
  fi
done
