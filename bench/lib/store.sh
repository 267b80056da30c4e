# bench/lib/store.sh - sourced by the benchmarks that start `serve`: with
# STORE=postgresql, starts a throwaway PostgreSQL for the run
# (tests/pg/pg-up.sh; stopped when the script exits) and exports
# ALALLO_PG_DIR, from which bench/lib/service.mjs makes a database for each
# serve. With STORE unset or sqlite, nothing (the store is the data folder).
# Needs $root (the source tree) and $ALALLO_BIN.
case ${STORE:-sqlite} in
  sqlite) ;;
  postgresql)
    ALALLO_PG_DIR=$(mktemp -d /tmp/alallo-pgb-XXXXXX)
    export ALALLO_PG_DIR
    trap '"$root"/tests/pg/pg-down.sh "$ALALLO_PG_DIR"' EXIT
    trap 'exit 143' INT TERM # the EXIT trap stops the server on a signal too
    "$root"/tests/pg/pg-up.sh "$ALALLO_PG_DIR" "$ALALLO_BIN" >/dev/null
    ;;
  *) echo "STORE is sqlite or postgresql, not '$STORE'" >&2; exit 2 ;;
esac
