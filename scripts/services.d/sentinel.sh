# shellcheck shell=bash
# ---- sentinel: a Redis master (127.0.0.1:7311), its replica (7312) and three Sentinels
# (27311..27313) watching it as "leasehold", quorum 2, no persistence. redis-sentinel from Debian.
# start is idempotent: a running setup is left as it is (after a failover the master may be 7312).
SENTINEL_DATA_PORTS="${LEASEHOLD_SENTINEL_DATA_PORTS:-7311 7312}"
SENTINEL_PORTS="${LEASEHOLD_SENTINEL_PORTS:-27311 27312 27313}"
SENTINEL_MASTER="${LEASEHOLD_SENTINEL_MASTER:-leasehold}"
SERVICES+=(sentinel)

sentinel_tools() {
  redis_tools
  command -v redis-sentinel >/dev/null || apt_install redis-sentinel
  # Debian's package starts a system sentinel on 26379; ours run on their own ports only
}

sentinel_master_addr() { # prints "host port" of the current master, as the first sentinel sees it
  local port
  for port in $SENTINEL_PORTS; do
    redis-cli -h 127.0.0.1 -p "$port" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | paste -sd' ' && return 0
  done
  return 1
}

svc_sentinel_start() {
  sentinel_tools
  local port first dir="$STATE/sentinel" master_port
  mkdir -p "$dir"
  first=$(set -- $SENTINEL_DATA_PORTS && echo "$1")
  for port in $SENTINEL_DATA_PORTS; do
    redis_up "$port" && continue
    log "starting sentinel data node on $port"
    local extra=()
    # a node that comes back joins the current master as its replica
    if [ "$port" != "$first" ] || { master_port=$(sentinel_master_addr | awk '{print $2}') && [ -n "$master_port" ] && [ "$master_port" != "$port" ]; }; then
      extra=(--replicaof 127.0.0.1 "${master_port:-$first}")
    fi
    # its own dir, started empty: a replica's full sync writes dump.rdb there, and a master that
    # loaded it on a restart would bring back locks long gone (no persistence is meant)
    mkdir -p "$dir/$port"
    rm -f "$dir/$port/dump.rdb"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --dir "$dir/$port" --logfile "$dir/redis-$port.log" --pidfile "$STATE/redis-$port.pid" "${extra[@]}"
  done
  for port in $SENTINEL_DATA_PORTS; do wait_for "sentinel-data-$port" redis_up "$port"; done
  for port in $SENTINEL_PORTS; do
    redis_up "$port" && continue
    log "starting sentinel on $port"
    master_port=$(sentinel_master_addr | awk '{print $2}') || true
    cat >"$dir/sentinel-$port.conf" <<CONF
bind 127.0.0.1
port $port
daemonize yes
pidfile $STATE/sentinel-$port.pid
logfile $dir/sentinel-$port.log
dir $dir
sentinel monitor $SENTINEL_MASTER 127.0.0.1 ${master_port:-$first} 2
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 5000
sentinel parallel-syncs $SENTINEL_MASTER 1
CONF
    redis-sentinel "$dir/sentinel-$port.conf"
  done
  for port in $SENTINEL_PORTS; do wait_for "sentinel-$port" redis_up "$port"; done
  wait_for "sentinel master known" sentinel_master_addr
}

svc_sentinel_stop() {
  local port
  for port in $SENTINEL_PORTS; do
    stop_pidfile "sentinel $port" "$STATE/sentinel-$port.pid" "redis-sentinel.*:$port"
  done
  for port in $SENTINEL_DATA_PORTS; do
    stop_pidfile "sentinel data node $port" "$STATE/redis-$port.pid" "redis-server.*:$port "
  done
}

svc_sentinel_status() {
  local port ok=0 pid
  for port in $SENTINEL_DATA_PORTS; do redis_status_port sentinel "$port" || ok=1; done
  for port in $SENTINEL_PORTS; do
    if redis_up "$port"; then
      pid=$(live_pid "$STATE/sentinel-$port.pid" "redis-sentinel.*:$port") && pid="pid $pid, started by this script" || pid='not started by this script'
      printf '%-10s up    127.0.0.1:%-6s %s\n' sentinel "$port" "$pid"
    else
      printf '%-10s down  127.0.0.1:%s\n' sentinel "$port"
      ok=1
    fi
  done
  [ $ok = 0 ] && printf '%-10s master %s\n' sentinel "$(sentinel_master_addr || echo unknown)"
  return $ok
}
