# ---- pgbouncer: 127.0.0.1:6432, TRANSACTION pooling in front of the local PostgreSQL (5432)
# Any database name is passed through to 127.0.0.1:5432; auth trust (users listed in the auth
# file: postgres). Session advisory locks are unsafe behind it: leasehold refuses them there
# (docs/postgres.md, "Deployments"). Port: LEASEHOLD_PGBOUNCER_PORT.
PGBOUNCER_PORT="${LEASEHOLD_PGBOUNCER_PORT:-6432}"
SERVICES+=(pgbouncer)
# As root, pgbouncer runs as the postgres user, which cannot enter a checkout under a private
# directory (a mktemp dir is mode 700): its files then live in a directory of its own.
if [ "$(id -u)" = 0 ]; then PGB_DIR="/var/tmp/leasehold-pgbouncer-$PGBOUNCER_PORT"; else PGB_DIR="$STATE"; fi

pgbouncer_ready() { pg_isready -h 127.0.0.1 -p "$PGBOUNCER_PORT" -q; }

svc_pgbouncer_start() {
  if pid=$(live_pid "$PGB_DIR/pgbouncer.pid" "pgbouncer") && pgbouncer_ready; then return 0; fi
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
  mkdir -p "$PGB_DIR" && chmod 755 "$PGB_DIR"
  local bin conf="$PGB_DIR/pgbouncer.ini"
  bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  printf '"postgres" ""\n' >"$PGB_DIR/pgbouncer.users"
  cat >"$conf" <<INI
[databases]
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_DIR/pgbouncer.users
pool_mode = transaction
max_client_conn = 400
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
pidfile = $PGB_DIR/pgbouncer.pid
logfile = $PGB_DIR/pgbouncer.log
INI
  log "starting pgbouncer on $PGBOUNCER_PORT (transaction pooling)"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$PGB_DIR" "$conf" "$PGB_DIR/pgbouncer.users" 2>/dev/null || true
    touch "$PGB_DIR/pgbouncer.log" && chown postgres "$PGB_DIR/pgbouncer.log"
    su postgres -s /bin/sh -c "$bin -d $conf" >/dev/null
  else
    "$bin" -d "$conf" >/dev/null
  fi
  wait_for pgbouncer pgbouncer_ready
}
svc_pgbouncer_stop() { stop_pidfile "pgbouncer on $PGBOUNCER_PORT" "$PGB_DIR/pgbouncer.pid" "pgbouncer"; }
svc_pgbouncer_status() {
  if pgbouncer_ready; then
    printf '%-10s up    127.0.0.1:%-6s transaction pooling\n' pgbouncer "$PGBOUNCER_PORT"
  else
    printf '%-10s down  127.0.0.1:%s\n' pgbouncer "$PGBOUNCER_PORT"
    return 1
  fi
}
