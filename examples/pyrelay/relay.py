#!/usr/bin/env python3
"""pyrelay: a transactional-outbox relay in Python, with an outbox table of
its own, put under outboxlab's chaos catalogue through a target file
(target.yaml beside this file: its schema, its staging statement, how the
harness reads its rows).

It is the example for teams whose relay is not written in Go: one file, the
standard library, psycopg2 and pika (Debian bookworm: python3-psycopg2
2.9.5, python3-pika 1.2.0). One sequential loop, one PostgreSQL
connection, one AMQP channel in confirm mode, one message in flight.

Its table (target.yaml creates it): event_id uuid primary key, kind text,
body jsonb, trace_id uuid, created_at timestamptz, sent_at timestamptz
(NULL until published), tries integer, dead_at timestamptz (parked),
owner text, owned_at and lease_until timestamptz (the lease). The key may
be of another type, such as a bigint identity the database assigns: the
relay reads it as text, publishes that text as message_id and compares
it with the column as an untyped literal, which takes the column's type.

What it does, every poll:

1. claims up to OUTBOX_BATCH_SIZE pending rows (sent_at and dead_at NULL)
   whose lease is free, oldest created_at first, with one statement (FOR
   UPDATE SKIP LOCKED), leased for OUTBOX_LEASE on the database clock:
   lease_until = now() + lease;
2. for each row, in order: a kind OUTBOX_TYPES does not list, or a body
   without the fields it requires, is parked at once (dead_at = now())
   and never published; any other row is published to OUTBOX_EXCHANGE,
   routing key = kind, persistent, mandatory, content type
   application/json, message_id = event_id, type = kind,
   correlation_id = trace_id, body = body, and the relay waits at most
   OUTBOX_PUBLISH_TIMEOUT for the broker's confirm;
3. a confirmed row is marked sent only under its own live lease
   (... AND owner = me AND lease_until > now()); a mark that finds no
   row lost its lease, which is logged;
4. a nack or a return (unroutable) is a failure of the row: tries + 1,
   eligible again after min(2^(tries-1) x OUTBOX_BACKOFF_BASE,
   OUTBOX_BACKOFF_MAX), tries counting this failure, on the database clock, parked at
   OUTBOX_MAX_ATTEMPTS; a broker outage (no connection, a publish error,
   no confirm in time) stops the batch, consumes no attempt and releases
   nothing: the leases run out.

The database clock is the only clock for leases, eligibility and backoff:
every time a statement compares or computes is now() of the database. The
process's own clock, moved by OUTBOX_CLOCK_OFFSET, only stamps log lines.
A batch stops publishing once OUTBOX_LEASE - OUTBOX_PUBLISH_TIMEOUT -
OUTBOX_STORE_TIMEOUT has gone by since just before its claim (measured on
the monotonic clock, which no offset moves), so that its last publish and
mark still fall inside the lease.

Every wait has a timeout. psycopg2 waits in Python (a wait callback), so
that a SIGALRM timer can end a statement whose answer never comes; pika's
BlockingConnection has no timeout of its own for a confirm, and the same
timer ends it. A connection a timer interrupted is dropped, never reused.

Configuration, from the environment:

  OUTBOX_DATABASE_URL   PostgreSQL URL (required)
  OUTBOX_AMQP_URL       AMQP URL, or several separated by commas (the
                        nodes of a cluster; a comma inside a password is
                        written %2C): it publishes through the first it
                        reaches and, when that connection fails, dials the
                        next one first (required)
  OUTBOX_TABLE          table or schema.table, each part quoted as written
                        (required)
  OUTBOX_EXCHANGE       the durable topic exchange (required)
  OUTBOX_RELAY_ID       the lease owner (default pyrelay-HOST-PID)
  OUTBOX_CLOCK_OFFSET   a Go duration (-5m, 1h2m3.5s, 300ms): moves the time
                        of log lines, nothing else
  OUTBOX_POLL_INTERVAL  sleep between claims that found less than a full
                        batch (default 5s)
  OUTBOX_BATCH_SIZE     rows per claim, 1 to 10000 (default 100)
  OUTBOX_LEASE          lease of a claim (default 2m); longer than
                        OUTBOX_PUBLISH_TIMEOUT + OUTBOX_STORE_TIMEOUT
  OUTBOX_PUBLISH_TIMEOUT  wait for a confirm, 100ms to 10m (default 10s)
  OUTBOX_STORE_TIMEOUT  bound of one database statement (default 30s)
  OUTBOX_MAX_ATTEMPTS   failed attempts before a row is parked, 1 to 100
                        (default 5)
  OUTBOX_BACKOFF_BASE, OUTBOX_BACKOFF_MAX  retry backoff (30s, 1h)
  OUTBOX_TYPES          known types and their required payload fields:
                        "type:field=kind;field=kind,type2"; kinds string,
                        number, integer, bool, object, array, any. Unset:
                        every type and any JSON payload is accepted.

Durations are Go durations. Other OUTBOX_* variables (sweep, failpoints,
records, metrics) are ignored: pyrelay has no sweep, failpoints, records or
metrics. A configuration it cannot use prints every problem, naming the
variable, and exits 2; URLs never appear in its output (they may hold
passwords). An unreachable database or broker is not a configuration error:
it logs and tries again.

SIGTERM or SIGINT: it claims nothing more, finishes the message in flight
(or abandons its confirm at the publish timeout) and its mark, leaves the
rest of the batch to its lease and exits 0. A second signal exits 1 at once.

Under outboxlab's catalogue (docs/examples.md), with its own table as
target.yaml describes it:

  make image-pyrelay
  outboxlab run --target examples/pyrelay/target.yaml
"""

