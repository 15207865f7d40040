//! Every statement elect sends to PostgreSQL, with the schema filled in.
//!
//! The database's clock judges expiry with `clock_timestamp()` (the
//! statement's own time, not the transaction's start as `now()` would be),
//! and no client time ever reaches the table. It is not the only judge: a
//! wall clock steps, so a row its holder has not let go is taken only once
//! the taker has also seen it unchanged for a whole TTL on its own clock
//! ([`crate::store::observed`]); the taker names the version it saw, and
//! every write that moves `expires_at` counts one more in `renewals`. A
//! renewal, in turn, needs only the row to be still its tenure's: no one
//! took it. A lease row is never deleted, so its `fence` never goes back.

/// The layout elect creates and accepts: (table, column, type as
/// `format_type` shows it).
pub const LAYOUT: &[(&str, &str, &str)] = &[
    ("lease", "name", "text"),
    ("lease", "tenure", "text"),
    ("lease", "fence", "bigint"),
    ("lease", "expires_at", "timestamp with time zone"),
    ("lease", "renewed_at", "timestamp with time zone"),
    ("lease", "acquired_at", "timestamp with time zone"),
    ("lease", "holder", "jsonb"),
    ("lease", "checkpoint", "text"),
    ("lease", "checkpoint_fence", "bigint"),
    ("lease", "checkpoint_at", "timestamp with time zone"),
    ("lease", "shards", "integer"),
    ("lease", "renewals", "bigint"),
    ("waiter", "name", "text"),
    ("waiter", "tenure", "text"),
    ("waiter", "since", "timestamp with time zone"),
    ("waiter", "expires_at", "timestamp with time zone"),
    ("waiter", "holder", "jsonb"),
    ("record", "name", "text"),
    ("record", "record", "text"),
    ("record", "version", "bigint"),
    ("record", "value", "text"),
];

/// Evaluated in a statement, makes its commit wait for the WAL flush (and
/// a synchronous standby, if any) even where the server or role sets
/// `synchronous_commit = off`: a granted fence or a renewed expiry lost in
/// a crash would hand out a token twice, or end a lease earlier than its
/// holder counts.
const DURABLE: &str = "set_config('synchronous_commit', 'on', true)";

/// The least fence of the server's timeline: 0 on the first, and from
/// the second on (timeline - 1) × 2^40, above every fence an earlier
/// timeline can have handed out (up to 2^40 takes of a lock). A promoted
/// standby, or a server recovered to a point in time, starts a new
/// timeline; with asynchronous replication it may lack the last takes of
/// the old primary, and their fences: a take's fence is at least this, so
/// tokens still rise across a failover. The timeline is the first 8 hex
/// digits of the current WAL file's name, which any role may read.
const EPOCH: &str =
    "((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40)";

/// The tables, as created (also what an administrator runs by hand).
pub fn create_tables(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.lease (name text PRIMARY KEY, tenure text, \
         fence bigint NOT NULL, expires_at timestamptz NOT NULL, renewed_at timestamptz, \
         acquired_at timestamptz, holder jsonb, checkpoint text, checkpoint_fence bigint, \
         checkpoint_at timestamptz, shards integer, renewals bigint NOT NULL DEFAULT 0); \
         CREATE TABLE IF NOT EXISTS {s}.waiter (name text NOT NULL, tenure text NOT NULL, \
         since timestamptz NOT NULL, expires_at timestamptz NOT NULL, holder jsonb, \
         PRIMARY KEY (name, tenure)); {}",
        create_record_table(s)
    )
}

/// The table of the records beside each lock (`.done`, `.slots/KEY`,
/// `.history`), which an earlier elect's schema lacks: created when first
/// needed.
pub fn create_record_table(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.record (name text NOT NULL, record text NOT NULL, \
         version bigint NOT NULL, value text NOT NULL, PRIMARY KEY (name, record));"
    )
}

/// The column that an earlier elect's lease table lacks (the last one),
/// added by [`migrate`].
pub const ADDED: &str = "renewals";

