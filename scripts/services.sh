#!/usr/bin/env bash
# The servers the test suite needs, on loopback only. Installs what is missing from Debian's
# packages.
#
#   bash scripts/services.sh [start] [service...]   start what is not running (idempotent; the default)
#   bash scripts/services.sh status [service...]    one line per service; exit 3 if any is down
#   bash scripts/services.sh stop [service...]      stop what THIS script started (pid files in
#                                                   /var/tmp/leasehold-services-<uid>/); a server it found running is left alone
#
# Services (all of them when none is named):
#   redis      127.0.0.1:6379        the machine's own Redis, started here if it is down
#   redlock    127.0.0.1:7001..7005  independent redis-server processes, no persistence
#   postgres   127.0.0.1:5432        the machine's own PostgreSQL cluster, started here if it is down
#   zookeeper  127.0.0.1:2181, 2191..2193  standalone + 3-member ensemble (scripts/services.d/zookeeper.sh)
#   etcd       127.0.0.1:2379        one etcd member (scripts/services.d/etcd.sh)
#   etcd-cluster 127.0.0.1:2479,2481,2483  a 3-member etcd cluster (failover tests)
#
# Adding a service: put scripts/services.d/<name>.sh beside this script, defining svc_<name>_start,
# svc_<name>_stop and svc_<name>_status (status prints one line and returns 0 when up) and adding
# <name> to SERVICES; it may use the helpers below (log, wait_for, apt_install, live_pid,
# stop_pidfile, redis_*). Files there are sourced in name order. Ports can be moved with
# LEASEHOLD_REDIS_PORT / LEASEHOLD_REDLOCK_PORTS, the state dir with LEASEHOLD_SERVICES_DIR (tests).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/.."
# The services listen on fixed ports, machine-wide, so their pid files, data and cluster configs
# live machine-wide too (per user): any checkout of the project finds the servers another one
# started, can stop them, and the failover tests can kill and restore them.
STATE="${LEASEHOLD_SERVICES_DIR:-/var/tmp/leasehold-services-$(id -u)}"
REDIS_PORT="${LEASEHOLD_REDIS_PORT:-6379}"
REDLOCK_PORTS="${LEASEHOLD_REDLOCK_PORTS:-7001 7002 7003 7004 7005}"
SERVICES=(redis redlock postgres)
mkdir -p "$STATE"

log() { printf '[services] %s\n' "$*"; }

# Waits until the command succeeds, for up to WAIT_SECONDS (40). With WAIT_PID (a server this run
# started), gives up at once if that process exits, and shows the end of WAIT_LOG: a server that
# could not bind its port says so in a second, instead of a minute of retries.
wait_for() { # name, command...
  local name=$1 deadline=$((SECONDS + ${WAIT_SECONDS:-40})) pid=${WAIT_PID:-}
  shift
  until "$@" >/dev/null 2>&1; do
    if [ -n "$pid" ] && ! running "$pid"; then
      log "$name exited before it came up${WAIT_LOG:+; the end of $WAIT_LOG:}"
      if [ -n "${WAIT_LOG:-}" ]; then tail -n 8 "$WAIT_LOG" | sed 's/^/    /'; fi
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "$name did not come up"
      return 1
    fi
    sleep 0.2
  done
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "need root to apt-get install $*"
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null || {
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
  }
}

