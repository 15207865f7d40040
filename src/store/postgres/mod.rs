//! The PostgreSQL store: a lease table in the database a team already runs.
//!
//! Not advisory locks: a transaction pooler breaks them, a half-open
//! connection keeps them for hours, a reconnecting client loses them
//! without noticing, and they have no token. Instead one row per lock in
//! `SCHEMA.lease`, never deleted: its holder's tenure (the session's id,
//! fresh for each `elect run`), a `fence` that grows by one for each new
//! holder (the token), and `expires_at` by the database's clock.
//!
//! - **Acquire**: one autocommit statement takes a free or expired row
//!   ([`sql::Sql::acquire`]); a retry whose reply was lost finds its own
//!   tenure there and gets the same fence. If the row is busy, the same
//!   statement queues the session in `SCHEMA.waiter`, which serves
//!   `status` (who waits) and the order in which waiters are woken:
//!   exclusion comes from the lease row alone.
//! - **Renew**: a conditional UPDATE that also requires the row not to have
//!   expired; zero rows for a lock we hold means the lease is gone. elect's
//!   deadline counts from the send time of the last confirmed renewal, as
//!   for every store, so the command is dead before the row can expire.
//!   An acquisition and a renewal are never in flight at once (see
//!   [`session`]), so a renewal that missed a row being taken cannot stretch
//!   the deadline past the row's expiry.
//! - **Release**: one transaction frees our rows (`expires_at = -infinity`)
//!   and `pg_notify`s the schema's channel with the lock's name, after
//!   naming the oldest live waiter (`next LOCK TENURE`, by the database's
//!   clock).
//! - **Wait**: LISTEN on a second connection and try again on a
//!   notification (once a release named another waiter, only after
//!   [`crate::store::observed::NAMED_FIRST`], by when its take, told as a
//!   renewal is, has mostly been heard: a release costs one take, not one
//!   try by every waiter); otherwise sleep until the holder's `expires_at`
//!   as the database reports it (a crashed holder sends nothing). Behind a
//!   transaction pooler, where LISTEN cannot work (found out by a probe, or
//!   `?listen=off`), poll every [`POLL_EVERY`].
//!
//! Setup: `elect run` creates the schema and tables if they are missing and
//! the role may; otherwise one error names the missing right and gives the
//! SQL an administrator runs once. An earlier elect's lease table gets the
//! one column it lacks (`renewals`, which names each renewal for the
//! waiters, [`session`]), added by its owner's first `elect run`, or by the
//! administrator, who is told the statement. Tables of another layout are
//! refused, never altered.
//!
//! A read-only server (a hot standby) is named as such, once, exit 78: it
//! answers every read, so it would pass for a store whose locks are all
//! busy.

mod conn;
mod greeting;
mod session;
mod sql;
mod target;
mod words;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use crate::log;
use crate::store::lease_row::{Access, Answer, Arg, Cell as Value, Col, Dialect, Op, Row};
use crate::store::{Session, StoreError};
use conn::{Cells, Link, describe, is_transient};
pub use target::{KIND, PgTarget};

/// How long elect asks the server why a statement went unanswered (before
/// it cancels that statement, [`conn::cancelling`]).
const ASK_WITHIN: Duration = Duration::from_millis(500);

/// How long the probe of a new listener waits for its own notification: a
/// round trip on a live server; behind a transaction pooler, never.
const PROBE_HEARD_WITHIN: Duration = Duration::from_secs(1);

pub use crate::store::POLL_EVERY;

/// A connected PostgreSQL store.
pub struct Postgres {
    link: Link,
    sql: Rc<sql::Sql>,
    within: Duration,
    /// The LISTEN connection and where its notifications go, once a waiter
    /// needed it. The sender is weak: the connection's task holds the only
    /// strong one, so that when the connection ends (a server restart, a
    /// backend terminated, an idle timeout) every receiver hears it closed
    /// and listens again.
    listener: RefCell<Option<(Client, broadcast::WeakSender<String>)>>,
    /// Whether notifications reach us here; `None` until probed.
    listen_works: Cell<Option<bool>>,
}