import contextlib
import json
import logging
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import unicodedata

import pika
import pika.exceptions
import pika.spec
import psycopg2
import psycopg2.extensions
import psycopg2.sql

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2

DIAL_TIMEOUT = 3.0  # one AMQP or PostgreSQL connection attempt
CLOSE_TIMEOUT = 0.3  # a polite close of a broker connection
FAILURE_PAUSE_MAX = 1.0  # longest pause after failed ticks in a row
MAX_IDENT_BYTES = 63  # PostgreSQL cuts longer identifiers silently
MAX_SHORT_STRING = 255  # AMQP's limit for an exchange name or routing key


# --- Go durations ----------------------------------------------------------

_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
    "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}
# Longer units first, so that "ms" is not read as "m" followed by "s".
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_duration(text):
    """parse_duration reads a Go duration (time.ParseDuration's syntax:
    an optional sign, then one or more decimal numbers each with a unit
    ns, us, ms, s, m or h, or "0") and returns it in seconds."""
    s = text
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if s == "":
        raise ValueError("%r is not a Go duration" % text)
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError("%r is not a Go duration" % text)
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds):
    """format_duration renders seconds the way the logs show them."""
    if seconds < 1:
        return "%gms" % round(seconds * 1000, 3)
    return "%gs" % round(seconds, 3)


# --- message types ----------------------------------------------------------

KINDS = ("string", "number", "integer", "bool", "object", "array", "any")


class Poison(Exception):
    """Poison: a row that is parked at once and never published (an
    unknown type or an undecodable payload)."""


def parse_types(spec):
    """parse_types reads an OUTBOX_TYPES value, e.g.
    "order.placed:order_id=string;amount=integer,order.paid", into
    {type: [(field, kind), ...]}. Blanks around every part are ignored."""
    types = {}
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, has_fields, rest = entry.partition(":")
        name = name.strip()
        if not name:
            raise ValueError("an entry has no type name")
        if len(name.encode()) > MAX_SHORT_STRING:
            raise ValueError("type %r is longer than %d bytes" % (name, MAX_SHORT_STRING))
        if any(c in name for c in " \t\r\n;=:"):
            raise ValueError("type %r holds a blank or one of ;=:" % name)
        if name in types:
            raise ValueError("type %r is listed twice" % name)
        fields, seen = [], set()
        for f in rest.split(";") if has_fields else []:
            f = f.strip()
            if not f:
                continue
            fname, eq, kind = (p.strip() for p in f.partition("="))
            if not eq or not fname:
                raise ValueError("type %r: %r is not name=kind" % (name, f))
            if kind not in KINDS:
                raise ValueError("type %r: field %r: kind %r is not one of %s" % (name, fname, kind, ", ".join(KINDS)))
            if fname in seen:
                raise ValueError("type %r: field %r is listed twice" % (name, fname))
            seen.add(fname)
            fields.append((fname, kind))
        types[name] = fields
    if not types:
        raise ValueError("%r names no type" % spec)
    return types


