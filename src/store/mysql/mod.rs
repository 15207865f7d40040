//! The MySQL and MariaDB store: a lease table in the database a team
//! already runs.
//!
//! Not `GET_LOCK`: it belongs to one connection, so a pooler or proxy
//! breaks it, a reconnecting client loses it without noticing, and it has
//! no token. Instead one row per lock in `PREFIX_lease`, never deleted:
//! its holder's tenure (the session's id, fresh for each `elect run`), a
//! `fence` that grows by one for each new holder (the token), and
//! `expires_at` by the database's clock.
//!
//! - **Acquire**: one autocommit UPDATE takes a free or expired row
//!   ([`sql::Sql::take`]), or an INSERT its first time; a take sent again
//!   after its reply was lost finds its own tenure there and gets the same
//!   fence. A read of the row then says whose it is. While the row is
//!   busy the session is queued in `PREFIX_waiter`, which only serves
//!   `status` (who waits): order and exclusion come from the lease row.
//! - **Renew**: one UPDATE of every row of the tenure, then a read of
//!   which rows are still ours; a row missing from it is lost. elect's
//!   deadline counts from the send time of the last confirmed renewal, as
//!   for every store.
//! - **Release**: our rows freed (`tenure` NULL), our queue places gone.
//! - **Wait**: MySQL has no NOTIFY. A waiter blocks on its holder's
//!   doorbell (a `GET_LOCK` the holder lets go just after it frees the row:
//!   [`session`]) until the row could have expired, then reads the row (by
//!   primary key: one index look-up) and tries to take it once it is free,
//!   or expired by the database's clock and seen unchanged for its TTL on
//!   ours. Without a doorbell it reads the row every [`POLL_EVERY`] at
//!   most.
//!
//! Deadlocks and lock-wait timeouts are retried as a lost connection is.
//! Setup: `elect run` creates the tables if they are missing and the
//! account may; otherwise one error names the missing right and gives the
//! SQL and GRANTs an administrator runs once (exit 78).

mod conn;
mod session;
mod sql;
mod target;

use std::rc::Rc;
use std::time::Duration;

use mysql_async::{Row, Value};
use serde::{Deserialize, Serialize};

use crate::log;
use crate::store::Token;
use crate::store::records;
use crate::store::{
    Boxed, Breaking, Checkpoint, Fence, Holder, HolderRecord, LockStatus, Owner, Put, Record,
    Session, Store, StoreError, Versioned,
};
use conn::{Failed, Link, cell, code, p};
pub use target::{KIND, MyTarget};

pub use crate::store::POLL_EVERY;

/// Everything needed to end a session from another process.
#[derive(Serialize, Deserialize)]
struct ReleaseOrder {
    target: MyTarget,
    tenure: String,
}

/// How long a release may take here: within `elect run`'s bound for it,
/// with room to cancel what the server did not answer.
const RELEASE_WITHIN: Duration = Duration::from_millis(1200);

/// A connected MySQL or MariaDB store.
pub struct MySql {
    link: Link,
    sql: Rc<sql::Sql>,
    within: Duration,
}

impl MySql {
    pub async fn connect(target: &MyTarget, within: Duration) -> Result<MySql, StoreError> {
        let link = Link::new(Rc::new(target.clone()), within);
        link.connected().await?;
        Ok(MySql {
            link,
            sql: Rc::new(sql::Sql::new(&target.database, &target.prefix)),
            within,
        })
    }

    fn target(&self) -> &MyTarget {
        self.link.target()
    }

    /// Release the rows of `tenure`, for the guard of an elect that died.
    pub async fn release_tenure(
        target: &MyTarget,
        tenure: &str,
        within: Duration,
    ) -> Result<MySql, StoreError> {
        let store = MySql::connect(target, within).await?;
        store.release(tenure).await?;
        Ok(store)
    }

    /// Free every row of `tenure` and leave its queues.
    async fn release(&self, tenure: &str) -> Result<(), StoreError> {
        let both = async {
            self.query(&self.sql.release, vec![p(tenure)]).await?;
            self.query(&self.sql.unqueue, vec![p(tenure)]).await?;
            Ok(())
        };
        // Within the bound elect gives a release, with time left to kill a
        // statement the server keeps (a commit that waits for a
        // semi-synchronous replica), so that none waits on after elect.
        match tokio::time::timeout(RELEASE_WITHIN, both).await {
            Ok(released) => released,
            Err(_) => Err(StoreError::unavailable(format!(
                "{} did not answer the release within {}{}",
                self.target(),
                crate::clock::show(RELEASE_WITHIN),
                self.cancel_unanswered().await
            ))),
        }
    }