/// What brings an earlier elect's lease table up to date (only its owner
/// may alter it). Instant: a column with a constant default is not written
/// into every row.
pub fn migrate(s: &str) -> String {
    format!("ALTER TABLE {s}.lease ADD COLUMN IF NOT EXISTS renewals bigint NOT NULL DEFAULT 0;")
}

/// The least a role needs to take locks in schema `s`.
pub fn grants(s: &str, role: &str) -> String {
    format!(
        "GRANT USAGE ON SCHEMA {s} TO {role}; \
         GRANT SELECT, INSERT, UPDATE ON {s}.lease TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.waiter TO {role}; {}",
        record_grant(s, role)
    )
}

/// What a role needs of the record table.
pub fn record_grant(s: &str, role: &str) -> String {
    format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.record TO {role};")
}

use crate::store::lease_row::Statements;

/// The statements, for one schema.
pub struct Sql {
    /// The core's statements.
    pub ops: Statements,
    pub acquire: String,
    pub renew: String,
    pub release: String,
    pub leave: String,
    pub look: String,
    pub layout: &'static str,
    pub setup: String,
    /// [`Sql::setup`] with the schema created too, under the same lock.
    pub setup_schema: String,
}

/// A timestamp column as RFC 3339 UTC with milliseconds.
fn rfc3339(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
}

/// Milliseconds left until `expires_at`, or NULL once it has passed
/// (`-infinity` has no finite distance to now).
fn left(column: &str) -> String {
    format!(
        "CASE WHEN {column} > clock_timestamp() \
         THEN (extract(epoch FROM {column} - clock_timestamp()) * 1000)::bigint END"
    )
}

/// A renewal time as microseconds, exact, for naming a version of a row.
fn micros(column: &str) -> String {
    format!("(extract(epoch FROM {column}) * 1000000)::bigint")
}

/// The TTL a row's holder renews with, in ms: both ends are one reading
/// of the clock, so no step of it can come between.
fn ttl_of(row: &str) -> String {
    format!(
        "CASE WHEN isfinite({row}.expires_at) AND isfinite({row}.renewed_at) \
         THEN (extract(epoch FROM {row}.expires_at - {row}.renewed_at) * 1000)::bigint END"
    )
}