def kind_of(value):
    """kind_of names the JSON kind of a decoded value: integer for a whole
    number written without fraction or exponent that fits 64 bits."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer" if -(1 << 63) <= value < (1 << 63) else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def check_row(types, message_type, payload):
    """check_row raises Poison when a row may not be published: its payload
    is not JSON, or OUTBOX_TYPES (types, None when unset) does not list its
    type, or its payload lacks a required field of the right kind."""
    try:
        doc = json.loads(payload)
    except ValueError:
        raise Poison("undecodable payload: %s: not JSON" % message_type) from None
    if types is None:
        return
    if message_type not in types:
        raise Poison("unknown message type %r" % message_type)
    fields = types[message_type]
    if not fields:
        return
    if not isinstance(doc, dict):
        raise Poison("undecodable payload: %s: want a JSON object" % message_type)
    for name, kind in fields:
        if name not in doc:
            raise Poison("undecodable payload: %s: field %r is missing" % (message_type, name))
        got = kind_of(doc[name])
        if kind != "any" and got != kind and not (kind == "number" and got == "integer"):
            raise Poison("undecodable payload: %s: field %r is %s, want %s" % (message_type, name, got, kind))


# --- configuration ------------------------------------------------------------


class Config:
    """Config is what pyrelay reads from its environment; parse_config fills
    it in and says what is wrong."""

    database_url = None
    amqp_urls = ()
    table = ()  # the parts of OUTBOX_TABLE: (table,) or (schema, table)
    exchange = None
    relay_id = None
    clock_offset = 0.0
    poll_interval = 5.0
    batch_size = 100
    lease = 120.0
    publish_timeout = 10.0
    store_timeout = 30.0
    max_attempts = 5
    backoff_base = 30.0
    backoff_max = 3600.0
    types = None  # None: every type is known

    def table_text(self):
        return ".".join(self.table)

    def lease_guard(self):
        """lease_guard is how long after the start of its claim a batch may
        still begin a publish."""
        return self.lease - self.publish_timeout - self.store_timeout


def parse_config(environ):
    """parse_config reads the environment and returns (config, problems),
    every problem naming its variable. Values of URLs are never repeated."""
    cfg = Config()
    problems = []

    def get(name):
        return environ.get(name, "").strip()

    def bad(name, text):
        problems.append("%s: %s" % (name, text))

    url = get("OUTBOX_DATABASE_URL")
    if not url:
        bad("OUTBOX_DATABASE_URL", "not set (want a PostgreSQL URL such as postgres://user:password@host:5432/db)")
    else:
        try:
            psycopg2.extensions.parse_dsn(url)
            cfg.database_url = url
        except psycopg2.ProgrammingError:
            bad("OUTBOX_DATABASE_URL", "not a PostgreSQL connection string")

    urls = get("OUTBOX_AMQP_URL")
    if not urls:
        bad("OUTBOX_AMQP_URL", "not set (want an AMQP URL such as amqp://user:password@host:5672/, or several separated by commas)")
    else:
        parts = [u.strip() for u in urls.split(",")]
        for i, u in enumerate(parts, 1):
            where = "entry %d of %d" % (i, len(parts)) if len(parts) > 1 else "the value"
            if not u:
                bad("OUTBOX_AMQP_URL", "%s is empty" % where)
                continue
            if not (u.startswith("amqp://") or u.startswith("amqps://")):
                bad("OUTBOX_AMQP_URL", "%s does not start with amqp:// or amqps://" % where)
                continue
            try:
                pika.URLParameters(u)
            except Exception:  # pika raises several kinds; none may echo the URL
                bad("OUTBOX_AMQP_URL", "%s is not an AMQP URL" % where)
        cfg.amqp_urls = tuple(parts)

    table = get("OUTBOX_TABLE")
    if not table:
        bad("OUTBOX_TABLE", "not set (want a table name or schema.table)")
    else:
        parts = table.split(".")
        if len(parts) > 2:
            bad("OUTBOX_TABLE", "%r has %d dots: want table or schema.table" % (table, len(parts) - 1))
        elif any(p == "" for p in parts):
            bad("OUTBOX_TABLE", "%r has an empty part: want table or schema.table" % table)
        elif "\x00" in table:
            bad("OUTBOX_TABLE", "%r holds a NUL byte" % table)
        elif any(len(p.encode()) > MAX_IDENT_BYTES for p in parts):
            bad("OUTBOX_TABLE", "%r: a part is longer than the %d bytes PostgreSQL keeps" % (table, MAX_IDENT_BYTES))
        else:
            cfg.table = tuple(parts)

    exchange = get("OUTBOX_EXCHANGE")
    if not exchange:
        bad("OUTBOX_EXCHANGE", "not set (want the name of the durable topic exchange)")
    elif len(exchange.encode()) > MAX_SHORT_STRING:
        bad("OUTBOX_EXCHANGE", "%d bytes, AMQP allows at most %d" % (len(exchange.encode()), MAX_SHORT_STRING))
    elif any(unicodedata.category(c) == "Cc" for c in exchange):
        bad("OUTBOX_EXCHANGE", "%r holds a control character" % exchange)
    else:
        cfg.exchange = exchange

    cfg.relay_id = get("OUTBOX_RELAY_ID") or "pyrelay-%s-%d" % (socket.gethostname() or "localhost", os.getpid())

    def duration(name, default, low=None, high=None, allow_negative=False):
        text = get(name)
        if not text:
            return default
        try:
            d = parse_duration(text)
        except ValueError:
            bad(name, "%r is not a Go duration such as -5m, 1h2m3.5s or 300ms" % text)
            return default
        if low is not None and not low <= d <= high:
            bad(name, "must be from %s to %s, got %s" % (format_duration(low), format_duration(high), text))
        elif not allow_negative and d <= 0:
            bad(name, "must be positive, got %s" % text)
        return d

    def integer(name, default, high):
        text = get(name)
        if not text:
            return default
        try:
            n = int(text, 10)
        except ValueError:
            bad(name, "%r is not a whole number" % text)
            return default
        if not 1 <= n <= high:
            bad(name, "must be from 1 to %d, got %d" % (high, n))
        return n

    cfg.clock_offset = duration("OUTBOX_CLOCK_OFFSET", 0.0, allow_negative=True)
    cfg.poll_interval = duration("OUTBOX_POLL_INTERVAL", cfg.poll_interval)
    cfg.batch_size = integer("OUTBOX_BATCH_SIZE", cfg.batch_size, 10000)
    cfg.lease = duration("OUTBOX_LEASE", cfg.lease)
    cfg.publish_timeout = duration("OUTBOX_PUBLISH_TIMEOUT", cfg.publish_timeout, 0.1, 600.0)
    cfg.store_timeout = duration("OUTBOX_STORE_TIMEOUT", cfg.store_timeout)
    cfg.max_attempts = integer("OUTBOX_MAX_ATTEMPTS", cfg.max_attempts, 100)
    cfg.backoff_base = duration("OUTBOX_BACKOFF_BASE", cfg.backoff_base)
    cfg.backoff_max = duration("OUTBOX_BACKOFF_MAX", cfg.backoff_max)
    if cfg.lease_guard() <= 0:
        bad("OUTBOX_LEASE, OUTBOX_PUBLISH_TIMEOUT and OUTBOX_STORE_TIMEOUT",
            "the lease (%s) must be longer than the publish timeout (%s) and the store timeout (%s) together"
            % (format_duration(cfg.lease), format_duration(cfg.publish_timeout), format_duration(cfg.store_timeout)))
    if cfg.backoff_max < cfg.backoff_base:
        bad("OUTBOX_BACKOFF_BASE and OUTBOX_BACKOFF_MAX", "the base (%s) is longer than the maximum (%s)"
            % (format_duration(cfg.backoff_base), format_duration(cfg.backoff_max)))

    spec = get("OUTBOX_TYPES")
    if spec:
        try:
            cfg.types = parse_types(spec)
        except ValueError as e:
            bad("OUTBOX_TYPES", str(e))
    return cfg, problems


def backoff(cfg, attempts):
    """backoff is how long a row waits after its n-th failed attempt:
    min(base x 2^(n-1), max), the shape its capability backoff=BASE/MAX
    declares."""
    return min(cfg.backoff_base * 2 ** min(max(attempts, 1) - 1, 60), cfg.backoff_max)


# --- logs ---------------------------------------------------------------------


class Log:
    """Log writes plain text lines for people to stderr:

        2026-12-01T12:00:00.123Z pyrelay relay-a: claimed 3 row(s)

    stamped by the process's own clock moved by OUTBOX_CLOCK_OFFSET."""

    def __init__(self, relay_id, offset):
        self.relay_id = relay_id
        self.offset = offset

    def __call__(self, text, *args):
        now = time.time() + self.offset
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % (int(now * 1000) % 1000)
        line = "%s pyrelay %s: %s\n" % (stamp, self.relay_id, text % args if args else text)
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except OSError:
            pass