    /// Run one statement on the main connection; a transient failure
    /// (a lost connection, a deadlock, a lock wait timed out) is tried
    /// again, on a new connection where the old one broke.
    async fn query(
        &self,
        statement: &str,
        params: Vec<Value>,
    ) -> Result<(Vec<Row>, u64), StoreError> {
        match self.try_query(statement, params).await {
            Ok(answer) => Ok(answer),
            Err(e) => Err(self.failed(&e).await),
        }
    }

    /// [`Self::query`], the failure unsorted.
    async fn try_query(
        &self,
        statement: &str,
        params: Vec<Value>,
    ) -> Result<(Vec<Row>, u64), Failed> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.link.exec(statement, params.clone(), self.within).await {
                Err(e) if e.is_transient() && tries < 3 => {
                    log::verbose(format_args!("{}; trying again", e.text()));
                }
                answer => return answer,
            }
        }
    }

    /// What a failed statement means for the user: a missing right is
    /// theirs to fix (exit 78).
    async fn failed(&self, e: &Failed) -> StoreError {
        let shown = self.target().to_string();
        if let Failed::Link(e) = e {
            let mut e = e.clone();
            e.message.push_str(&self.cancel_unanswered().await);
            return e;
        }
        if e.is_read_only() {
            return StoreError::config(format!(
                "{shown} is a read-only server ({}): elect takes locks on the primary only",
                e.text()
            ));
        }
        if e.is_denied() {
            let account = self.account().await;
            return StoreError::denied(format!(
                "{shown}: {}; the least account {account} needs: {};",
                e.text(),
                sql::grants(&self.sql.tables, &account).join("; ")
            ));
        }
        match e.is_transient() {
            true => StoreError::unavailable(format!("{shown}: {}", e.text())),
            false => StoreError::unavailable(format!("{shown} refused a statement: {}", e.text())),
        }
    }

    /// Give up on `what`, unanswered within --connect-timeout: one line
    /// saying why, as the server tells, once the statement is killed.
    pub(super) async fn give_up(&self, what: &str) -> StoreError {
        let why = self.cancel_unanswered().await;
        StoreError::unavailable(format!(
            "{} did not answer{what} within {}{why}",
            self.target(),
            crate::clock::show(self.within)
        ))
    }

    /// Kill the statements given up unanswered, so that none waits on in
    /// the server after elect: `; ...` saying what they waited for, as the
    /// server tells, or nothing.
    async fn cancel_unanswered(&self) -> String {
        match self.link.cancel_unanswered().await {
            Some(state) if state.to_ascii_lowercase().contains("semi-sync") => format!(
                "; its commits wait for a semi-synchronous replica that does not acknowledge \
                 them ({state}; rpl_semi_sync_master_enabled is on): elect cancelled its statement"
            ),
            Some(state) if !state.is_empty() => {
                format!("; elect's statement was waiting ({state}), and was cancelled")
            }
            _ => String::new(),
        }
    }

    /// The account we are logged in as, quoted as GRANT takes it.
    async fn account(&self) -> String {
        let fallback = format!("'{}'@'%'", self.target().user);
        let Ok((rows, _)) = self
            .link
            .exec("SELECT CURRENT_USER()", Vec::new(), self.within)
            .await
        else {
            return fallback;
        };
        rows.first()
            .and_then(|row| cell::<String>(row, 0).ok())
            .and_then(|account| {
                let (user, host) = account.rsplit_once('@')?;
                Some(format!("'{user}'@'{host}'"))
            })
            .unwrap_or(fallback)
    }

    /// Create the tables, as far as they are missing.
    async fn set_up(&self) -> Result<(), StoreError> {
        let target = self.target();
        log::verbose(format_args!(
            "creating the lease tables in database {}",
            target.database
        ));
        for create in sql::create_tables(&self.sql.tables) {
            match self.link.run(&create).await {
                Ok(()) => {}
                Err(e) if e.is_denied() => {
                    let account = self.account().await;
                    return Err(StoreError::denied(format!(
                        "{target}: account {account} may not create the lease tables ({}); {}",
                        e.text(),
                        sql::for_an_administrator(&self.sql.tables, &account)
                    )));
                }
                Err(e) => return Err(self.failed(&e).await),
            }
        }
        Ok(())
    }

    /// A statement that needs the tables: they are created first if missing.
    async fn on_tables(
        &self,
        statement: &str,
        params: Vec<Value>,
    ) -> Result<(Vec<Row>, u64), StoreError> {
        match self.try_query(statement, params.clone()).await {
            Err(e) if e.code() == Some(code::NO_SUCH_TABLE) => {
                self.set_up().await?;
                self.query(statement, params).await
            }
            Err(e) => Err(self.failed(&e).await),
            Ok(answer) => Ok(answer),
        }
    }

    /// A statement that only reads or removes: without the tables there is
    /// nothing, and nothing is created.
    async fn read(&self, statement: &str, params: Vec<Value>) -> Result<Vec<Row>, StoreError> {
        match self.try_query(statement, params).await {
            Err(e) if e.code() == Some(code::NO_SUCH_TABLE) => Ok(Vec::new()),
            Err(e) => Err(self.failed(&e).await),
            Ok((rows, _)) => Ok(rows),
        }
    }

    async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let rows = self
            .read(&self.sql.status, vec![p(lock), p(lock), p(lock)])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(LockStatus {
                lock: lock.to_string(),
                holder: None,
                waiting: 0,
                ranks: Vec::new(),
            });
        };
        let fence: Option<i64> = cell(row, 0)?;
        let tenure: Option<String> = cell(row, 1)?;
        let record: Option<String> = cell(row, 2)?;
        let left: Option<i64> = cell(row, 3)?;
        let waiting: i64 = cell(row, 5)?;
        let holder = match (tenure, left) {
            (Some(tenure), Some(left)) => Some(Holder {
                key: session::key(lock, &tenure),
                token: Token::new(fence.unwrap_or(0) as u64),
                record: record.and_then(|r| HolderRecord::from_json(r.as_bytes())),
                lease: Some(tenure),
                ttl_left: Some(Duration::from_millis(left.max(0) as u64)),
            }),
            _ => None,
        };
        Ok(LockStatus {
            lock: lock.to_string(),
            holder,
            waiting: waiting as usize,
            ranks: Vec::new(),
        })
    }

    /// The lease TTL of the holder of `lock`, from its last renewal.
    async fn holder_ttl(&self, lock: &str) -> Result<Option<Duration>, StoreError> {
        let rows = self
            .read(&self.sql.status, vec![p(lock), p(lock), p(lock)])
            .await?;
        let ms = match rows.first() {
            Some(row) => cell::<Option<i64>>(row, 4)?,
            None => None,
        };
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }
}

