//! Every statement elect sends to MySQL or MariaDB, with the tables'
//! names filled in. Each is one autocommit statement, safe to send again
//! when its reply was lost: a take names the taker's tenure, which a
//! second take finds in the row and confirms with the same fence.
//!
//! The database's clock judges expiry with `UTC_TIMESTAMP(6)` (the
//! statement's start, in microseconds, whatever the session's time zone),
//! and no client time ever reaches the table. It is not the only judge: a
//! row its holder has not let go is taken only once the taker has also
//! seen it unchanged for a whole TTL on its own clock
//! ([`crate::store::observed`]); the taker names the version it saw
//! (tenure, `renewals`, `renewed_at`), and every write that moves
//! `expires_at` counts one more in `renewals`. A lease row is never
//! deleted, so its `fence` never goes back; it is never an AUTO_INCREMENT,
//! whose counter InnoDB may hand out again after a restart.
//!
//! MySQL's single-table UPDATE assigns left to right, each assignment
//! seeing the ones before: the take's `fence`, `acquired_at` and `holder`
//! are set before `tenure`, which they test. Connections set
//! `CLIENT_FOUND_ROWS`, so an UPDATE counts the rows it matched, not only
//! those it changed.

/// What a free row's `expires_at` holds: DATETIME's least value.
const NEVER: &str = "'1000-01-01 00:00:00'";
/// The database's clock.
const NOW: &str = "UTC_TIMESTAMP(6)";

/// The least fence a take gets: the database's clock in milliseconds since
/// 2020 × 1024 (below 2^53 until the year 2298). MySQL has no timeline:
/// a replica promoted after the primary died may lack the primary's last
/// takes, and their fences, and its counter alone would hand them out
/// again. Time has gone on since, so a take on the new primary still gets
/// a higher token, unless its clock is behind the old primary's by more
/// than the failover took. A lock taken again within the same millisecond
/// counts on from the last fence, as it does after a step of the clock
/// back: a fence is always above the one before.
const CLOCK_FENCE: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '2020-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 * 1024)";

/// The server a take was made on, named in the holder record: a row let
/// go on another server (a failover since) may hide a take that was lost
/// with the old primary, so it is taken only once seen unchanged for a
/// TTL. Rows from before it was named count as this server's.
const SAME_SERVER: &str =
    "COALESCE(JSON_UNQUOTE(JSON_EXTRACT(holder, '$.server_id')), @@server_id) = @@server_id";

/// The holder record `?` of a take, naming this server.
const HOLDER_HERE: &str = "JSON_SET(?, '$.server_id', @@server_id)";

/// The column types of lock names and tenures: compared byte for byte,
/// never by a case-insensitive collation.
const NAME: &str = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";

/// The tables, as created (also what an administrator runs by hand).
pub fn create_tables(t: &Tables) -> Vec<String> {
    let Tables {
        lease,
        waiter,
        record,
    } = t;
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {lease} (name {NAME} NOT NULL PRIMARY KEY, \
             tenure VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, \
             fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, \
             renewed_at DATETIME(6) NULL, acquired_at DATETIME(6) NULL, holder TEXT NULL, \
             checkpoint MEDIUMTEXT NULL, checkpoint_fence BIGINT NULL, \
             checkpoint_at DATETIME(6) NULL, shards INT NULL, \
             renewals BIGINT NOT NULL DEFAULT 0, KEY (tenure)) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {waiter} (name {NAME} NOT NULL, \
             tenure VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             since DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL, \
             PRIMARY KEY (name, tenure), KEY (tenure)) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {record} (name {NAME} NOT NULL, record {NAME} NOT NULL, \
             version BIGINT NOT NULL, value MEDIUMTEXT NOT NULL, PRIMARY KEY (name, record)) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ),
    ]
}

/// The least an account needs to take locks.
pub fn grants(t: &Tables, account: &str) -> Vec<String> {
    vec![
        format!("GRANT SELECT, INSERT, UPDATE ON {} TO {account}", t.lease),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {account}",
            t.waiter
        ),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {account}",
            t.record
        ),
    ]
}

