# shellcheck shell=bash
# ZooKeeper (Debian's `zookeeper` package on the machine's OpenJDK), on loopback only:
#   zookeeper   127.0.0.1:2181        one standalone server (the conformance suite)
#   zookeeper   127.0.0.1:2191..2193  a 3-member ensemble (failover tests), peers 2291..2293,
#                                     elections 2391..2393
# Each server is one `java ... QuorumPeerMain <zoo.cfg>` in the background, its config, data
# and log under $STATE/zk-<port>/, its pid in $STATE/zk-<port>.pid. Ports can be moved with
# LEASEHOLD_ZK_PORT and LEASEHOLD_ZK_ENSEMBLE_PORTS (three ports; peer = +100, election = +200).
ZK_PORT="${LEASEHOLD_ZK_PORT:-2181}"
ZK_ENSEMBLE_PORTS="${LEASEHOLD_ZK_ENSEMBLE_PORTS:-2191 2192 2193}"
ZK_CP=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
SERVICES+=(zookeeper)

# A four-letter word's reply (empty when nothing listens).
zk_4lw() { # port, word
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf '%s' "$2" >&3
  timeout 2 cat <&3
  exec 3<&-
}
zk_up() { [ "$(zk_4lw "$1" ruok)" = imok ]; }
# Serving requests (a quorum member reports its mode only once the ensemble has formed).
zk_serving() { zk_4lw "$1" srvr | grep -qE '^Mode: (standalone|leader|follower)'; }

zk_write_cfg() { # port, ensemble ("" for standalone), myid
  local port=$1 ensemble=$2 id=$3 dir="$STATE/zk-$1" p i=0
  mkdir -p "$dir/data" "$dir/log"
  {
    echo "tickTime=500"
    echo "initLimit=20"
    echo "syncLimit=10"
    echo "dataDir=$dir/data"
    echo "dataLogDir=$dir/log"
    echo "clientPort=$port"
    echo "clientPortAddress=127.0.0.1"
    # sessions between 1s and 60s (min/max session timeout: 2 and 120 ticks)
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=60000"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
    echo "maxClientCnxns=0"
    echo "autopurge.purgeInterval=1"
    echo "autopurge.snapRetainCount=3"
    echo "preAllocSize=4096"
    echo "forceSync=no"
    if [ -n "$ensemble" ]; then
      for p in $ensemble; do
        i=$((i + 1))
        echo "server.$i=127.0.0.1:$((p + 100)):$((p + 200))"
      done
    fi
  } >"$dir/zoo.cfg"
  [ -z "$ensemble" ] || echo "$id" >"$dir/data/myid"
}

zk_start_port() { # port, ensemble, myid
  local port=$1 dir="$STATE/zk-$1"
  if live_pid "$STATE/zk-$port.pid" "QuorumPeerMain $dir/zoo.cfg" >/dev/null; then return 0; fi
  if zk_up "$port"; then return 0; fi # someone else's server: left alone
  zk_write_cfg "$port" "$2" "$3"
  log "starting zookeeper on $port"
  # shellcheck disable=SC2086
  nohup java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dzookeeper.log.dir="$dir" \
    -Dzookeeper.root.logger=WARN,CONSOLE -Dzookeeper.console.threshold=WARN \
    -cp "$ZK_CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$STATE/zk-$port.pid"
  ZK_STARTED[$port]=$!
}
declare -A ZK_STARTED=() # port -> pid, for the servers this run started
zk_wait() { # port
  WAIT_PID=${ZK_STARTED[$1]:-} WAIT_LOG="$STATE/zk-$1/server.log" wait_for "zookeeper-$1" zk_serving "$1"
}

zk_install() {
  [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null && return 0
  apt_install -o DPkg::Lock::Timeout=300 zookeeper
}

svc_zookeeper_start() {
  zk_install
  local p i=0
  zk_start_port "$ZK_PORT" "" 0
  for p in $ZK_ENSEMBLE_PORTS; do
    i=$((i + 1))
    zk_start_port "$p" "$ZK_ENSEMBLE_PORTS" "$i"
  done
  zk_wait "$ZK_PORT"
  for p in $ZK_ENSEMBLE_PORTS; do zk_wait "$p"; done
}

svc_zookeeper_stop() {
  local p
  for p in $ZK_ENSEMBLE_PORTS $ZK_PORT; do
    stop_pidfile "zookeeper on $p" "$STATE/zk-$p.pid" "QuorumPeerMain $STATE/zk-$p/zoo.cfg"
  done
}

svc_zookeeper_status() {
  local p pid ok=0 who
  for p in $ZK_PORT $ZK_ENSEMBLE_PORTS; do
    who='not started by this script'
    pid=$(live_pid "$STATE/zk-$p.pid" "QuorumPeerMain $STATE/zk-$p/zoo.cfg") && who="pid $pid, started by this script"
    if zk_serving "$p"; then
      printf '%-10s up    127.0.0.1:%-6s %s\n' zookeeper "$p" "$who"
    else
      printf '%-10s down  127.0.0.1:%s\n' zookeeper "$p"
      ok=1
    fi
  done
  return $ok
}