/// A break begun on the holder of `lock` with `tenure`.
struct MyBreaking<'a> {
    my: &'a MySql,
    lock: &'a str,
    tenure: String,
}

impl Breaking for MyBreaking<'_> {
    /// Its elect sees the request at its next renewal (TTL/3), stops the
    /// command within its grace and releases.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(crate::store::breaking::until_let_go(self.lock, || async {
            let status = self.my.read_status(self.lock).await?;
            Ok(status.holder.and_then(|h| h.lease).as_deref() == Some(&self.tenure))
        }))
    }

    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.my
                .query(
                    &self.my.sql.end,
                    vec![p(self.lock), p(self.tenure.as_str())],
                )
                .await
                .map(drop)
        })
    }
}

impl Store for MySql {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move {
            let session: Box<dyn Session + '_> = Box::new(session::MySession::new(self, ttl));
            Ok(session)
        })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(self.read_status(lock))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read(
                    &self.sql.list,
                    vec![p(prefix), p(prefix), p(prefix), p(prefix)],
                )
                .await?;
            let mut all = Vec::new();
            for row in &rows {
                let lock: String = cell(row, 0)?;
                let status = self.read_status(&lock).await?;
                if status.holder.is_some() || status.waiting > 0 {
                    all.push(status);
                }
            }
            Ok(all)
        })
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(async move {
            // Each statement names the tenure: one that ended meanwhile is
            // neither asked nor ended.
            let tenure = holder.lease.clone().unwrap_or_default();
            if ask {
                let request = crate::store::holder::break_request();
                let (_, matched) = self
                    .query(&self.sql.ask, vec![p(request), p(lock), p(tenure.as_str())])
                    .await?;
                if matched == 0 {
                    return Ok(None);
                }
            }
            let breaking: Box<dyn Breaking + 'a> = Box::new(MyBreaking {
                my: self,
                lock,
                tenure,
            });
            Ok(Some(breaking))
        })
    }

    fn lease_ttl<'a>(
        &'a self,
        lock: &'a str,
        _holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(self.holder_ttl(lock))
    }

    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(async move {
            if locks.is_empty() {
                return Ok(Vec::new());
            }
            let marks = vec!["?"; locks.len()].join(", ");
            let statement = format!("{}({marks})", self.sql.owners);
            let rows = self
                .read(&statement, locks.iter().map(|l| p(l.as_str())).collect())
                .await?;
            let mut owners = vec![Owner::default(); locks.len()];
            for row in &rows {
                let name: String = cell(row, 0)?;
                let held: Option<i64> = cell(row, 1)?;
                let last: Option<String> = cell(row, 2)?;
                if let Some(i) = locks.iter().position(|l| *l == name) {
                    owners[i] = Owner {
                        held: held.unwrap_or(0) != 0,
                        last,
                    };
                }
            }
            Ok(owners)
        })
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            if let Some(found) = self.row_record(lock, record).await {
                return found;
            }
            let name = record.suffix();
            let rows = self.read(&self.sql.record, vec![p(lock), p(name)]).await?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            Ok(Some(Versioned {
                value: cell(row, 0)?,
                version: cell::<i64>(row, 1)? as u64,
            }))
        })
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move {
            match (record, fence) {
                (Record::Checkpoint, Fence::Holder { key, token }) => {
                    return self.put_checkpoint(lock, key, token, value).await;
                }
                (Record::Shards, Fence::Version(None)) => {
                    return self.put_shards(lock, value).await;
                }
                (Record::Checkpoint | Record::Shards | Record::Last, _) => {
                    return Err(records::kept_in_the_row(lock, record));
                }
                _ => {}
            }
            let name = record.suffix();
            let stored = match fence {
                Fence::Holder { key, token } => {
                    let Some(tenure) = key.strip_prefix(&format!("{lock}/")) else {
                        return Ok(Put::Stale(format!("{key} is no key of lock {lock}")));
                    };
                    let params = vec![
                        p(lock),
                        p(name.as_str()),
                        p(value),
                        p(lock),
                        p(tenure),
                        p(token.get() as i64),
                    ];
                    self.on_tables(&self.sql.put_record_held, params).await?.1 > 0
                }
                Fence::Version(None) => {
                    let params = vec![p(lock), p(name.as_str()), p(value)];
                    match self
                        .try_query(&self.sql.put_record_new, params.clone())
                        .await
                    {
                        Ok((_, n)) => n > 0,
                        Err(e) if e.code() == Some(code::DUPLICATE_KEY) => false,
                        Err(e) if e.code() == Some(code::NO_SUCH_TABLE) => {
                            self.set_up().await?;
                            match self.try_query(&self.sql.put_record_new, params).await {
                                Ok((_, n)) => n > 0,
                                Err(e) if e.code() == Some(code::DUPLICATE_KEY) => false,
                                Err(e) => return Err(self.failed(&e).await),
                            }
                        }
                        Err(e) => return Err(self.failed(&e).await),
                    }
                }
                Fence::Any => {
                    let params = vec![p(lock), p(name.as_str()), p(value)];
                    self.on_tables(&self.sql.put_record_any, params).await?.1 > 0
                }
                Fence::Version(Some(v)) => {
                    let params = vec![p(value), p(lock), p(name.as_str()), p(v as i64)];
                    self.on_tables(&self.sql.put_record_version, params)
                        .await?
                        .1
                        > 0
                }
            };
            Ok(match (stored, fence) {
                (true, _) => Put::Stored,
                (false, Fence::Holder { token, .. }) => {
                    Put::Stale(format!("token {token} no longer holds lock {lock}"))
                }
                (false, _) => Put::Stale(format!("record {name} of lock {lock} changed meanwhile")),
            })
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if let Record::Checkpoint | Record::Shards | Record::Last = record {
                return Err(records::kept_in_the_row(lock, record));
            }
            let name = record.suffix();
            self.read(&self.sql.delete_record, vec![p(lock), p(name)])
                .await?;
            Ok(())
        })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let history = crate::store::HISTORY;
            let rows = self
                .read(
                    &self.sql.recorded,
                    vec![p(prefix), p(prefix), p(history), p(history)],
                )
                .await?;
            rows.iter().map(|r| cell(r, 0)).collect()
        })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let prefix = crate::store::HISTORY;
            let rows = self
                .read(
                    &self.sql.tenures,
                    vec![p(prefix), p(values), p(lock), p(prefix), p(prefix)],
                )
                .await?;
            rows.iter()
                .map(|r| Ok((cell(r, 0)?, cell(r, 1)?)))
                .collect()
        })
    }
}

