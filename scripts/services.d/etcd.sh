# etcd, on loopback only (sourced by scripts/services.sh):
#   etcd          one member: clients 127.0.0.1:2379, peers :2380  (the conformance suite)
#   etcd-cluster  three members "c1..c3": clients 127.0.0.1:2479/2481/2483, peers :2480/2482/2484
#                 (failover tests: a test may kill a member; `start` brings it back with its data)
# Each member runs in the background with its pid file and data dir under $STATE. Installs
# etcd-server (and etcd-client, for etcdctl) from Debian when missing; Debian's package would
# start a system etcd on 2379 through systemd/invoke-rc.d, which is not there: if one is
# listening anyway and was not started by this script, it is used as it is (never killed).
# Ports: LEASEHOLD_ETCD_PORT (2379), LEASEHOLD_ETCD_CLUSTER_PORT (2479; members use +0/+2/+4,
# peers +1/+3/+5).
ETCD_PORT="${LEASEHOLD_ETCD_PORT:-2379}"
ETCD_CLUSTER_PORT="${LEASEHOLD_ETCD_CLUSTER_PORT:-2479}"
SERVICES+=(etcd etcd-cluster)
declare -A ETCD_STARTED=() # member name -> pid, for the members this run started

etcd_tools() {
  command -v etcd >/dev/null || apt_install etcd-server
  command -v etcdctl >/dev/null || apt_install etcd-client
}
etcd_up() { # client port (nothing listening: down at once, not after etcdctl's 2 s of dialing)
  etcd_listening "$1" || return 1
  ETCDCTL_API=3 etcdctl --endpoints="http://127.0.0.1:$1" --dial-timeout=1s --command-timeout=2s \
    endpoint health >/dev/null 2>&1
}
etcd_listening() { # client port: something accepts connections there (healthy or not)
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
# Starts member $1 (client port $2, peer port $3) of the cluster described by $4 (token $5).
etcd_start_member() { # name, client port, peer port, initial cluster, token
  local name=$1 cport=$2 pport=$3 cluster=$4 token=$5 dir="$STATE/etcd-$1" state=new
  if live_pid "$STATE/etcd-$name.pid" "etcd --name $name " >/dev/null; then return 0; fi
  if etcd_listening "$cport"; then
    log "etcd $name: something not started by this script listens on $cport; using it"
    return 0
  fi
  [ -d "$dir/member" ] && state=existing
  log "starting etcd $name on 127.0.0.1:$cport"
  nohup etcd --name "$name" --data-dir "$dir" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$cluster" --initial-cluster-token "$token" --initial-cluster-state "$state" \
    --listen-metrics-urls "" --logger zap --log-outputs stderr \
    >>"$STATE/etcd-$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/etcd-$name.pid"
  ETCD_STARTED[$name]=$!
}
etcd_wait_member() { # name, client port
  WAIT_PID=${ETCD_STARTED[$1]:-} WAIT_LOG="$STATE/etcd-$1.log" wait_for "etcd-$1 on $2" etcd_up "$2"
}
etcd_status_member() { # label, name, client port
  local label=$1 name=$2 port=$3 pid
  if etcd_up "$port"; then
    if pid=$(live_pid "$STATE/etcd-$name.pid" "etcd --name $name "); then
      printf '%-10s up    127.0.0.1:%-6s pid %s, started by this script\n' "$label" "$port" "$pid"
    else
      printf '%-10s up    127.0.0.1:%-6s not started by this script\n' "$label" "$port"
    fi
  else
    printf '%-10s down  127.0.0.1:%s\n' "$label" "$port"
    return 1
  fi
}

# ---- etcd: the single member
svc_etcd_start() {
  etcd_tools
  local peer=$((ETCD_PORT + 1))
  etcd_start_member single "$ETCD_PORT" "$peer" "single=http://127.0.0.1:$peer" leasehold-single
  etcd_wait_member single "$ETCD_PORT"
}
svc_etcd_stop() { stop_pidfile "etcd on $ETCD_PORT" "$STATE/etcd-single.pid" "etcd --name single "; }
svc_etcd_status() { etcd_status_member etcd single "$ETCD_PORT"; }

# ---- etcd-cluster: three members
etcd_cluster_members() { # prints "name client peer" per member
  local i
  for i in 0 1 2; do
    echo "c$((i + 1)) $((ETCD_CLUSTER_PORT + 2 * i)) $((ETCD_CLUSTER_PORT + 2 * i + 1))"
  done
}
svc_etcd-cluster_start() {
  etcd_tools
  local name cport pport cluster=''
  while read -r name cport pport; do
    cluster+="${cluster:+,}$name=http://127.0.0.1:$pport"
  done < <(etcd_cluster_members)
  while read -r name cport pport; do
    etcd_start_member "$name" "$cport" "$pport" "$cluster" leasehold-cluster
  done < <(etcd_cluster_members)
  while read -r name cport pport; do
    etcd_wait_member "$name" "$cport"
  done < <(etcd_cluster_members)
}
svc_etcd-cluster_stop() {
  local name cport pport
  while read -r name cport pport; do
    stop_pidfile "etcd $name on $cport" "$STATE/etcd-$name.pid" "etcd --name $name "
  done < <(etcd_cluster_members)
}
svc_etcd-cluster_status() {
  local name cport pport ok=0
  while read -r name cport pport; do
    etcd_status_member "etcd-$name" "$name" "$cport" || ok=1
  done < <(etcd_cluster_members)
  return $ok
}