# --- timeouts -------------------------------------------------------------------


class Timeout(Exception):
    """Timeout: an operation ran past its deadline. It is not an OSError, so
    that pika's poller does not take it for an interrupted system call."""


_bounded = [None]  # what the armed timer bounds, None when it is off


def _on_alarm(signum, frame):
    what = _bounded[0]
    if what is not None:
        raise Timeout(what)


@contextlib.contextmanager
def deadline(seconds, what):
    """deadline bounds the block by a SIGALRM timer: past seconds, Timeout
    is raised wherever the main thread is (a blocked select or poll is
    interrupted), and again every 200ms until the block is left, in case a
    library swallowed it. Whatever connection the block used is in an
    unknown state after a Timeout and must be dropped."""
    _bounded[0] = what
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), 0.2)
    try:
        yield
    finally:
        _bounded[0] = None
        signal.setitimer(signal.ITIMER_REAL, 0)


def wait_for_postgres(conn):
    """wait_for_postgres is psycopg2's wait callback: libpq's waits happen
    here, in select(), which the deadline timer interrupts; an exception
    from it makes psycopg2 close the connection."""
    while True:
        state = conn.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        if state == psycopg2.extensions.POLL_READ:
            select.select([conn.fileno()], [], [])
        elif state == psycopg2.extensions.POLL_WRITE:
            select.select([], [conn.fileno()], [])
        else:
            raise psycopg2.OperationalError("bad state from poll: %r" % state)


