# pg-common.sh - shared by pg-up.sh, pg-db.sh and pg-down.sh (sourced).
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}  # Debian keeps initdb and pg_ctl off PATH
PGPORT=${PGPORT:-55432}                     # names the socket file only
PGUSER_SYS=${ALALLO_PG_USER:-alallo-pg}     # the unprivileged user that runs the server

if [[ ! -x $PGBIN/initdb ]]; then
  echo "pg kit: no PostgreSQL 15 in $PGBIN (scripts/deps.sh test installs it)" >&2
  exit 1
fi

# Runs a command as the server's user: root hands over to PGUSER_SYS (made
# a system user on first use); anyone else runs it as themselves.
as_pg() {
  if ((EUID == 0)); then
    runuser -u "$PGUSER_SYS" -- "$@"
  else
    "$@"
  fi
}

as_pg_user_prepare() {
  local d=$1
  if ((EUID == 0)); then
    id -u "$PGUSER_SYS" >/dev/null 2>&1 ||
      useradd --system --no-create-home --shell /usr/sbin/nologin "$PGUSER_SYS"
    chown "$PGUSER_SYS" "$d"
    chmod 0755 "$d"
  fi
}

pg_url() { echo "postgresql:///$2?host=$1&port=$PGPORT&user=alallo"; }

psql_q() {
  local d=$1 db=$2; shift 2
  PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -h "$d" -p "$PGPORT" -U alallo -d "$db" "$@"
}
