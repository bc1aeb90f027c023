# shellcheck shell=bash
# ---- cluster: a Redis Cluster of 3 masters + 3 replicas on 127.0.0.1:7301..7306, no persistence.
# Each node has its own directory, $STATE/cluster/<port>, for its cluster config (nodes-<port>.conf)
# and whatever it writes: a replica's full sync writes the master's data to dump.rdb in its dir,
# and a node started in a shared dir loaded another node's dump.rdb, claimed the slots of those
# keys ("Taking responsibility for it") and broke the cluster (the Cluster failures of two CI
# runs). A node always starts empty (no persistence: its dump.rdb is removed). Start is idempotent: a
# cluster that is already up, `cluster_state:ok` and agreed on every slot's owner is left as it is.
# A cluster that does not get there within ~23 s of its nodes being up
# (LEASEHOLD_CLUSTER_CONVERGE_TRIES x 0.2 s + 3 s) is diagnosed (stderr and
# $STATE/cluster/recreated.log) and created afresh: it holds test data only.
# Ports: LEASEHOLD_CLUSTER_PORTS.
CLUSTER_PORTS="${LEASEHOLD_CLUSTER_PORTS:-7301 7302 7303 7304 7305 7306}"
SERVICES+=(cluster)

cluster_ok() { # every node answers, reports cluster_state:ok, and they agree on who serves each slot
  local port
  for port in $CLUSTER_PORTS; do
    redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
  cluster_agree
}

# The masters and their slots as one node sees them (slot ranges only: no migration marks).
cluster_slot_map() { # port
  redis-cli -h 127.0.0.1 -p "$1" cluster nodes 2>/dev/null |
    awk '$3 ~ /master/ && $3 !~ /fail/ { s = $2; for (i = 9; i <= NF; i++) if ($i !~ /^\[/) s = s " " $i; print s }' |
    sort
}

# Every node sees the same owner for every slot. cluster_state:ok is not enough: a hand-made slot
# move whose owner did not bump its config epoch can leave one node sending a slot's clients to
# a node that sends them back (MOVED both ways, "Too many Cluster redirections"; seen after the
# resharding tests, 2026-12-04), and every node still says ok.
cluster_agree() {
  local port first="" map
  for port in $CLUSTER_PORTS; do
    map=$(cluster_slot_map "$port")
    [ -n "$map" ] || return 1
    if [ -z "$first" ]; then first=$map; elif [ "$map" != "$first" ]; then return 1; fi
  done
}

cluster_start_port() { # port
  local port=$1 dir="$STATE/cluster/$1"
  redis_up "$port" && return 0
  mkdir -p "$dir"
  rm -f "$dir/dump.rdb" # test data only: a node comes back empty, as after a crash without persistence
  log "starting cluster node on $port"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --cluster-enabled yes --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 2000 \
    --repl-diskless-sync-delay 0 \
    --dir "$dir" --logfile "$dir/redis.log" --pidfile "$STATE/redis-$port.pid" ||
    cluster_fail "redis-server on $port did not start"
}

svc_cluster_start() {
  redis_tools
  local port
  cluster_ok && return 0
  for port in $CLUSTER_PORTS; do cluster_start_port "$port"; done
  for port in $CLUSTER_PORTS; do wait_for "cluster-$port" redis_up "$port" || cluster_fail "node $port did not start"; done
  # nodes that already know each other (a restart of one node) converge on their own. A first node
  # that knows only itself (started without a cluster config) never joins the others by itself:
  # no waiting then (it cost 3-5 s of every fresh start), the cluster is created below
  if [ "$(cluster_known_nodes)" != 1 ]; then
    wait_for_quiet 15 cluster_ok && return 0 # ~3 s: a restarted node rejoining
  fi
  if [ "$(cluster_known_nodes)" = 1 ]; then
    cluster_create
  elif ! wait_for_quiet "${LEASEHOLD_CLUSTER_CONVERGE_TRIES:-100}" cluster_ok; then
    # a cluster of test data that will not converge: say why, then start it afresh rather than
    # fail every later test file that needs it (fences stay above earlier ones: they are seeded
    # from the server's TIME)
    cluster_diagnose "the cluster did not reach cluster_state:ok with every node agreeing on the slots; recreating it" >&2
    cluster_diagnose "the cluster did not reach cluster_state:ok with every node agreeing on the slots; recreated it" >>"$STATE/cluster/recreated.log"
    svc_cluster_stop >/dev/null
    for port in $CLUSTER_PORTS; do cluster_start_port "$port"; done
    for port in $CLUSTER_PORTS; do wait_for "cluster-$port" redis_up "$port" || cluster_fail "node $port did not start"; done
    [ "$(cluster_known_nodes)" = 1 ] || cluster_fail "a node kept its old cluster config"
    cluster_create
  fi
}

cluster_known_nodes() { # of the first node
  local first
  first=$(set -- $CLUSTER_PORTS && echo "$1")
  redis-cli -h 127.0.0.1 -p "$first" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p'
}

cluster_create() {
  local port addrs=()
  log "creating the cluster on $CLUSTER_PORTS"
  for port in $CLUSTER_PORTS; do addrs+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$STATE/cluster/create.log"
  wait_for_quiet 100 cluster_ok || cluster_fail "a new cluster did not reach cluster_state:ok"
}

# Prints what each node says (to stderr: a caller that fails on it shows its stderr) and exits.
cluster_fail() {
  cluster_diagnose "$1" >&2
  exit 1
}

# One line per node: its state and its own line of CLUSTER NODES, or its log's last lines.
cluster_diagnose() { # headline
  local port
  echo "[services] cluster: $1"
  for port in $CLUSTER_PORTS; do
    if redis_up "$port"; then
      printf '  %s: %s| %s\n' "$port" \
        "$(redis-cli -h 127.0.0.1 -p "$port" cluster info | grep -E '^cluster_(state|slots_ok|slots_pfail|slots_fail|known_nodes|current_epoch):' | tr -d '\r' | tr '\n' ' ')" \
        "$(redis-cli -h 127.0.0.1 -p "$port" cluster nodes | grep myself | cut -d' ' -f1-3,9-)"
    else
      printf '  %s: down; its log ends: %s\n' "$port" "$(tail -n 4 "$STATE/cluster/$port/redis.log" 2>/dev/null | tr '\n' '|')"
    fi
  done
}

wait_for_quiet() { # tries (0.2 s apart), command...
  local n=$1
  shift
  for _ in $(seq 1 "$n"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

svc_cluster_stop() {
  local port
  for port in $CLUSTER_PORTS; do
    stop_pidfile "cluster node $port" "$STATE/redis-$port.pid" "redis-server.*:$port "
  done
  # a cluster's node ids live in these files: stopped nodes start as a fresh cluster next time
  rm -f "$STATE"/cluster/*/nodes-*.conf "$STATE"/cluster/*/dump.rdb "$STATE"/cluster/nodes-*.conf "$STATE"/cluster/dump.rdb
}

svc_cluster_status() {
  local port ok=0
  for port in $CLUSTER_PORTS; do redis_status_port cluster "$port" || ok=1; done
  if [ $ok = 0 ] && ! cluster_ok; then
    printf '%-10s down  cluster_state is not ok, or the nodes disagree on the owner of a slot\n' cluster
    ok=1
  fi
  return $ok
}