# The pid in $1 if that process is alive and its command line contains $2, else nothing.
live_pid() {
  local file=$1 pattern=$2 pid
  [ -f "$file" ] || return 1
  pid=$(cat "$file" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$pattern" || return 1
  echo "$pid"
}

# The process exists and has not exited: a daemonized server's exit leaves a zombie until the
# machine's init reaps it, up to ~2 s later here, and kill -0 still succeeds on a zombie.
running() { # pid
  kill -0 "$1" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

# Stops the process in pid file $2 (a server on port $3) if this script started it.
stop_pidfile() { # name, pidfile, pattern
  local name=$1 file=$2 pattern=$3 pid
  if pid=$(live_pid "$file" "$pattern"); then
    kill -TERM "$pid"
    for _ in $(seq 1 50); do
      running "$pid" || break
      sleep 0.1
    done
    running "$pid" && kill -KILL "$pid"
    rm -f "$file"
    log "stopped $name (pid $pid)"
  else
    rm -f "$file"
    log "$name: not started by this script here; left alone"
  fi
}

# ---- one redis-server per port (shared by redis and redlock)
redis_up() { redis-cli -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1; }
redis_start_port() { # port
  local port=$1
  redis_up "$port" && return 0
  log "starting redis on $port"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$STATE" --logfile "$STATE/redis-$port.log" --pidfile "$STATE/redis-$port.pid"
}
redis_status_port() { # name, port
  local name=$1 port=$2 pid
  if redis_up "$port"; then
    if pid=$(live_pid "$STATE/redis-$port.pid" "redis-server.*:$port "); then
      printf '%-10s up    127.0.0.1:%-6s pid %s, started by this script\n' "$name" "$port" "$pid"
    else
      printf '%-10s up    127.0.0.1:%-6s not started by this script\n' "$name" "$port"
    fi
  else
    printf '%-10s down  127.0.0.1:%s\n' "$name" "$port"
    return 1
  fi
}
redis_tools() {
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
}

# ---- redis: the single Redis
svc_redis_start() {
  redis_tools
  redis_start_port "$REDIS_PORT"
  wait_for "redis-$REDIS_PORT" redis_up "$REDIS_PORT"
}
svc_redis_stop() { stop_pidfile "redis on $REDIS_PORT" "$STATE/redis-$REDIS_PORT.pid" "redis-server.*:$REDIS_PORT "; }
svc_redis_status() { redis_status_port redis "$REDIS_PORT"; }

# ---- redlock: independent masters
svc_redlock_start() {
  redis_tools
  local port
  for port in $REDLOCK_PORTS; do redis_start_port "$port"; done
  for port in $REDLOCK_PORTS; do wait_for "redis-$port" redis_up "$port"; done
}
svc_redlock_stop() {
  local port
  for port in $REDLOCK_PORTS; do
    stop_pidfile "redlock node $port" "$STATE/redis-$port.pid" "redis-server.*:$port "
  done
}
svc_redlock_status() {
  local port ok=0
  for port in $REDLOCK_PORTS; do redis_status_port redlock "$port" || ok=1; done
  return $ok
}

# ---- postgres: the machine's cluster (trust auth on loopback, databases postgres and test)
pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q; }
pg_version() { ls /etc/postgresql | sort -V | tail -1; }
svc_postgres_start() {
  if ! pg_ready; then
    if ! command -v pg_ctlcluster >/dev/null; then apt_install postgresql; fi
    log "starting postgresql"
    pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start || true
    wait_for postgresql pg_ready
    touch "$STATE/postgres.started"
  fi
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname='test'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -c 'create database test' >/dev/null
}
svc_postgres_stop() {
  if [ -f "$STATE/postgres.started" ] && pg_ready; then
    pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main stop
    rm -f "$STATE/postgres.started"
    log "stopped postgresql"
  else
    log "postgres: not started by this script here; left alone"
  fi
}
svc_postgres_status() {
  local who='not started by this script'
  [ -f "$STATE/postgres.started" ] && who='started by this script'
  if pg_ready; then
    printf '%-10s up    127.0.0.1:%-6s %s\n' postgres 5432 "$who"
  else
    printf '%-10s down  127.0.0.1:%s\n' postgres 5432
    return 1
  fi
}

# ---- services defined beside this script, one file each
for f in "$HERE"/services.d/*.sh; do
  [ -e "$f" ] || continue
  # shellcheck source=/dev/null
  source "$f"
done

# ---- dispatch
cmd=start
case "${1:-}" in start | stop | status) cmd=$1 && shift ;; esac
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${SERVICES[@]}")
for name in "${names[@]}"; do
  if ! declare -F "svc_${name}_start" >/dev/null; then
    log "unknown service \"$name\" (known: ${SERVICES[*]})"
    exit 2
  fi
done
# start and stop take the services' lock: two of them at once (a test's heal that outlived its
# test beside the next file's heal) would stop nodes the other is clustering. A directory, not
# flock(1): the servers started here would inherit a lock file descriptor and hold it forever.
services_lock() {
  local dir="$STATE/services.lock" holder tries=0
  until mkdir "$dir" 2>/dev/null; do
    holder=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$holder" ] && ! kill -0 "$holder" 2>/dev/null; then
      rm -rf "$dir" # its holder died without unlocking
      continue
    fi
    tries=$((tries + 1))
    if [ $tries = 5 ]; then log "waiting for another services.sh (pid ${holder:-?}) to finish"; fi
    if [ $tries -ge 3000 ]; then
      log "another services.sh (pid ${holder:-?}) held $dir for 10 minutes" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo $$ >"$dir/pid"
  SERVICES_LOCK=$dir
  trap 'rm -rf "$SERVICES_LOCK"' EXIT
}
[ "$cmd" = status ] || services_lock
case $cmd in
  start)
    for name in "${names[@]}"; do "svc_${name}_start"; done
    log "up: ${names[*]}"
    ;;
  stop)
    # in reverse order of starting
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do "svc_${names[i]}_stop"; done
    ;;
  status)
    down=0
    for name in "${names[@]}"; do "svc_${name}_status" || down=1; done
    [ $down = 0 ] || exit 3
    ;;
esac
