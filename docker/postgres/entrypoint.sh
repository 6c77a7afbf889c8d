#!/bin/sh
# outboxlab-postgres starts PostgreSQL in the foreground as PID 1.
#
# After a SIGKILL of the container, postmaster.pid and the socket lock file
# are still there. No other process can be running in a freshly started
# container, so they are stale by construction and are removed; PostgreSQL
# then performs crash recovery from its WAL.
set -eu
rm -f "$PGDATA/postmaster.pid" /var/run/postgresql/.s.PGSQL.*
exec postgres -D "$PGDATA" "$@"