# --- the relay ------------------------------------------------------------------


class Stopping(Exception):
    """Stopping: the stop came before a row was published; the row and the
    rest of its batch are left to their lease."""


class BrokerTrouble(Exception):
    """BrokerTrouble: the broker could not take or confirm a message (no
    connection, a publish error, no confirm in time): not the row's fault."""


class Refused(Exception):
    """Refused: the broker nacked or returned a message: a failure of the
    row."""


class Row:
    __slots__ = ("id", "type", "payload", "correlation_id", "attempts", "occurred_at")

    def __init__(self, rec):
        self.id, self.type, self.payload, self.correlation_id, self.attempts, self.occurred_at = rec


class Relay:
    """Relay is the loop: one database connection and one broker
    connection, each opened when missing and dropped on any error."""

    def __init__(self, cfg, log):
        self.cfg = cfg
        self.log = log
        self.stopping = False
        self.db = None
        self.mq = None  # (connection, channel)
        self.next_url = 0  # the AMQP URL to dial first
        t = psycopg2.sql.Identifier(*cfg.table)
        self.sql_claim = psycopg2.sql.SQL("""
WITH picked AS (
    SELECT event_id FROM {t}
    WHERE sent_at IS NULL AND dead_at IS NULL
      AND (lease_until IS NULL OR lease_until <= now())
    ORDER BY created_at, event_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE {t} AS o
SET owner = %(me)s, owned_at = now(),
    lease_until = now() + make_interval(secs => %(lease)s::float8)
FROM picked WHERE o.event_id = picked.event_id
RETURNING o.event_id::text, o.kind, o.body::text, o.trace_id::text, o.tries, o.created_at""").format(t=t)
        # fence: this relay still holds the row's unexpired lease, and the
        # row is still pending.
        fence = "owner = %(me)s AND lease_until > now() AND sent_at IS NULL AND dead_at IS NULL"
        self.sql_mark = psycopg2.sql.SQL(
            "UPDATE {t} SET sent_at = now() WHERE event_id = %(id)s AND " + fence).format(t=t)
        self.sql_fail = psycopg2.sql.SQL("""
UPDATE {t} SET tries = tries + 1,
    lease_until = now() + make_interval(secs => %(backoff)s::float8),
    dead_at = CASE WHEN tries + 1 >= %(max)s THEN now() END
WHERE event_id = %(id)s AND """ + fence + """
RETURNING tries, dead_at IS NOT NULL""").format(t=t)
        self.sql_park = psycopg2.sql.SQL(
            "UPDATE {t} SET dead_at = now() WHERE event_id = %(id)s AND " + fence).format(t=t)

    # The loop.

    def run(self):
        c = self.cfg
        self.log("starting: table %s, exchange %r, batch %d, lease %s, poll %s, publish timeout %s, store timeout %s, "
                 "max attempts %d, backoff %s to %s, %d broker URL(s), types: %s",
                 c.table_text(), c.exchange, c.batch_size, format_duration(c.lease), format_duration(c.poll_interval),
                 format_duration(c.publish_timeout), format_duration(c.store_timeout), c.max_attempts,
                 format_duration(c.backoff_base), format_duration(c.backoff_max), len(c.amqp_urls),
                 ", ".join(sorted(c.types)) if c.types is not None else "any type")
        failures = 0
        while not self.stopping:
            pause = c.poll_interval
            try:
                if self.tick() == c.batch_size:
                    pause = 0
                failures = 0
            except Exception as e:  # a failed tick is logged and the loop goes on
                failures += 1
                self.log("tick failed: %s", describe(e))
                pause = min(c.poll_interval * 2 ** min(failures - 1, 8), FAILURE_PAUSE_MAX)
            self.sleep(pause)
        self.drop_broker()
        self.drop_db()
        self.log("stopped")

    def sleep(self, seconds):
        end = time.monotonic() + seconds
        while not self.stopping:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def tick(self):
        """tick claims a batch and takes its rows one by one to their end.
        It returns how many rows it handled; it stops early, leaving the
        rest to their lease, at a stop, once the lease guard has gone by,
        or at the first error, which it raises."""
        self.ensure_db()
        self.pump_broker()
        began = time.monotonic()
        rows = self.claim()
        if not rows:
            return 0
        self.log("claimed %d row(s) for %s", len(rows), format_duration(self.cfg.lease))
        for i, row in enumerate(rows):
            left = len(rows) - i
            if self.stopping:
                self.log("stopping: %d claimed row(s) left to their lease", left)
                return i
            spent = time.monotonic() - began
            if spent > self.cfg.lease_guard():
                self.log("%s since the claim: %d claimed row(s) left to their lease", format_duration(spent), left)
                return i
            try:
                self.handle(row)
            except Stopping:
                self.log("stopping: %d claimed row(s) left to their lease", left)
                return i
            except Exception as e:
                raise RuntimeError("row %s: %s; %d claimed row(s) left to their lease" % (row.id, describe(e), left)) from e
        return len(rows)

    def handle(self, row):
        try:
            check_row(self.cfg.types, row.type, row.payload)
        except Poison as why:
            self.park(row, why)
            return
        try:
            self.publish(row)
        except Refused as why:
            self.fail(row, why)
            return
        except BrokerTrouble:
            self.drop_broker(failed=True)
            raise
        self.mark(row)

    # The database.

    def ensure_db(self):
        if self.db is not None and not self.db.closed:
            return
        self.drop_db()
        try:
            with deadline(DIAL_TIMEOUT + 1, "no database connection within %s" % format_duration(DIAL_TIMEOUT + 1)):
                conn = psycopg2.connect(self.cfg.database_url, connect_timeout=int(DIAL_TIMEOUT),
                                        application_name=("pyrelay " + self.cfg.relay_id)[:63])
                conn.autocommit = True
        except Exception as e:
            raise RuntimeError("connecting to the database: %s" % describe(e)) from None
        self.db = conn
        self.log("connected to the database")

    def drop_db(self):
        if self.db is not None:
            with contextlib.suppress(Exception):
                self.db.close()
        self.db = None

    def execute(self, what, statement, args, fetch):
        """execute runs one statement within the store timeout and returns
        its rows (fetch) or its row count; any failure drops the
        connection."""
        try:
            with deadline(self.cfg.store_timeout, "no answer within %s" % format_duration(self.cfg.store_timeout)):
                with self.db.cursor() as cur:
                    cur.execute(statement, args)
                    return cur.fetchall() if fetch else cur.rowcount
        except Exception as e:
            self.drop_db()
            raise RuntimeError("%s: %s" % (what, describe(e))) from None

    def claim(self):
        recs = self.execute("claiming rows", self.sql_claim,
                            {"limit": self.cfg.batch_size, "me": self.cfg.relay_id, "lease": self.cfg.lease}, True)
        rows = [Row(r) for r in recs]
        rows.sort(key=lambda r: (r.occurred_at, r.id))
        return rows

    def mark(self, row):
        n = self.execute("marking it processed", self.sql_mark, {"id": row.id, "me": self.cfg.relay_id}, False)
        if n == 0:
            self.log("lease lost on row %s: not marked (another relay took it over, or the lease ran out)", row.id)

    def fail(self, row, why):
        wait = backoff(self.cfg, row.attempts + 1)
        recs = self.execute("counting a failed attempt (%s)" % why, self.sql_fail,
                            {"id": row.id, "me": self.cfg.relay_id, "backoff": wait, "max": self.cfg.max_attempts}, True)
        if not recs:
            self.log("lease lost on row %s: its failed attempt (%s) not counted", row.id, why)
        elif recs[0][1]:
            self.log("row %s parked after %d attempt(s): %s", row.id, recs[0][0], why)
        else:
            self.log("row %s failed (%s): attempt %d of %d, eligible again in %s", row.id, why, recs[0][0],
                     self.cfg.max_attempts, format_duration(wait))

    def park(self, row, why):
        n = self.execute("parking it (%s)" % why, self.sql_park, {"id": row.id, "me": self.cfg.relay_id}, False)
        if n == 0:
            self.log("lease lost on row %s: not parked (%s)", row.id, why)
        else:
            self.log("row %s parked: %s", row.id, why)

    # The broker.

    def ensure_broker(self):
        """ensure_broker opens a connection and a confirm-mode channel when
        there are none, trying every URL once, the one after the last
        failed first."""
        if self.mq is not None and self.mq[0].is_open and self.mq[1].is_open:
            return
        self.drop_broker()
        urls = self.cfg.amqp_urls
        errors = []
        for k in range(len(urls)):
            if self.stopping:
                raise Stopping()
            i = (self.next_url + k) % len(urls)
            try:
                self.mq = self.dial(urls[i])
            except Exception as e:
                errors.append(describe(e) if len(urls) == 1 else "node %d: %s" % (i + 1, describe(e)))
                continue
            self.next_url = i
            self.log("connected to the broker" + ("" if len(urls) == 1 else " (node %d of %d)" % (i + 1, len(urls))))
            return
        self.next_url = (self.next_url + 1) % len(urls)
        raise BrokerTrouble("connecting to the broker: " + "; ".join(errors))

    def dial(self, url):
        params = pika.URLParameters(url)
        params.connection_attempts = 1
        params.socket_timeout = DIAL_TIMEOUT
        params.stack_timeout = DIAL_TIMEOUT
        # Heartbeats go out only while pika does I/O: every tick pumps it,
        # so the interval must be longer than a poll.
        params.heartbeat = max(30, int(3 * self.cfg.poll_interval) + 1)
        params.client_properties = {"connection_name": "pyrelay " + self.cfg.relay_id}
        conn = None
        with deadline(DIAL_TIMEOUT + 1, "no broker connection within %s" % format_duration(DIAL_TIMEOUT + 1)):
            try:
                conn = pika.BlockingConnection(params)
                channel = conn.channel()
                channel.confirm_delivery()
            except BaseException:
                if conn is not None:
                    with contextlib.suppress(BaseException):
                        conn.close()
                raise
        return conn, channel

    def drop_broker(self, failed=False):
        """drop_broker closes the broker connection, waiting at most
        CLOSE_TIMEOUT; after a failure the next dial tries the next URL."""
        if self.mq is None:
            return
        conn, self.mq = self.mq[0], None
        if failed:
            self.next_url = (self.next_url + 1) % len(self.cfg.amqp_urls)
        with contextlib.suppressException:
            with deadline(CLOSE_TIMEOUT, "closing the broker connection"):
                if conn.is_open:
                    conn.close()

    def pump_broker(self):
        """pump_broker lets pika do its I/O between publishes (heartbeats,
        a close sent by the broker)."""
        if self.mq is None:
            return
        try:
            with deadline(self.cfg.publish_timeout, "broker I/O"):
                self.mq[0].process_data_events(time_limit=0)
        except Exception as e:
            self.log("broker connection lost: %s", describe(e))
            self.drop_broker(failed=True)

    def publish(self, row):
        """publish sends one row and waits for its confirm: it returns when
        the broker confirmed it, raises Refused for a nack or a return and
        BrokerTrouble for everything else."""
        self.ensure_broker()
        if self.stopping:
            raise Stopping()
        props = pika.BasicProperties(
            content_type="application/json",
            delivery_mode=pika.spec.PERSISTENT_DELIVERY_MODE,
            message_id=row.id,
            type=row.type,
            correlation_id=row.correlation_id,
        )
        try:
            with deadline(self.cfg.publish_timeout, "no confirm within %s" % format_duration(self.cfg.publish_timeout)):
                self.mq[1].basic_publish(self.cfg.exchange, row.type, row.payload.encode("utf-8"),
                                         properties=props, mandatory=True)
        except pika.exceptions.UnroutableError:
            raise Refused("returned by the broker as unroutable") from None
        except pika.exceptions.NackError:
            raise Refused("nacked by the broker") from None
        except Exception as e:
            raise BrokerTrouble("publishing: %s" % describe(e)) from None