impl Postgres {
    pub async fn connect(target: &PgTarget, within: Duration) -> Result<Postgres, StoreError> {
        let link = Link::new(Rc::new(target.clone()), within);
        link.set(conn::connect(target, within, None).await?);
        Ok(Postgres {
            link,
            sql: Rc::new(sql::Sql::new(&target.schema)),
            within,
            listener: RefCell::new(None),
            listen_works: Cell::new(None),
        })
    }

    fn target(&self) -> &PgTarget {
        self.link.target()
    }

    /// Release the rows of `tenure`, for the guard of an elect that died.
    pub async fn release_tenure(
        target: &PgTarget,
        tenure: &str,
        within: Duration,
    ) -> Result<Postgres, StoreError> {
        let store = Postgres::connect(target, within).await?;
        store
            .query(&store.sql.release, &[(&tenure, Type::TEXT)])
            .await?;
        Ok(store)
    }

    /// Run one statement on the main connection; a transient failure is
    /// retried once on a new connection.
    async fn query(
        &self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let client = self.link.client().await?;
            // A half-open connection would keep a statement waiting for
            // ever: give it as long as a connection may take.
            let answer = tokio::time::timeout(self.within, client.query_typed(statement, params));
            match answer.await {
                Ok(Ok(rows)) => return Ok(rows),
                Ok(Err(e)) if is_transient(&e) && tries < 2 => {
                    log::verbose(format_args!("{}; connecting again", describe(&e)));
                    self.link.reset();
                }
                Ok(Err(e)) => return Err(self.failed(&e).await),
                Err(_) if tries < 2 => {
                    log::verbose(format_args!("no answer; connecting again"));
                    self.link.abandon().await;
                }
                Err(_) => return Err(self.give_up("").await),
            }
        }
    }

    /// What a failed statement means for the user: a missing right or a
    /// table of another layout is theirs to fix (exit 78).
    async fn failed(&self, e: &tokio_postgres::Error) -> StoreError {
        let text = describe(e);
        let shown = self.target().to_string();
        if read_only(e) {
            return StoreError::config(self.read_only_why(&text).await);
        }
        if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
            return StoreError::denied(format!(
                "{shown}: {text}; the least role {} needs: {}",
                self.target().user,
                sql::grants(&self.target().schema_sql(), &self.target().user)
            ));
        }
        if e.code().is_some()
            && !is_transient(e)
            && let Some(layout) = self.layout_problem().await
        {
            return StoreError::config(format!("{shown}: {}", self.explain(layout)));
        }
        match is_transient(e) {
            true => StoreError::unavailable(format!("{shown}: {text}")),
            false => StoreError::unavailable(format!("{shown} refused a statement: {text}")),
        }
    }

    /// Why the server took no write, in one line: a hot standby, or
    /// writes off for the session, by name.
    async fn read_only_why(&self, text: &str) -> String {
        let shown = self.target();
        let asked = async {
            let client = self.link.client().await.ok()?;
            let statement =
                "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')";
            let answer = tokio::time::timeout(self.within, client.query_typed(statement, &[]));
            answer.await.ok()?.ok()
        };
        match asked.await.as_deref().and_then(<[_]>::first) {
            Some(row) if row.cell::<bool>(0).is_ok_and(|standby| standby) => format!(
                "{shown} is a read-only server, a hot standby: elect takes locks on the primary only"
            ),
            Some(row) if row.cell::<String>(1).is_ok_and(|off| off == "on") => format!(
                "{shown} is a read-only server for role {}: default_transaction_read_only is on, \
                 and elect writes its lease rows",
                shown.user
            ),
            _ => format!("{shown} is a read-only server: {text}"),
        }
    }

    /// How the tables in our schema differ from elect's, if they do.
    async fn layout_problem(&self) -> Option<Layout> {
        let client = self.link.client().await.ok()?;
        let schema = &self.target().schema;
        let rows = client
            .query_typed(self.sql.layout, &[(schema, Type::TEXT)])
            .await
            .ok()?;
        let found: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| Ok((r.cell(0)?, r.cell(1)?, r.cell(2)?)))
            .collect::<Result<_, StoreError>>()
            .ok()?;
        let columns = |table: &str| -> Vec<(&str, &str)> {
            found
                .iter()
                .filter(|(t, _, _)| t == table)
                .map(|(_, c, ty)| (c.as_str(), ty.as_str()))
                .collect()
        };
        for table in ["lease", "waiter", "record"] {
            let ours: Vec<(&str, &str)> = sql::LAYOUT
                .iter()
                .filter(|(t, _, _)| *t == table)
                .map(|(_, c, ty)| (*c, *ty))
                .collect();
            let theirs = columns(table);
            if theirs.is_empty() || theirs == ours {
                continue;
            }
            if table == "lease" && theirs[..] == ours[..ours.len() - 1] {
                return Some(Layout::Earlier);
            }
            let columns: Vec<String> = theirs.iter().map(|(c, ty)| format!("{c} {ty}")).collect();
            return Some(Layout::Foreign(format!(
                "table {schema}.{table} is not elect's (its columns: {}); elect leaves it as it is: \
                 choose another schema with ?schema=NAME",
                columns.join(", ")
            )));
        }
        None
    }

    /// What a user is told of tables that are not as elect needs them.
    fn explain(&self, layout: Layout) -> String {
        match layout {
            Layout::Foreign(problem) => problem,
            Layout::Earlier => format!(
                "table {}.lease is an earlier elect's, without column {}; its owner's next \
                 `elect run` adds it, or an administrator runs once: {}",
                self.target().schema,
                sql::ADDED,
                sql::migrate(&self.target().schema_sql())
            ),
        }
    }

    /// Add to an earlier elect's lease table the column it lacks.
    async fn migrate(&self) -> Result<(), StoreError> {
        let client = self.link.client().await?;
        let target = self.target();
        let alter = sql::migrate(&target.schema_sql());
        log::verbose(format_args!(
            "adding column {} to {}.lease",
            sql::ADDED,
            target.schema
        ));
        match client.batch_execute(&alter).await {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                Err(StoreError::denied(format!(
                    "{target}: table {}.lease is an earlier elect's, without column {}, and role {} \
                     may not add it ({}); an administrator runs once: {alter}",
                    target.schema,
                    sql::ADDED,
                    target.user,
                    describe(&e)
                )))
            }
            Err(e) => Err(self.failed(&e).await),
        }
    }

    /// Whether elect's tables are missing here.
    async fn tables_missing(&self) -> bool {
        let schema = &self.target().schema;
        self.query(
            "SELECT to_regclass(quote_ident($1) || '.lease') IS NULL",
            &[(schema, Type::TEXT)],
        )
        .await
        .is_ok_and(|rows| {
            rows.first()
                .is_some_and(|row| row.cell(0).is_ok_and(|yes| yes))
        })
    }

    /// Create the schema and tables, as far as they are missing.
    async fn set_up(&self) -> Result<(), StoreError> {
        let client = self.link.client().await?;
        let target = self.target();
        match self.layout_problem().await {
            Some(Layout::Earlier) => return self.migrate().await,
            Some(layout) => {
                return Err(StoreError::config(format!(
                    "{target}: {}",
                    self.explain(layout)
                )));
            }
            None => {}
        }
        let s = target.schema_sql();
        let exists = client
            .query_typed(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[(&target.schema, Type::TEXT)],
            )
            .await
            .map(|rows| {
                rows.first()
                    .is_some_and(|row| row.cell(0).is_ok_and(|yes| yes))
            });
        let setup = match exists {
            Ok(true) => self.sql.setup.clone(),
            Ok(false) => self.sql.setup_schema.clone(),
            Err(e) => return Err(self.failed(&e).await),
        };
        log::verbose(format_args!("creating the lease tables in schema {s}"));
        match client.batch_execute(&setup).await {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(StoreError::denied(format!(
                    "{}: role {} may not create the lease tables ({}); an administrator runs once: {}{} {}",
                    target,
                    target.user,
                    describe(&e),
                    match exists {
                        Ok(false) => format!("CREATE SCHEMA {s}; "),
                        _ => String::new(),
                    },
                    sql::create_tables(&s).replace(" IF NOT EXISTS", ""),
                    sql::grants(&s, &target.user)
                )))
            }
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(self.failed(&e).await)
            }
        }
    }

    /// Whether a listener is connected already (a waiter's).
    pub(super) fn listening(&self) -> bool {
        self.listener
            .borrow()
            .as_ref()
            .is_some_and(|(client, tx)| !client.is_closed() && tx.strong_count() > 0)
    }

    /// Notifications of released locks, if LISTEN works here: connect the
    /// listener if it is not, and on first use check that a notification
    /// sent on the main connection reaches it (behind a transaction pooler
    /// it does not).
    async fn notifications(&self) -> Option<broadcast::Receiver<String>> {
        if !self.target().listen || self.listen_works.get() == Some(false) {
            return None;
        }
        if let Some((client, tx)) = self.listener.borrow().as_ref()
            && !client.is_closed()
            && let Some(tx) = tx.upgrade()
        {
            return Some(tx.subscribe());
        }
        let (tx, mut rx) = broadcast::channel(1024);
        // The probe goes to a channel of this listener's own: on the
        // schema's, every elect listening there would wake for it.
        let probe = self
            .listen_works
            .get()
            .is_none()
            .then(|| format!("elect probe {}", crate::store::ids::tenure()));
        let listening = async {
            let client = conn::connect(self.target(), self.within, Some(tx.clone())).await?;
            let mut listen = format!("LISTEN {}", self.target().schema_sql());
            if let Some(probe) = &probe {
                listen.push_str(&format!("; LISTEN \"{probe}\""));
            }
            client
                .batch_execute(&listen)
                .await
                .map_err(|e| StoreError::unavailable(describe(&e)))?;
            Ok::<_, StoreError>(client)
        };
        let client = match listening.await {
            Ok(client) => client,
            Err(e) => {
                log::verbose(format_args!("cannot LISTEN ({e}); polling"));
                return None;
            }
        };
        if let Some(probe) = probe {
            let sent = self
                .query("SELECT pg_notify($1, $1)", &[(&probe, Type::TEXT)])
                .await;
            let heard = sent.is_ok()
                && tokio::time::timeout(PROBE_HEARD_WITHIN, async {
                    loop {
                        match rx.recv().await {
                            Ok(payload) if payload == probe => return true,
                            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                            Err(broadcast::error::RecvError::Closed) => return false,
                        }
                    }
                })
                .await
                .unwrap_or(false);
            self.listen_works.set(Some(heard));
            if !heard {
                log::verbose(format_args!(
                    "notifications do not reach us here (a transaction pooler?); \
                     polling every {} ms",
                    POLL_EVERY.as_millis()
                ));
                return None;
            }
        }
        let rx = tx.subscribe();
        *self.listener.borrow_mut() = Some((client, tx.downgrade()));
        Some(rx)
    }

    /// Whether notifications may come here (a listener can be made again
    /// once lost): not behind a transaction pooler, nor with `?listen=off`.
    pub(super) fn may_listen(&self) -> bool {
        self.target().listen && self.listen_works.get() != Some(false)
    }

    /// Give up on the statement of the link's connection, unanswered
    /// within `--connect-timeout`: ask the server why, then cancel it
    /// there (asked first: the cancel ends the wait the server would show).
    /// `what` goes after "did not answer" (" the take of lock X").
    pub(super) async fn give_up(&self, what: &str) -> StoreError {
        let why = self.why_unanswered().await;
        self.link.abandon().await;
        StoreError::unavailable(format!(
            "{} did not answer{what} within {}{why}",
            self.target(),
            crate::clock::show(self.within)
        ))
    }

    /// Why a statement of ours may go unanswered, as the server tells on
    /// a connection of its own, within [`ASK_WITHIN`]: `; ...` for the message
    /// that gives up, or nothing.
    async fn why_unanswered(&self) -> String {
        const SQL: &str = "SELECT wait_event_type, wait_event, \
             current_setting('synchronous_standby_names') FROM pg_stat_activity \
             WHERE usename = current_user AND application_name = $1 AND state = 'active' \
             AND pid <> pg_backend_pid() AND wait_event IS NOT NULL \
             ORDER BY wait_event = 'SyncRep' DESC, query_start LIMIT 1";
        let link = self.link.fresh();
        let name = self.target().application_name.clone();
        let asked = async {
            let client = link.client().await.ok()?;
            let rows = client.query_typed(SQL, &[(&name, Type::TEXT)]).await.ok()?;
            let row = rows.first()?;
            let kind: Option<String> = row.cell(0).ok()?;
            let event: Option<String> = row.cell(1).ok()?;
            let standbys: String = row.cell(2).ok()?;
            Some(match event.as_deref() {
                Some("SyncRep") => format!(
                    ": its commits wait for a synchronous standby that does not confirm them \
                     (synchronous_standby_names = '{standbys}'); elect cancelled its statement"
                ),
                _ => format!(
                    ": elect's statement waited on {} {}, and was cancelled",
                    kind.unwrap_or_default(),
                    event.unwrap_or_default()
                ),
            })
        };
        tokio::time::timeout(ASK_WITHIN, asked)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Rows of a read; none if elect's tables do not exist yet.
    async fn read(
        &self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let client = self.link.client().await?;
        let answer = tokio::time::timeout(self.within, client.query_typed(statement, params));
        match answer.await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) if missing_tables(&e) => Ok(Vec::new()),
            _ => {
                self.link.reset();
                self.query(statement, params).await
            }
        }
    }
}

