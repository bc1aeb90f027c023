#!/usr/bin/env bash
# Makes sure every service the test suite needs is up, on loopback only. Idempotent: a service
# that already answers is left alone. Installs what is missing from Debian's packages.
#   Redis      127.0.0.1:6379        (the machine's own; started here if it is down)
#   Redlock    127.0.0.1:7001..7005  (independent redis-server processes, no persistence)
#   PostgreSQL 127.0.0.1:5432        (the machine's own; started here if it is down)
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="$PWD/.services"
mkdir -p "$STATE"

log() { printf '[services] %s\n' "$*"; }

wait_for() { # name, command...
  local name=$1; shift
  for _ in $(seq 1 100); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$name did not come up"; return 1
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then log "need root to apt-get install $*"; return 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null || {
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

command -v redis-server >/dev/null || apt_install redis-server
command -v redis-cli >/dev/null || apt_install redis-tools

# Single Redis on 6379
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  log "starting redis on 6379"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$STATE" --logfile "$STATE/redis-6379.log"
  wait_for redis-6379 redis-cli -h 127.0.0.1 -p 6379 ping
fi

# Redlock nodes: independent masters
for port in 7001 7002 7003 7004 7005; do
  if ! redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
    log "starting redis on $port"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --dir "$STATE" --logfile "$STATE/redis-$port.log" --pidfile "$STATE/redis-$port.pid"
  fi
done
for port in 7001 7002 7003 7004 7005; do wait_for "redis-$port" redis-cli -h 127.0.0.1 -p "$port" ping; done

# PostgreSQL
pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q; }
if ! pg_ready; then
  if ! command -v pg_ctlcluster >/dev/null; then apt_install postgresql; fi
  log "starting postgresql"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
  wait_for postgresql pg_ready
fi
psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname='test'" | grep -q 1 ||
  psql -h 127.0.0.1 -U postgres -d postgres -c 'create database test' >/dev/null

log "all services up"
