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
mod greeting;
mod session;
mod sql;
mod target;

use std::rc::Rc;
use std::time::Duration;

use mysql_async::{Row, Value};

use crate::log;
use crate::store::lease_row::{Access, Answer, Arg, Cell, Col, Dialect, Op};
use crate::store::{Session, StoreError};
use conn::{Failed, Link, cell, code, p};
pub use target::{KIND, MyTarget};

pub use crate::store::POLL_EVERY;

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
        self.try_query_as(statement, params, true).await
    }

    /// [`Self::try_query`]; without `settle`, on a connection that need
    /// not have the session settings ([`Link::exec_unsettled`]).
    async fn try_query_as(
        &self,
        statement: &str,
        params: Vec<Value>,
        settle: bool,
    ) -> Result<(Vec<Row>, u64), Failed> {
        let mut tries = 0;
        loop {
            tries += 1;
            let params = params.clone();
            let answer = match settle {
                true => self.link.exec(statement, params, self.within).await,
                false => {
                    self.link
                        .exec_unsettled(statement, params, self.within)
                        .await
                }
            };
            match answer {
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
    /// nothing, and nothing is created. Without `settle`, a SELECT in
    /// autocommit that takes no lock.
    async fn read(
        &self,
        statement: &str,
        params: Vec<Value>,
        settle: bool,
    ) -> Result<Vec<Row>, StoreError> {
        match self.try_query_as(statement, params, settle).await {
            Err(e) if e.code() == Some(code::NO_SUCH_TABLE) => Ok(Vec::new()),
            Err(e) => Err(self.failed(&e).await),
            Ok((rows, _)) => Ok(rows),
        }
    }
}

impl Dialect for MySql {
    async fn send(&self, op: Op, access: Access, args: &[Arg<'_>]) -> Result<Answer, StoreError> {
        // Each statement's `?`s, by the place of the core's argument.
        let statement = self.sql.ops.of(op);
        let places: &[usize] = match op {
            Op::Status => &[0, 0, 0],
            Op::List => &[0, 0, 0, 0],
            Op::Look => &[0, 0, 1],
            Op::Ask => &[2, 0, 1],
            Op::End => &[0, 1],
            Op::Checkpoint => &[0],
            Op::PutCheckpoint => &[3, 0, 1, 2],
            Op::Record => &[0, 1],
            Op::PutRecordHeld => &[0, 1, 2, 0, 3, 4],
            Op::PutRecordNew => &[0, 1, 2],
            Op::PutRecordVersion => &[2, 0, 1, 3],
            Op::PutRecordAny => &[0, 1, 2],
            Op::DeleteRecord => &[0, 1],
            Op::Tenures => &[1, 2, 0, 1, 1],
            Op::Recorded => &[0, 0, 1, 1],
            Op::RecordShards => &[0, 1],
            Op::Shards => &[0],
            Op::Last => &[0],
            Op::Owners => &[0],
        };
        let mut params = Vec::new();
        for &at in places {
            match args[at] {
                Arg::Text(text) => params.push(p(text)),
                Arg::Int(n) => params.push(p(n)),
                Arg::Flag(b) => params.push(p(b)),
                Arg::Texts(texts) => params.extend(texts.iter().map(|t| p(t.as_str()))),
            }
        }
        // As many `?` as locks asked about.
        let owners;
        let statement = match args.first() {
            Some(Arg::Texts(texts)) => {
                owners = format!("{statement}({})", vec!["?"; texts.len()].join(", "));
                owners.as_str()
            }
            _ => statement,
        };
        let (rows, matched) = match access {
            // A run's first look, which a fleet's skipped hosts make alone.
            Access::Read if op == Op::Look => (self.read(statement, params, false).await?, 0),
            Access::Read => (self.read(statement, params, true).await?, 0),
            Access::Write if op == Op::PutRecordNew => {
                (Vec::new(), self.put_new(statement, params).await?)
            }
            Access::Write => self.on_tables(statement, params).await?,
            Access::Plain => self.query(statement, params).await?,
        };
        let rows = rows
            .iter()
            .map(|row| {
                let cells = op.columns().iter().enumerate().map(|(i, col)| {
                    let cell = match col {
                        Col::Text => cell::<Option<String>>(row, i)?.map(Cell::Text),
                        Col::Int | Col::Small => cell::<Option<i64>>(row, i)?.map(Cell::Int),
                        Col::Flag => cell::<Option<bool>>(row, i)?.map(Cell::Flag),
                    };
                    Ok(cell.unwrap_or(Cell::Null))
                });
                cells
                    .collect::<Result<_, StoreError>>()
                    .map(crate::store::lease_row::Row)
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Answer { rows, matched })
    }

    fn open_session(&self, ttl: Duration) -> Box<dyn Session + '_> {
        Box::new(session::MySession::new(self, ttl))
    }
}

impl MySql {
    /// A record written only if there is none: a duplicate key is one
    /// there already (no row written).
    async fn put_new(&self, statement: &str, params: Vec<Value>) -> Result<u64, StoreError> {
        match self.try_query(statement, params.clone()).await {
            Ok((_, n)) => Ok(n),
            Err(e) if e.code() == Some(code::DUPLICATE_KEY) => Ok(0),
            Err(e) if e.code() == Some(code::NO_SUCH_TABLE) => {
                self.set_up().await?;
                match self.try_query(statement, params).await {
                    Ok((_, n)) => Ok(n),
                    Err(e) if e.code() == Some(code::DUPLICATE_KEY) => Ok(0),
                    Err(e) => Err(self.failed(&e).await),
                }
            }
            Err(e) => Err(self.failed(&e).await),
        }
    }
}