/// What an administrator runs once so that `account` may take locks in
/// `tables` (the tables, as elect creates them, and the least grants).
pub fn for_an_administrator(tables: &Tables, account: &str) -> String {
    let all: Vec<String> = create_tables(tables)
        .into_iter()
        .map(|c| c.replace(" IF NOT EXISTS", ""))
        .chain(grants(tables, account))
        .collect();
    format!("an administrator runs once: {};", all.join("; "))
}

/// The three tables' quoted names.
pub struct Tables {
    pub lease: String,
    pub waiter: String,
    pub record: String,
}

impl Tables {
    pub fn new(database: &str, prefix: &str) -> Tables {
        let name = |table: &str| format!("`{database}`.`{prefix}_{table}`");
        Tables {
            lease: name("lease"),
            waiter: name("waiter"),
            record: name("record"),
        }
    }
}

use crate::store::lease_row::Statements;

/// The statements, for one set of tables. `?` are positional parameters,
/// named in each statement's comment.
pub struct Sql {
    /// The core's statements.
    pub ops: Statements,
    pub take: String,
    pub insert: String,
    pub row: String,
    pub queue: String,
    pub renew: String,
    pub renewed: String,
    pub renew_queued: String,
    pub release: String,
    pub unqueue: String,
    pub leave: String,
    pub leave_queue: String,
    pub unqueue_taken: String,
    pub ring: String,
    pub listen: String,
    pub unring: String,
    pub tables: Tables,
}

/// A timestamp column as RFC 3339 UTC with milliseconds.
fn rfc3339(column: &str) -> String {
    format!(
        "CONCAT(DATE_FORMAT({column}, '%Y-%m-%dT%H:%i:%s.'), \
         LPAD(FLOOR(MICROSECOND({column}) / 1000), 3, '0'), 'Z')"
    )
}

/// Milliseconds left until `expires_at`, or NULL once it has passed.
fn left(column: &str) -> String {
    format!(
        "CASE WHEN {column} > {NOW} THEN TIMESTAMPDIFF(MICROSECOND, {NOW}, {column}) DIV 1000 END"
    )
}

/// A renewal time as microseconds, exact, for naming a version of a row.
fn micros(column: &str) -> String {
    format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column})")
}

/// The TTL a row's holder renews with, in ms.
fn ttl_of(row: &str) -> String {
    format!(
        "CASE WHEN {row}.renewed_at IS NOT NULL \
         THEN TIMESTAMPDIFF(MICROSECOND, {row}.renewed_at, {row}.expires_at) DIV 1000 END"
    )
}

/// The name of a tenure's doorbell (`GET_LOCK`): the tables' database
/// and prefix, the lock, and the fence its holder took it with. 46
/// characters, within the 64 a lock name may have; names are server-wide.
fn bell(scope: &str, lock: &str, fence: &str) -> String {
    format!("CONCAT('elect:', SHA1(CONCAT_WS(CHAR(0), {scope}, {lock}, {fence})))")
}

/// A field of the holder record.
fn holder_field(field: &str) -> String {
    format!("JSON_UNQUOTE(JSON_EXTRACT(holder, '$.{field}'))")
}

