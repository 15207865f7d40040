//! One lease row per lock in a SQL database, written once for every SQL
//! store: the rows, records, status and breaking, and the session that
//! holds rows and renews them. What differs between databases (statements,
//! how values are bound and read back, which errors mean what, how a
//! waiter is woken, the connection) is a [`Dialect`]'s, as Curator keeps
//! one lock algorithm and varies its driver.
//!
//! A row is never deleted: its `tenure` names its holder (the session's
//! id, fresh for each `elect run`), its `fence` grows by one for each new
//! holder (the token), `expires_at` is by the database's clock, and
//! `renewals` names each renewal, so that a waiter can tell a row it has
//! seen unchanged for a TTL ([`crate::store::observed`]).

pub mod lock;
mod rows;
pub mod session;
pub mod store;
pub mod take;
pub mod target;

use std::time::Duration;

use crate::store::{Session, StoreError};
pub use rows::{Answer, Arg, Cell, Row};
pub use session::{Shared, Version, key};
pub use store::LeaseRows;
pub use target::TlsMode;

/// What the core asks of a database, by name: each dialect has its
/// statement for it and places the arguments, given in the order each
/// variant names, as its statement wants them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// lock: fence, tenure, holder record, ms left (NULL: free), the
    /// holder's TTL in ms, live waiters.
    Status,
    /// prefix: as [`Op::Status`], and the lock's name seventh, for every
    /// lock with a holder or waiters.
    List,
    /// lock, record: as [`Op::Status`] without the TTL and the waiters
    /// (NULL, 0), then the record's value and version: a run's first look.
    Look,
    /// lock, tenure, request: ask the holder to let go (any row matched:
    /// asked).
    Ask,
    /// lock, tenure: end a holder's lease now.
    End,
    /// lock: its checkpoint, the token that wrote it, when.
    Checkpoint,
    /// lock, tenure, fence, value: the checkpoint stored if the tenure
    /// holds the row with that fence.
    PutCheckpoint,
    /// lock, record: its value and version.
    Record,
    /// lock, record, value, tenure, fence: written if the tenure holds the
    /// lock with that fence.
    PutRecordHeld,
    /// lock, record, value: written if there is none.
    PutRecordNew,
    /// lock, record, value, version: written if still that version.
    PutRecordVersion,
    /// lock, record, value: written whatever was there.
    PutRecordAny,
    /// lock, record.
    DeleteRecord,
    /// lock, the history's prefix, with values: each tenure's id and value.
    Tenures,
    /// the locks' prefix, the history's prefix: the locks with a history.
    Recorded,
    /// lock, count: the shard count recorded in the row unless one is
    /// (the count recorded, where the statement says).
    RecordShards,
    /// lock: the shard count recorded.
    Shards,
    /// lock: its last holder's identity.
    Last,
    /// locks: for each lock that has a row, its name, whether it is held
    /// now, and its last holder's identity.
    Owners,
}

/// The shape of a column the core reads back: each dialect reads it as
/// such, and a column of another type is a one-line error (exit 78), as a
/// table another program made would give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    Text,
    /// A 64-bit number.
    Int,
    /// A 32-bit number (the shard count's column).
    Small,
    Flag,
}

impl Op {
    /// The columns its statement answers with, as the core reads them.
    pub fn columns(self) -> &'static [Col] {
        use Col::*;
        match self {
            Op::Status => &[Int, Text, Text, Int, Int, Int],
            Op::List => &[Int, Text, Text, Int, Int, Int, Text],
            Op::Look => &[Int, Text, Text, Int, Int, Int, Text, Int],
            Op::Checkpoint => &[Text, Int, Text],
            Op::Record => &[Text, Int],
            Op::Tenures => &[Text, Text],
            Op::Recorded | Op::Last => &[Text],
            Op::RecordShards | Op::Shards => &[Small],
            Op::Owners => &[Text, Flag, Text],
            Op::PutCheckpoint
            | Op::PutRecordHeld
            | Op::PutRecordNew
            | Op::PutRecordVersion
            | Op::PutRecordAny => &[Flag],
            Op::Ask | Op::End | Op::DeleteRecord => &[],
        }
    }
}

/// A dialect's statement for each [`Op`], one a field.
pub struct Statements {
    pub status: String,
    pub list: String,
    pub look: String,
    pub ask: String,
    pub end: String,
    pub checkpoint: String,
    pub put_checkpoint: String,
    pub record: String,
    pub put_record_held: String,
    pub put_record_new: String,
    pub put_record_version: String,
    pub put_record_any: String,
    pub delete_record: String,
    pub tenures: String,
    pub recorded: String,
    pub record_shards: String,
    pub shards: String,
    pub last: String,
    pub owners: String,
}

impl Statements {
    pub fn of(&self, op: Op) -> &str {
        match op {
            Op::Status => &self.status,
            Op::List => &self.list,
            Op::Look => &self.look,
            Op::Ask => &self.ask,
            Op::End => &self.end,
            Op::Checkpoint => &self.checkpoint,
            Op::PutCheckpoint => &self.put_checkpoint,
            Op::Record => &self.record,
            Op::PutRecordHeld => &self.put_record_held,
            Op::PutRecordNew => &self.put_record_new,
            Op::PutRecordVersion => &self.put_record_version,
            Op::PutRecordAny => &self.put_record_any,
            Op::DeleteRecord => &self.delete_record,
            Op::Tenures => &self.tenures,
            Op::Recorded => &self.recorded,
            Op::RecordShards => &self.record_shards,
            Op::Shards => &self.shards,
            Op::Last => &self.last,
            Op::Owners => &self.owners,
        }
    }
}

/// How the core needs a statement sent, as to elect's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A read, or a removal: without the tables there is nothing, and
    /// nothing is created.
    Read,
    /// A write that needs the tables: created first where missing.
    Write,
    /// Sent as it is.
    Plain,
}

/// What one database does its own way.
#[allow(async_fn_in_trait)]
pub trait Dialect: Sized {
    /// Send `op` with `args`; see [`Access`].
    async fn send(&self, op: Op, access: Access, args: &[Arg<'_>]) -> Result<Answer, StoreError>;

    /// A session of `ttl` on this database.
    fn open_session(&self, ttl: Duration) -> Box<dyn Session + '_>;
}