/// elect's tables are not there (yet).
fn missing_tables(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNDEFINED_TABLE) || e.code() == Some(&SqlState::INVALID_SCHEMA_NAME)
}

/// A column elect's statements name is not there: an earlier elect's
/// table, to bring up to date, or another's.
fn missing_column(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNDEFINED_COLUMN)
}

/// The server takes no writes: a hot standby, or a read-only default.
fn read_only(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// Tables in elect's schema that are not as this elect needs them.
enum Layout {
    /// Another's: described.
    Foreign(String),
    /// An earlier elect's lease table, without [`sql::ADDED`].
    Earlier,
}

impl Postgres {
    /// A statement on the record table, which is created first if it is
    /// missing (an earlier elect's schema has none).
    async fn on_records(
        &self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        match self.query(statement, params).await {
            Err(e) if self.record_table_missing().await => {
                self.create_record_table(e).await?;
                self.query(statement, params).await
            }
            rows => rows,
        }
    }

    /// A statement that only reads or removes records: without the table
    /// there are none, and nothing is created. A table there once the
    /// statement failed was created meanwhile (an elect writes the first
    /// record): the statement is sent once more.
    async fn off_records(
        &self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        match self.query(statement, params).await {
            Err(_) if self.record_table_missing().await => Ok(Vec::new()),
            Err(_) => self.query(statement, params).await,
            rows => rows,
        }
    }

    async fn record_table_missing(&self) -> bool {
        let schema = &self.target().schema;
        self.query(
            "SELECT to_regclass(quote_ident($1) || '.record') IS NULL",
            &[(schema, Type::TEXT)],
        )
        .await
        .is_ok_and(|rows| {
            rows.first()
                .is_some_and(|row| row.cell(0).is_ok_and(|yes| yes))
        })
    }

    /// Create the record table; `first` is the error that showed it missing.
    async fn create_record_table(&self, first: StoreError) -> Result<(), StoreError> {
        let target = self.target();
        let s = target.schema_sql();
        let create = sql::create_record_table(&s);
        log::verbose(format_args!("creating table {}.record", target.schema));
        let client = self.link.client().await?;
        match client.batch_execute(&create).await {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                Err(StoreError::denied(format!(
                    "{target}: table {}.record is missing, and role {} may not create it ({}); \
                     an administrator runs once: {} {}",
                    target.schema,
                    target.user,
                    describe(&e),
                    create.replace(" IF NOT EXISTS", ""),
                    sql::record_grant(&s, &target.user)
                )))
            }
            // Made meanwhile by another elect (two creates race).
            Err(_) if !self.record_table_missing().await => Ok(()),
            Err(_) => Err(first),
        }
    }
}