def describe(e):
    """describe renders an error for a log line: its class and text, or
    the text of what it wraps (pika's connection errors have none of
    their own)."""
    text = str(e).strip() or "; ".join(str(a) for a in e.args if str(a).strip())
    if text and (type(e) is RuntimeError or type(e).__module__ == __name__):
        return text  # the relay's own errors say what they are
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


# --- the process ------------------------------------------------------------------


def main(environ=os.environ):
    cfg, problems = parse_config(environ)
    if problems:
        sys.stderr.write("pyrelay: cannot start:\n" + "".join("  %s\n" % p for p in problems))
        return EXIT_CONFIG
    log = Log(cfg.relay_id, cfg.clock_offset)
    # pika logs every broker outage at ERROR; the relay's own lines say what
    # it did about them.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    psycopg2.extensions.set_wait_callback(wait_for_postgres)
    signal.signal(signal.SIGALRM, _on_alarm)
    relay = Relay(cfg, log)
    # The whole stop is bounded: the message in flight, its mark, closing.
    stop_bound = cfg.publish_timeout + cfg.store_timeout + 2 * DIAL_TIMEOUT

    def on_stop(signum, frame):
        name = signal.Signals(signum).name
        if relay.stopping:
            log("second signal (%s): exiting at once", name)
            os._exit(EXIT_FAILED)
        relay.stopping = True
        log("got %s: finishing the message in flight, then stopping", name)

        def too_slow():
            log("still not stopped %s after %s: exiting at once", format_duration(stop_bound), name)
            os._exit(EXIT_FAILED)

        timer = threading.Timer(stop_bound, too_slow)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    relay.run()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
