#!/usr/bin/env bash
# Installs the host packages fencecheck needs, when missing (Debian, apt-get;
# root or sudo). It never changes host firewall rules or anything else.
#
#   deps.sh TARGET   what `make test TARGET=...` needs for that target alone:
#                    memory and spec:FILE need nothing; etcd, etcd-mutex, s3*:
#                    iptables, util-linux, fuse3; redis*: those, redis-server
#                    and gcc; postgres*: iptables, util-linux, postgresql-15,
#                    gcc; mysql: iptables, util-linux, mariadb-server, gcc;
#                    zookeeper: iptables, util-linux, zookeeper with its Java
#                    runtime, gcc
#   deps.sh docker   what every Docker target needs (make images), and the
#                    SSH lab's hosts (openssh-server)
#   deps.sh all      that and chromium (make check)
#   deps.sh --list X prints the packages X needs, installed or not, and exits
#
# Why each:
#   iptables, util-linux  partitions are iptables rules set inside the
#                 containers' network namespaces (nsenter is util-linux's)
#   fuse3         the power-loss nemesis's lazyfs layer is a FUSE mount
#                 (fusermount3 for unprivileged mounts and detaching)
#   gcc           the clock-skew preload library (Redis, PostgreSQL,
#                 MariaDB, ZooKeeper) is compiled on this machine
#   redis-server, postgresql-15, mariadb-server, zookeeper (and
#   default-jre-headless)  their images are assembled from Debian's packages
#   openssh-server  the SSH lab's host image (harness/docker/sshlab) is
#                 assembled from Debian's sshd
#   chromium      the browser test loads report.html in headless Chromium
set -euo pipefail
list_only=false
if [ "${1:-}" = --list ]; then list_only=true; shift; fi
what="${1:-all}"

need=() # missing packages
all=()  # every package what needs
want() { # want CHECK PACKAGE...: PACKAGEs are needed, missing unless CHECK succeeds
  local check=$1; shift
  all+=("$@")
  if ! $list_only && ! eval "$check" >/dev/null 2>&1; then need+=("$@"); fi
}
net()       { want 'command -v iptables || [ -x /usr/sbin/iptables ]' iptables; want 'command -v nsenter' util-linux; }
fuse()      { want 'command -v fusermount3' fuse3; }
cc()        { want 'command -v gcc' gcc libc6-dev; }
redis()     { want '[ -x /usr/bin/redis-server ]' redis-server; }
postgres()  { want '[ -x /usr/lib/postgresql/15/bin/postgres ]' postgresql-15; }
mariadb()   { want '[ -x /usr/sbin/mariadbd ]' mariadb-server; }
zookeeper() { want '[ -f /usr/share/java/zookeeper.jar ] && [ -x /usr/bin/java ]' zookeeper default-jre-headless; }
sshd()      { want '[ -x /usr/sbin/sshd ]' openssh-server; }
browser()   { want 'command -v chromium' chromium; }

case "$what" in
  memory|spec:*) ;;
  etcd|etcd-mutex|s3|s3-unconditional) net; fuse ;;
  redis|redis-volatile|redis-everysec) net; fuse; cc; redis ;;
  postgres|postgres-trigger|postgres-async) net; cc; postgres ;;
  mysql) net; cc; mariadb ;;
  zookeeper) net; cc; zookeeper ;;
  docker) net; fuse; cc; redis; postgres; mariadb; zookeeper; sshd ;;
  all) net; fuse; cc; redis; postgres; mariadb; zookeeper; sshd; browser ;;
  # fencecheck itself says what is wrong with a target it does not know.
  *) echo "deps: no package list for target $what: installing nothing" >&2 ;;
esac
if $list_only; then echo "${all[*]}"; exit 0; fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "deps: installing ${need[*]} (Debian packages, for $what)"
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
for svc in redis-server:redis-server postgresql-15:postgresql mariadb-server:mariadb openssh-server:ssh; do
  if [[ " ${need[*]} " == *" ${svc%%:*} "* ]]; then
    ($SUDO systemctl stop "${svc#*:}" 2>/dev/null || $SUDO service "${svc#*:}" stop 2>/dev/null || true) >/dev/null 2>&1
  fi
done