impl Sql {
    pub fn new(schema: &str) -> Sql {
        let s = format!("\"{schema}\"");
        // The notifications of rows `freed` by tenure `tenure`: the waiter
        // to take each next (`next LOCK TENURE`, the oldest live one in the
        // queue), then the lock's name, in this order (a target list is
        // evaluated left to right), so that a waiter not named has heard
        // so when the release wakes it.
        let tell = |tenure: &str| {
            format!(
                "SELECT CASE WHEN n.next IS NOT NULL \
                   THEN pg_notify('{schema}', format('next %s %s', n.name, n.next)) END, \
                   pg_notify('{schema}', n.name) \
                 FROM (SELECT f.name, (SELECT w.tenure FROM {s}.waiter w WHERE w.name = f.name \
                   AND w.tenure <> {tenure} AND w.expires_at > clock_timestamp() \
                   ORDER BY w.since, w.tenure LIMIT 1) AS next FROM freed f) n"
            )
        };
        let ttl = "$3::bigint * interval '1 millisecond'";
        // A live waiter of lock $1 that came before tenure $2 (any, if $2
        // is not queued): a free row is its first.
        let older_waiter = format!(
            "SELECT 1 FROM {s}.waiter o WHERE o.name = $1 AND o.tenure <> $2 \
               AND o.expires_at > clock_timestamp() \
               AND o.since < coalesce((SELECT m.since FROM {s}.waiter m \
                 WHERE m.name = $1 AND m.tenure = $2), 'infinity')"
        );
        Sql {
            ops: Statements {
                // $1 lock: fence, tenure, holder, ms left (NULL: free), lease
                // TTL in ms, live waiters.
                status: format!(
                    "SELECT l.fence, l.tenure, l.holder::text, {}, \
                       CASE WHEN isfinite(l.expires_at) AND isfinite(l.renewed_at) \
                       THEN (extract(epoch FROM l.expires_at - l.renewed_at) * 1000)::bigint END, \
                       (SELECT count(*) FROM {s}.waiter w WHERE w.name = q.name \
                          AND w.expires_at > clock_timestamp() AND w.tenure IS DISTINCT FROM l.tenure), \
                       q.name \
                     FROM (SELECT $1::text AS name) q LEFT JOIN {s}.lease l ON l.name = q.name",
                    left("l.expires_at")
                ),
                // $1 prefix: as status, for every lock with a holder or waiters.
                list: format!(
                    "SELECT l.fence, l.tenure, l.holder::text, {}, \
                       CASE WHEN isfinite(l.expires_at) AND isfinite(l.renewed_at) \
                       THEN (extract(epoch FROM l.expires_at - l.renewed_at) * 1000)::bigint END, \
                       (SELECT count(*) FROM {s}.waiter w WHERE w.name = q.name \
                          AND w.expires_at > clock_timestamp() AND w.tenure IS DISTINCT FROM l.tenure), \
                       q.name \
                     FROM (SELECT name FROM {s}.lease WHERE tenure IS NOT NULL \
                             AND expires_at > clock_timestamp() AND starts_with(name, $1) \
                           UNION SELECT name FROM {s}.waiter WHERE expires_at > clock_timestamp() \
                             AND starts_with(name, $1)) q \
                     LEFT JOIN {s}.lease l ON l.name = q.name ORDER BY q.name",
                    left("l.expires_at")
                ),
                // $1 lock, $2 record: as status without the TTL and the
                // waiters, and the record's value and version.
                look: format!(
                    "SELECT l.fence, l.tenure, l.holder::text, {}, NULL::bigint, 0::bigint, \
                       r.value, r.version \
                     FROM (SELECT $1::text AS name) q LEFT JOIN {s}.lease l ON l.name = q.name \
                     LEFT JOIN {s}.record r ON r.name = q.name AND r.record = $2",
                    left("l.expires_at")
                ),
                // $1 lock, $2 tenure, $3 request: ask the holder to let go.
                ask: format!(
                    "WITH asked AS ( \
                       UPDATE {s}.lease SET holder = coalesce(holder, '{{}}'::jsonb) \
                         || jsonb_build_object('break_request', $3::text) \
                       WHERE name = $1 AND tenure = $2 AND expires_at > clock_timestamp() RETURNING name) \
                     SELECT pg_notify('{schema}', name) FROM asked"
                ),
                // $1 lock: its checkpoint, the token that wrote it, when.
                checkpoint: format!(
                    "SELECT checkpoint, checkpoint_fence, {} FROM {s}.lease \
                     WHERE name = $1 AND checkpoint IS NOT NULL",
                    rfc3339("checkpoint_at")
                ),
                // $1 lock, $2 tenure, $3 fence, $4 value: store the checkpoint
                // if the writer still holds the row with that fence (its own
                // clock, not the database's, tells whether its lease lives). Returns
                // whether it did.
                put_checkpoint: format!(
                    "WITH put AS ( \
                       UPDATE {s}.lease SET checkpoint = $4, checkpoint_fence = fence, \
                         checkpoint_at = clock_timestamp() \
                       WHERE name = $1 AND tenure = $2 AND fence = $3::bigint RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM put), {DURABLE}"
                ),
                // $1 lock, $2 record: its value and version.
                record: format!(
                    "SELECT value, version FROM {s}.record WHERE name = $1 AND record = $2"
                ),
                // $1 lock, $2 record, $3 value, $4 tenure, $5 fence: written if
                // the tenure still holds the lock with that fence, its row
                // locked until the write commits, so that no taker comes between.
                put_record_held: format!(
                    "WITH held AS (SELECT 1 FROM {s}.lease \
                       WHERE name = $1 AND tenure = $4 AND fence = $5::bigint FOR SHARE), \
                     put AS (INSERT INTO {s}.record AS r (name, record, version, value) \
                       SELECT $1, $2, 1, $3 FROM held \
                       ON CONFLICT (name, record) DO UPDATE SET value = EXCLUDED.value, \
                         version = r.version + 1 RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM put), {DURABLE}"
                ),
                // $1 lock, $2 record, $3 value: written if there is none.
                put_record_new: format!(
                    "WITH put AS (INSERT INTO {s}.record (name, record, version, value) \
                       VALUES ($1, $2, 1, $3) ON CONFLICT DO NOTHING RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM put), {DURABLE}"
                ),
                // $1 lock, $2 record, $3 value, $4 version: written if still that version.
                put_record_version: format!(
                    "WITH put AS (UPDATE {s}.record SET value = $3, version = version + 1 \
                       WHERE name = $1 AND record = $2 AND version = $4::bigint RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM put), {DURABLE}"
                ),
                // $1 lock, $2 record, $3 value: written whatever was there.
                put_record_any: format!(
                    "WITH put AS (INSERT INTO {s}.record AS r (name, record, version, value) \
                       VALUES ($1, $2, 1, $3) ON CONFLICT (name, record) DO UPDATE \
                       SET value = EXCLUDED.value, version = r.version + 1 RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM put)"
                ),
                // $1 lock, $2 record.
                delete_record: format!("DELETE FROM {s}.record WHERE name = $1 AND record = $2"),
                // $1 lock, $2 the history's prefix, $3 with values: each tenure's id and value.
                tenures: format!(
                    "SELECT substr(record, length($2) + 1), CASE WHEN $3::boolean THEN value ELSE '' END \
                     FROM {s}.record WHERE name = $1 AND starts_with(record, $2)"
                ),
                // $1 the locks' prefix, $2 the history's prefix: the locks with a history.
                recorded: format!(
                    "SELECT DISTINCT name FROM {s}.record \
                     WHERE starts_with(name, $1) AND starts_with(record, $2)"
                ),
                // $1 lock, $2 count: record the number of shards in the lock's
                // own row unless one is; the number recorded.
                record_shards: format!(
                    "INSERT INTO {s}.lease AS l (name, fence, expires_at, shards) \
                     VALUES ($1, 0, '-infinity', $2::integer) \
                     ON CONFLICT (name) DO UPDATE SET shards = coalesce(l.shards, excluded.shards) \
                     RETURNING l.shards"
                ),
                // $1 lock: the number of shards recorded.
                shards: format!("SELECT shards FROM {s}.lease WHERE name = $1"),
                // $1 lock: its last holder's identity, kept after it lets go.
                last: format!("SELECT holder->>'identity' FROM {s}.lease WHERE name = $1"),
                // $1 locks: for each, its name, held now, and its last holder's identity.
                owners: format!(
                    "SELECT u.name, \
                       coalesce(l.tenure IS NOT NULL AND l.expires_at > clock_timestamp(), false), \
                       l.holder->>'identity' \
                     FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i) \
                     LEFT JOIN {s}.lease l ON l.name = u.name ORDER BY u.i"
                ),
                // $1 lock, $2 tenure: end a holder's lease now.
                end: format!(
                    "WITH freed AS ( \
                       UPDATE {s}.lease SET tenure = NULL, holder = NULL, expires_at = '-infinity', \
                         renewed_at = NULL, acquired_at = NULL \
                       WHERE name = $1 AND tenure = $2 RETURNING name) \
                     SELECT pg_notify('{schema}', name) FROM freed"
                ),
            },
            // $1 lock, $2 tenure, $3 ttl ms, $4 holder record; $5 tenure
            // ('' for none), $6 renewals and $7 renewal time (µs) of the
            // version of the row that the taker has seen unchanged for its
            // holder's TTL, or NULLs. Takes a free row, or an expired one
            // still at that version, with the next fence, or confirms our
            // own with the same fence (a retry whose reply was lost); else
            // queues us as a waiter. A free row is left to an older live
            // waiter, first come first served, unless $8 says we waited our
            // turn (it had its time and did not take it: dead, say); the
            // last column says when. A row let go on an earlier timeline
            // (its fence is below this one's least) is not free at once: a
            // take on the old primary that never reached this server may
            // still have a live holder, so it is taken as an expired row
            // is, once seen unchanged for a TTL (a new Chubby master waits
            // out the old leases); the column before the last says which.
            // A take tells the other waiters of the row's version as a
            // renewal does, so that those a release did not name sleep
            // on. Returns the fence if the lock is ours, the time left on
            // the holder's lease by the database's clock, the checkpoint,
            // and the version of the row and its holder's TTL.
            acquire: format!(
                "WITH c AS (SELECT clock_timestamp() AS t), \
                 taken AS ( \
                   INSERT INTO {s}.lease AS l (name, tenure, fence, expires_at, renewed_at, acquired_at, holder) \
                   SELECT $1, $2, greatest(1, {EPOCH}), c.t + {ttl}, c.t, c.t, $4::jsonb FROM c \
                   ON CONFLICT (name) DO UPDATE SET \
                     fence = CASE WHEN l.tenure = excluded.tenure THEN l.fence \
                       ELSE greatest(l.fence + 1, {EPOCH}) END, \
                     acquired_at = CASE WHEN l.tenure = excluded.tenure THEN l.acquired_at ELSE excluded.acquired_at END, \
                     holder = CASE WHEN l.tenure = excluded.tenure THEN l.holder ELSE excluded.holder END, \
                     tenure = excluded.tenure, expires_at = excluded.expires_at, renewed_at = excluded.renewed_at, \
                     renewals = l.renewals + 1 \
                   WHERE l.tenure = excluded.tenure \
                     OR (l.tenure IS NULL AND l.fence >= {EPOCH} \
                         AND ($8::boolean OR NOT EXISTS ({older}))) \
                     OR ((l.tenure IS NULL OR l.expires_at <= clock_timestamp()) \
                         AND coalesce(l.tenure, '') = $5 AND l.renewals = $6::bigint \
                         AND {renewed} IS NOT DISTINCT FROM $7::bigint) \
                   RETURNING l.fence, l.checkpoint, l.checkpoint_fence, l.checkpoint_at, \
                     l.renewals, {} AS micros), \
                 queued AS ( \
                   INSERT INTO {s}.waiter (name, tenure, since, expires_at, holder) \
                   SELECT $1, $2, clock_timestamp(), clock_timestamp() + {ttl}, $4::jsonb \
                   WHERE NOT EXISTS (SELECT 1 FROM taken) \
                   ON CONFLICT (name, tenure) DO UPDATE SET expires_at = excluded.expires_at), \
                 unqueued AS ( \
                   DELETE FROM {s}.waiter w WHERE w.name = $1 \
                   AND (w.tenure = $2 OR w.expires_at < clock_timestamp()) \
                   AND EXISTS (SELECT 1 FROM taken)), \
                 told AS ( \
                   SELECT pg_notify('{schema}', format('renewed %s %s %s %s %s', $1, $2, t.renewals, \
                     t.micros, $3::bigint)) FROM taken t \
                   WHERE EXISTS (SELECT 1 FROM {s}.waiter w WHERE w.name = $1 \
                     AND w.tenure <> $2 AND w.expires_at > clock_timestamp())) \
                 SELECT (SELECT fence FROM taken), \
                   (SELECT {} FROM {s}.lease l WHERE l.name = $1), {DURABLE}, \
                   (SELECT checkpoint FROM taken), (SELECT checkpoint_fence FROM taken), \
                   (SELECT {} FROM taken), \
                   r.tenure, r.renewals, {}, {}, (SELECT count(*) FROM told), \
                   r.tenure IS NULL AND r.fence < {EPOCH}, \
                   r.tenure IS NULL AND r.fence >= {EPOCH} AND NOT $8::boolean \
                     AND EXISTS ({older}) \
                 FROM (SELECT 1) one LEFT JOIN {s}.lease r ON r.name = $1",
                micros("l.renewed_at"),
                left("l.expires_at"),
                rfc3339("checkpoint_at"),
                micros("r.renewed_at"),
                ttl_of("r"),
                renewed = micros("l.renewed_at"),
                older = older_waiter,
            ),
            // $1 tenure, $2 ttl ms. Zero rows for a lock we hold: someone
            // took or ended the row. A row the database's clock calls
            // expired is still ours until someone takes it, which waits
            // for a whole TTL after the last renewal it saw. Also tells of
            // break requests, and tells waiters of the lock the version it
            // now has (`renewed LOCK TENURE RENEWALS MICROS TTL`: they time
            // their wait from when it arrives, with no statement of theirs).
            renew: format!(
                "WITH c AS (SELECT clock_timestamp() AS t), \
                 held AS ( \
                   UPDATE {s}.lease l SET expires_at = c.t + $2::bigint * interval '1 millisecond', \
                     renewed_at = c.t, renewals = l.renewals + 1 \
                   FROM c WHERE l.tenure = $1 \
                   RETURNING l.name, l.holder->>'break_request' AS asked, l.tenure, l.renewals, \
                     {} AS micros), \
                 queued AS ( \
                   UPDATE {s}.waiter SET expires_at = clock_timestamp() + $2::bigint * interval '1 millisecond' \
                   WHERE tenure = $1) \
                 SELECT name, asked, {DURABLE}, \
                   CASE WHEN EXISTS (SELECT 1 FROM {s}.waiter w WHERE w.name = held.name \
                       AND w.tenure <> $1 AND w.expires_at > clock_timestamp()) \
                   THEN pg_notify('{schema}', format('renewed %s %s %s %s %s', name, tenure, renewals, \
                     micros, $2::bigint)) END \
                 FROM held",
                micros("c.t")
            ),
            // $1 tenure. One transaction: free our rows, leave every queue,
            // and wake the waiters, naming the oldest to take each row
            // next. The holder record stays, as the last
            // holder's (shards go back to it), shown only while a tenure lives.
            release: format!(
                "WITH freed AS ( \
                   UPDATE {s}.lease SET tenure = NULL, expires_at = '-infinity', \
                     renewed_at = NULL, acquired_at = NULL \
                   WHERE tenure = $1 RETURNING name), \
                 unqueued AS (DELETE FROM {s}.waiter WHERE tenure = $1) \
                 {}",
                tell("$1")
            ),
            // $1 lock, $2 tenure: as release, for one lock.
            leave: format!(
                "WITH freed AS ( \
                   UPDATE {s}.lease SET tenure = NULL, expires_at = '-infinity', \
                     renewed_at = NULL, acquired_at = NULL \
                   WHERE name = $1 AND tenure = $2 RETURNING name), \
                 unqueued AS (DELETE FROM {s}.waiter WHERE name = $1 AND tenure = $2) \
                 {}",
                tell("$2")
            ),
            // $1 lock: its holder's tenure and any break request. The row
            // is its tenure's until someone takes or ends it, whatever the
            // database's clock says.
            look: format!("SELECT tenure, holder->>'break_request' FROM {s}.lease WHERE name = $1"),
            layout: "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_attribute a ON a.attrelid = c.oid \
                 WHERE n.nspname = $1 AND c.relname IN ('lease', 'waiter', 'record') \
                 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum",
            // One transaction; the advisory lock (for this transaction only,
            // so it works through a pooler) keeps two first runs from racing.
            setup: format!(
                "BEGIN; SELECT pg_advisory_xact_lock(hashtext('elect setup {schema}')); \
                 {} COMMIT;",
                create_tables(&s)
            ),
            setup_schema: format!(
                "BEGIN; SELECT pg_advisory_xact_lock(hashtext('elect setup {schema}')); \
                 CREATE SCHEMA IF NOT EXISTS {s}; {} COMMIT;",
                create_tables(&s)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's page gives administrators the very SQL elect would run.
    #[test]
    fn the_guide_has_the_setup_sql() {
        let readme = crate::docs::page("docs/stores/postgresql.md");
        let s = "\"elect\"";
        let wanted = create_tables(s).replace(" IF NOT EXISTS", "") + " " + &grants(s, "batch");
        for statement in wanted.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            assert!(
                readme.contains(&format!("{statement};")),
                "docs/stores/postgresql.md lacks: {statement};"
            );
        }
        for (table, column, _) in LAYOUT {
            assert!(
                create_tables(s).contains(&format!("{column} ")),
                "{table}.{column} is created"
            );
        }
    }
}