impl MySql {
    /// The records kept in the lock's own row, not the record table: its
    /// checkpoint, its shard count, and its last holder, whose identity
    /// the row keeps after it lets go. `None` for the others.
    async fn row_record(
        &self,
        lock: &str,
        record: Record<'_>,
    ) -> Option<Result<Option<Versioned>, StoreError>> {
        let read = |statement| async move {
            let rows = self.read(statement, vec![p(lock)]).await?;
            Ok::<_, StoreError>(rows.into_iter().next())
        };
        let found = match record {
            Record::Checkpoint => read(&self.sql.checkpoint).await.and_then(|row| {
                let Some(row) = row else { return Ok(None) };
                Ok(checkpoint_of(&row, 0)?.map(|c| Versioned {
                    version: c.token.get(),
                    value: c.to_json(),
                }))
            }),
            Record::Shards => read(&self.sql.shards).await.and_then(|row| {
                let Some(row) = row else { return Ok(None) };
                Ok(cell::<Option<i64>>(&row, 0)?.map(|n| Versioned {
                    value: n.to_string(),
                    version: 0,
                }))
            }),
            Record::Last => read(&self.sql.last).await.and_then(|row| {
                let Some(row) = row else { return Ok(None) };
                Ok(cell::<Option<String>>(&row, 0)?.map(|value| Versioned { value, version: 0 }))
            }),
            _ => return None,
        };
        Some(found)
    }