impl Sql {
    pub fn new(database: &str, prefix: &str) -> Sql {
        let tables = Tables::new(database, prefix);
        let Tables {
            lease: l,
            waiter: w,
            record: r,
        } = &tables;
        let expiry = format!("{NOW} + INTERVAL ? MICROSECOND");
        let scope: String = format!("{database}.{prefix}")
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        let scope = format!("X'{scope}'");
        let bell = |lock: &str, fence: &str| bell(&scope, lock, fence);
        Sql {
            ops: Statements {
                // 1 lock, 2 lock, 3 lock: fence, tenure, holder, ms left (NULL:
                // free), lease TTL in ms, live waiters.
                status: format!(
                    "SELECT l.fence, l.tenure, l.holder, {}, {}, \
                       (SELECT COUNT(*) FROM {w} q WHERE q.name = ? AND q.expires_at > {NOW} \
                          AND NOT (q.tenure <=> (SELECT tenure FROM {l} WHERE name = ?))) \
                     FROM (SELECT 1) one LEFT JOIN {l} l ON l.name = ?",
                    left("l.expires_at"),
                    ttl_of("l"),
                ),
                // 1-2 prefix, 3-4 prefix: as status, and the name, for every
                // lock with a holder or waiters.
                list: format!(
                    "SELECT l.fence, l.tenure, l.holder, {}, {}, \
                       (SELECT COUNT(*) FROM {w} q WHERE q.name = n.name AND q.expires_at > {NOW} \
                          AND NOT (q.tenure <=> l.tenure)), \
                       n.name \
                     FROM (SELECT name FROM {l} WHERE tenure IS NOT NULL AND expires_at > {NOW} \
                         AND LEFT(name, CHAR_LENGTH(?)) = ? \
                       UNION SELECT name FROM {w} WHERE expires_at > {NOW} \
                         AND LEFT(name, CHAR_LENGTH(?)) = ?) n \
                     LEFT JOIN {l} l ON l.name = n.name ORDER BY n.name",
                    left("l.expires_at"),
                    ttl_of("l"),
                ),
                // 1 lock, 2 lock, 3 record: as status without the TTL and
                // the waiters, and the record's value and version.
                look: format!(
                    "SELECT l.fence, l.tenure, l.holder, {}, CAST(NULL AS SIGNED), CAST(0 AS SIGNED), \
                       r.value, r.version \
                     FROM (SELECT 1) one LEFT JOIN {l} l ON l.name = ? \
                     LEFT JOIN {r} r ON r.name = ? AND r.record = ?",
                    left("l.expires_at"),
                ),
                // 1 request, 2 lock, 3 tenure: ask the holder to let go.
                ask: format!(
                    "UPDATE {l} SET holder = JSON_SET(COALESCE(holder, '{{}}'), '$.break_request', ?) \
                     WHERE name = ? AND tenure = ? AND expires_at > {NOW}"
                ),
                // 1 lock: its checkpoint, the token that wrote it, when.
                checkpoint: format!(
                    "SELECT checkpoint, checkpoint_fence, {} FROM {l} \
                     WHERE name = ? AND checkpoint IS NOT NULL",
                    rfc3339("checkpoint_at")
                ),
                // 1 value, 2 lock, 3 tenure, 4 fence: store the checkpoint if
                // the writer still holds the row with that fence (its own
                // clock, not the database's, tells whether its lease lives).
                put_checkpoint: format!(
                    "UPDATE {l} SET checkpoint = ?, checkpoint_fence = fence, checkpoint_at = {NOW} \
                     WHERE name = ? AND tenure = ? AND fence = ?"
                ),
                // 1 lock, 2 record: its value and version.
                record: format!("SELECT value, version FROM {r} WHERE name = ? AND record = ?"),
                // 1 lock, 2 record, 3 value, 4 lock, 5 tenure, 6 fence: written
                // if the tenure still holds the lock with that fence, its row
                // share-locked until the write commits, so that no taker
                // comes between.
                put_record_held: format!(
                    "INSERT INTO {r} (name, record, version, value) \
                     SELECT ?, ?, 1, ? FROM {l} WHERE name = ? AND tenure = ? AND fence = ? \
                     LOCK IN SHARE MODE \
                     ON DUPLICATE KEY UPDATE value = VALUES(value), version = {r}.version + 1"
                ),
                // 1 lock, 2 record, 3 value: a duplicate key if there is one.
                put_record_new: format!(
                    "INSERT INTO {r} (name, record, version, value) VALUES (?, ?, 1, ?)"
                ),
                // 1 value, 2 lock, 3 record, 4 version: written if still that version.
                put_record_version: format!(
                    "UPDATE {r} SET value = ?, version = version + 1 \
                     WHERE name = ? AND record = ? AND version = ?"
                ),
                // 1 lock, 2 record, 3 value: written whatever was there.
                put_record_any: format!(
                    "INSERT INTO {r} (name, record, version, value) VALUES (?, ?, 1, ?) \
                     ON DUPLICATE KEY UPDATE value = VALUES(value), version = version + 1"
                ),
                // 1 lock, 2 record.
                delete_record: format!("DELETE FROM {r} WHERE name = ? AND record = ?"),
                // 1 prefix, 2 with values, 3 lock, 4-5 prefix: each tenure's id and value.
                tenures: format!(
                    "SELECT SUBSTRING(record, CHAR_LENGTH(?) + 1), IF(?, value, '') FROM {r} \
                     WHERE name = ? AND LEFT(record, CHAR_LENGTH(?)) = ?"
                ),
                // 1-2 the locks' prefix, 3-4 the history's prefix: the locks with a history.
                recorded: format!(
                    "SELECT DISTINCT name FROM {r} \
                     WHERE LEFT(name, CHAR_LENGTH(?)) = ? AND LEFT(record, CHAR_LENGTH(?)) = ?"
                ),
                // 1 lock, 2 count: record the number of shards in the lock's
                // own row unless one is.
                record_shards: format!(
                    "INSERT INTO {l} (name, fence, expires_at, shards) VALUES (?, 0, {NEVER}, ?) \
                     ON DUPLICATE KEY UPDATE shards = COALESCE(shards, VALUES(shards))"
                ),
                // 1 lock: the number of shards recorded.
                shards: format!("SELECT shards FROM {l} WHERE name = ?"),
                // 1 lock: its last holder's identity, kept after it lets go.
                last: format!(
                    "SELECT {} FROM {l} WHERE name = ?",
                    holder_field("identity")
                ),
                // Locks as parameters, as many as asked: for each, held now,
                // and its last holder's identity (`IN (…)` added by the caller).
                owners: format!(
                    "SELECT name, tenure IS NOT NULL AND expires_at > {NOW}, {} FROM {l} WHERE name IN ",
                    holder_field("identity")
                ),
                // 1 lock, 2 tenure: end a holder's lease now.
                end: format!(
                    "UPDATE {l} SET tenure = NULL, holder = NULL, expires_at = {NEVER}, \
                       renewed_at = NULL, acquired_at = NULL WHERE name = ? AND tenure = ?"
                ),
            },
            // 1-3 tenure, 4 holder record, 5 tenure, 6 ttl µs, 7 lock,
            // 8 tenure; 9 tenure ('' for none), 10 renewals and 11 renewal
            // time (µs) of the version the taker has seen unchanged for its
            // holder's TTL, or NULLs. Takes a row let go on this server, or
            // an expired one or one let go on another still at that
            // version, with the next fence, or confirms our own with the
            // same fence (a take sent again); matches no row else.
            take: format!(
                "UPDATE {l} SET fence = IF(tenure <=> ?, fence, GREATEST(fence + 1, {CLOCK_FENCE})), \
                   acquired_at = IF(tenure <=> ?, acquired_at, {NOW}), \
                   holder = IF(tenure <=> ?, holder, {HOLDER_HERE}), \
                   tenure = ?, renewed_at = {NOW}, expires_at = {expiry}, \
                   renewals = renewals + 1 \
                 WHERE name = ? AND (tenure = ? OR (tenure IS NULL AND {SAME_SERVER}) \
                   OR ((tenure IS NULL OR expires_at <= {NOW}) AND COALESCE(tenure, '') = ? \
                       AND renewals = ? AND {} <=> ?))",
                micros("renewed_at")
            ),
            // 1 lock, 2 tenure, 3 ttl µs, 4 holder record: the first take
            // of a lock; a duplicate key if the row exists.
            insert: format!(
                "INSERT INTO {l} (name, tenure, fence, expires_at, renewed_at, acquired_at, \
                   holder, renewals) \
                 VALUES (?, ?, GREATEST(1, {CLOCK_FENCE}), {expiry}, {NOW}, {NOW}, {HOLDER_HERE}, 1)"
            ),
            // 1 lock: its holder's tenure, the fence, the version, the
            // holder's TTL and time left by the database's clock, the
            // checkpoint, and whether it was let go on another server.
            row: format!(
                "SELECT tenure, fence, renewals, {}, {}, {}, checkpoint, checkpoint_fence, {}, \
                   tenure IS NULL AND NOT ({SAME_SERVER}) \
                 FROM {l} WHERE name = ?",
                micros("renewed_at"),
                ttl_of(l),
                left("expires_at"),
                rfc3339("checkpoint_at")
            ),
            // 1 lock, 2 tenure, 3 ttl µs: queued, for status alone.
            queue: format!(
                "INSERT INTO {w} (name, tenure, since, expires_at) VALUES (?, ?, {NOW}, {expiry}) \
                 ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"
            ),
            // 1 ttl µs, 2 tenure. A row the database's clock calls expired
            // is still ours until someone takes it, which waits for a
            // whole TTL after the last renewal it saw.
            renew: format!(
                "UPDATE {l} SET expires_at = {expiry}, renewed_at = {NOW}, \
                   renewals = renewals + 1 WHERE tenure = ?"
            ),
            // 1 tenure: the rows the renewal kept, any break request, and
            // whether each row's doorbell is held (by us, or for a moment
            // by a waiter looking).
            renewed: format!(
                "SELECT name, {}, IS_USED_LOCK({}) IS NOT NULL FROM {l} WHERE tenure = ?",
                holder_field("break_request"),
                bell("name", "fence")
            ),
            // 1 ttl µs, 2 tenure.
            renew_queued: format!("UPDATE {w} SET expires_at = {expiry} WHERE tenure = ?"),
            // 1 tenure: free our rows. The holder record stays, as the
            // last holder's (shards go back to it), shown only while a
            // tenure lives.
            release: format!(
                "UPDATE {l} SET tenure = NULL, expires_at = {NEVER}, renewed_at = NULL, \
                   acquired_at = NULL WHERE tenure = ?"
            ),
            // 1 tenure: leave every queue.
            unqueue: format!("DELETE FROM {w} WHERE tenure = ?"),
            // 1 lock, 2 tenure: as release, for one lock.
            leave: format!(
                "UPDATE {l} SET tenure = NULL, expires_at = {NEVER}, renewed_at = NULL, \
                   acquired_at = NULL WHERE name = ? AND tenure = ?"
            ),
            // 1 lock, 2 tenure.
            leave_queue: format!("DELETE FROM {w} WHERE name = ? AND tenure = ?"),
            // 1 lock, 2 tenure: on a take, our place in the queue and
            // those of waiters gone.
            unqueue_taken: format!(
                "DELETE FROM {w} WHERE name = ? AND (tenure = ? OR expires_at < {NOW})"
            ),
            // 1 lock, 2 fence: the holder takes its doorbell, waiting out a
            // waiter that holds it for a moment. 1 taken, 0 held elsewhere.
            ring: format!("SELECT GET_LOCK({}, 1)", bell("?", "?")),
            // 1 lock, 2 fence, 3 seconds: a waiter blocks on the holder's
            // doorbell. 1 once it is free (a release, or the holder's
            // connection gone), 0 when the time is up.
            listen: format!("SELECT GET_LOCK({}, ?)", bell("?", "?")),
            // 1 lock, 2 fence: let the doorbell go.
            unring: format!("SELECT RELEASE_LOCK({})", bell("?", "?")),
            tables,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's page gives administrators the very SQL elect would run.
    #[test]
    fn the_guide_has_the_setup_sql() {
        let readme = crate::docs::page("docs/stores/mysql.md");
        let t = Tables::new("jobs", "elect");
        let wanted: Vec<String> = create_tables(&t)
            .into_iter()
            .map(|c| c.replace(" IF NOT EXISTS", ""))
            .chain(grants(&t, "'batch'@'%'"))
            .collect();
        let missing: Vec<String> = wanted
            .iter()
            .filter(|s| !readme.contains(&format!("{s};")))
            .map(|s| format!("{s};"))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/stores/mysql.md lacks:\n{}",
            missing.join("\n")
        );
    }
}
