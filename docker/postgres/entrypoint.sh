#!/bin/sh
# outboxlab-postgres starts PostgreSQL in the foreground as PID 1.
#
# After a SIGKILL of the container, postmaster.pid and the socket lock file
# are still there. No other process can be running in a freshly started
# container, so they are stale by construction and are removed; PostgreSQL
# then performs crash recovery from its WAL.
#
# With OUTBOXLAB_STANDBY_OF=HOST the container is a streaming standby of
# the server at HOST (port OUTBOXLAB_STANDBY_PORT, default 5432): on its
# first start it replaces its data directory by a base backup of HOST's (pg_basebackup, with a replication slot named
# after OUTBOXLAB_STANDBY_NAME, default "standby", which is also its
# application_name for synchronous_standby_names), and then starts in
# recovery. A later start (after a kill, or once promoted) keeps its data.
set -eu
rm -f "$PGDATA/postmaster.pid" /var/run/postgresql/.s.PGSQL.*
if [ -n "${OUTBOXLAB_STANDBY_OF:-}" ] && [ ! -f "$PGDATA/outboxlab-standby" ]; then
	name=${OUTBOXLAB_STANDBY_NAME:-standby}
	find "$PGDATA" -mindepth 1 -delete
	pg_basebackup -d "host=$OUTBOXLAB_STANDBY_OF port=${OUTBOXLAB_STANDBY_PORT:-5432} user=outbox password=outbox application_name=$name" \
		-D "$PGDATA" -X stream -R -C -S "$name" --checkpoint=fast
	touch "$PGDATA/outboxlab-standby"
fi
exec postgres -D "$PGDATA" "$@"