    /// Store the checkpoint `json` if the tenure of `key` still holds the
    /// lock's row with `token`.
    async fn put_checkpoint(
        &self,
        lock: &str,
        key: &str,
        token: Token,
        json: &str,
    ) -> Result<Put, StoreError> {
        let Some(tenure) = key.strip_prefix(&format!("{lock}/")) else {
            return Ok(Put::Stale(format!("{key} is no key of lock {lock}")));
        };
        let checkpoint = records::checkpoint_of(lock, json)?;
        let params = vec![
            p(checkpoint.value.as_str()),
            p(lock),
            p(tenure),
            p(token.get() as i64),
        ];
        let (_, matched) = self.query(&self.sql.put_checkpoint, params).await?;
        Ok(match matched > 0 {
            true => Put::Stored,
            false => Put::Stale(format!("token {token} no longer holds lock {lock}")),
        })
    }

    /// Record `count` shards in the lock's row unless a number is recorded.
    async fn put_shards(&self, lock: &str, count: &str) -> Result<Put, StoreError> {
        let n = records::shard_count(lock, count)?;
        self.on_tables(&self.sql.record_shards, vec![p(lock), p(n)])
            .await?;
        let rows = self.read(&self.sql.shards, vec![p(lock)]).await?;
        let recorded = match rows.first() {
            Some(row) => cell::<Option<i64>>(row, 0)?,
            None => None,
        };
        Ok(match recorded == Some(i64::from(n)) {
            true => Put::Stored,
            false => Put::Stale(format!("lock {lock} has a shard count recorded already")),
        })
    }
}

/// The checkpoint in columns `at`, `at + 1` and `at + 2` of `row`: value,
/// token, time.
fn checkpoint_of(row: &Row, at: usize) -> Result<Option<Checkpoint>, StoreError> {
    let Some(value) = cell::<Option<String>>(row, at)? else {
        return Ok(None);
    };
    Ok(Some(Checkpoint {
        value,
        token: Token::new(cell::<Option<i64>>(row, at + 1)?.unwrap_or(0) as u64),
        at: cell::<Option<String>>(row, at + 2)?.unwrap_or_default(),
    }))
}