/// The one row a statement always answers with.
fn first_row(rows: &[tokio_postgres::Row]) -> Result<&tokio_postgres::Row, StoreError> {
    rows.first()
        .ok_or_else(|| StoreError::config("the database answered elect's statement with no row"))
}

impl Dialect for Postgres {
    async fn send(&self, op: Op, access: Access, args: &[Arg<'_>]) -> Result<Answer, StoreError> {
        let statement = self.sql.ops.of(op);
        // Bound as each statement casts them: the shard count is the
        // column's 32 bits.
        let small: Vec<i32> = match op {
            Op::RecordShards => args
                .iter()
                .filter_map(|a| match a {
                    Arg::Int(n) => i32::try_from(*n).ok(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let params: Vec<(&(dyn ToSql + Sync), Type)> = args
            .iter()
            .map(|arg| match arg {
                Arg::Text(text) => (text as &(dyn ToSql + Sync), Type::TEXT),
                Arg::Int(_) if !small.is_empty() => (&small[0] as _, Type::INT4),
                Arg::Int(n) => (n as _, Type::INT8),
                Arg::Flag(b) => (b as _, Type::BOOL),
                Arg::Texts(texts) => (texts as _, Type::TEXT_ARRAY),
            })
            .collect();
        let on_records = matches!(
            op,
            Op::Record
                | Op::PutRecordHeld
                | Op::PutRecordNew
                | Op::PutRecordVersion
                | Op::PutRecordAny
                | Op::DeleteRecord
                | Op::Tenures
                | Op::Recorded
        );
        let rows = match (access, on_records) {
            (Access::Read, true) => self.off_records(statement, &params).await?,
            (Access::Read, false) => self.read(statement, &params).await?,
            (Access::Write, true) => self.on_records(statement, &params).await?,
            (Access::Write, false) => match self.query(statement, &params).await {
                Err(_) if self.tables_missing().await => {
                    self.set_up().await?;
                    self.query(statement, &params).await?
                }
                rows => rows?,
            },
            (Access::Plain, _) => self.query(statement, &params).await?,
        };
        let matched = rows.len() as u64;
        let rows = rows
            .iter()
            .map(|row| {
                let cells = op.columns().iter().enumerate().map(|(i, col)| {
                    let cell = match col {
                        Col::Text => row.cell::<Option<String>>(i)?.map(Value::Text),
                        Col::Int => row.cell::<Option<i64>>(i)?.map(Value::Int),
                        Col::Small => row.cell::<Option<i32>>(i)?.map(|n| Value::Int(n.into())),
                        Col::Flag => row.cell::<Option<bool>>(i)?.map(Value::Flag),
                    };
                    Ok(cell.unwrap_or(Value::Null))
                });
                cells.collect::<Result<_, StoreError>>().map(Row)
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Answer { rows, matched })
    }

    fn open_session(&self, ttl: Duration) -> Box<dyn Session + '_> {
        Box::new(session::PgSession::new(self, ttl))
    }
}
