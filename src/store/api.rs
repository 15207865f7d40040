//! The boundary between elect and a store, as etcd's Go `concurrency`
//! package draws it: a [`Session`] owns a lease and its renewal; a [`Lock`]
//! borrows a session to hold a place in one lock's queue. One session can
//! queue for several locks at once and keep the first that is its turn.
//!
//! Every call waits on I/O, so the traits use boxed futures and dynamic
//! dispatch: elect works with `dyn Store` and never knows which one.

use std::fmt;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::time::Duration;

use super::Token;
use super::holder::{Check, Holder, HolderRecord, LockStatus, Owner};
use super::records::{Checkpoint, Put, Record};
use crate::clock::Instant;

/// A future a store returns.
pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A connected store.
pub trait Store {
    /// Grant a lease of at least `ttl`, retrying until `within` has passed.
    fn open_session(
        &self,
        ttl: Duration,
        within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>>;

    /// Who holds `lock`, and how many wait, by an up-to-date read.
    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>>;
    /// Who holds `lock`, by an up-to-date read, without what `status`
    /// adds (the waiters, the time left on the lease) where that costs
    /// the store more: a run's look before it asks for a lease, which a
    /// fleet's cron makes on every host at once.
    fn holder<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<Option<Holder>, StoreError>> {
        Box::pin(async move { Ok(self.status(lock).await?.holder) })
    }
    /// A run's look before it asks for a lease (`-n`, `--once-per`):
    /// `record` of `lock` if named, and with `holder` who holds the lock
    /// (as [`Store::holder`]); in one request where the store can.
    fn look<'a>(
        &'a self,
        lock: &'a str,
        record: Option<Record<'a>>,
        holder: bool,
    ) -> Boxed<'a, Result<Look, StoreError>> {
        Box::pin(look_apart(self, lock, record, holder))
    }
    /// Every lock under `prefix` ("" for all) that has a holder or waiters.
    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>>;
    /// Does the holder of `lock` still have `key` and `token`? By the
    /// lock's status, unless the store has a cheaper read.
    fn check<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        token: Token,
    ) -> Boxed<'a, Result<Check, StoreError>> {
        Box::pin(async move {
            let status = self.status(lock).await?;
            Ok(Check::of(lock, key, token, status.holder))
        })
    }
    /// Begin to break `holder`'s tenure of `lock`: with `ask`, write the
    /// request to let go where its elect watches (nothing for a holder
    /// elect did not start). `None` if that holder no longer holds the lock.
    /// The policy (how long to wait, when to end the tenure) is
    /// [`super::breaking`]'s, the same for every store.
    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>>;
    /// The TTL of `holder`'s lease as the store knows it, for a holder that
    /// recorded none (one elect did not start); `None` if it has none.
    fn lease_ttl<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>>;
    /// For each of `locks` (the shards of one lock): held or not, and who
    /// held it last ([`super::records::owners`]: a look at each in turn,
    /// unless the store answers for all in one).
    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(super::records::owners(self, locks))
    }
    /// `record` of `lock`, if it exists, with its version.
    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>>;
    /// Write `record` of `lock` if `fence` holds: the check and the write
    /// are one atomic step in the store.
    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>>;
    /// Delete `record` of `lock`, if it exists.
    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>>;
    /// The locks whose name starts with `prefix` that have a history (a
    /// [`Record::Tenure`]), held or free, in no order: `elect list`'s
    /// inventory of the jobs run there.
    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>>;
    /// The ids of `lock`'s [`Record::Tenure`]s, in no order; with `values`,
    /// each with its value (else an empty one).
    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>>;
}

/// [`Store::look`] by [`Store::record`] and [`Store::holder`], asked at
/// once.
pub async fn look_apart<S: Store + ?Sized>(
    store: &S,
    lock: &str,
    record: Option<Record<'_>>,
    holder: bool,
) -> Result<Look, StoreError> {
    let record = async {
        match record {
            Some(record) => store.record(lock, record).await,
            None => Ok(None),
        }
    };
    let holder = async {
        match holder {
            true => store.holder(lock).await,
            false => Ok(None),
        }
    };
    let (record, holder) = tokio::join!(record, holder);
    Ok(Look {
        record: record?,
        holder: holder?,
    })
}

/// What a run's first look found ([`Store::look`]).
#[derive(Clone, Debug, Default)]
pub struct Look {
    pub record: Option<Versioned>,
    pub holder: Option<Holder>,
}

/// A record's value, and its version: what a [`Fence::Version`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub value: String,
    pub version: u64,
}

/// What must still hold for a record to be written.
#[derive(Clone, Copy, Debug)]
pub enum Fence<'a> {
    /// The holder of `key` still holds the lock with `token`.
    Holder { key: &'a str, token: Token },
    /// The record is still as it was read: this version, or absent.
    Version(Option<u64>),
    /// Nothing: the record is its writer's alone.
    Any,
}

/// A break begun on one holder's tenure ([`Store::begin_break`]).
pub trait Breaking {
    /// Return once the holder's tenure has ended: it let go, or its lease
    /// ended. Unless the store is told of that, by looking every 50 ms
    /// whether the holder still [`Self::held`] the lock.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(crate::store::breaking::until_let_go(self.lock(), || {
            self.held()
        }))
    }
    /// The lock being broken, for what the default [`Self::ended`] logs.
    fn lock(&self) -> &str {
        ""
    }
    /// Whether the holder still holds the lock, as the default
    /// [`Self::ended`] looks. A store that overrides `ended` need not say:
    /// by default never answered, so that no break is taken for done.
    fn held(&self) -> Boxed<'_, Result<bool, StoreError>> {
        Box::pin(std::future::pending())
    }
    /// End the holder's tenure now, so that the next in line may go ahead
    /// (its command may still run until its elect notices).
    fn end(&self) -> Boxed<'_, Result<(), StoreError>>;
    /// After [`Self::end`]: how long the store keeps the next in line out,
    /// for a holder that takes that long to stop once it sees its tenure
    /// ended (`None`: the next may go ahead at once).
    fn keeps_next_out(&self) -> Option<Duration> {
        None
    }
}

/// A lease, renewed by its [`Renewer`]s, under which locks are queued for.
pub trait Session {
    /// The lease as shown in `ELECT_LEASE_ID`.
    fn id(&self) -> String;
    /// What a release from another process needs to end this session
    /// ([`crate::store::Target::release_order`]): its id, unless the store
    /// says otherwise (ZooKeeper: the paths of its lock nodes).
    fn release_token(&self) -> String {
        self.id()
    }
    /// The time-to-live the store granted; `None` if the lease does not
    /// expire by time (it ends when the holder releases it or dies).
    fn ttl(&self) -> Option<Duration>;
    /// When the grant request was sent: the lease is safe from then for `ttl`.
    fn granted_at(&self) -> Instant;
    /// A renewer with its own connection state.
    fn renewer(&self) -> Box<dyn Renewer>;
    /// Join the queue of `lock` under this session, recorded as `record`.
    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>>;
    /// End the lease now, and with it every place it holds, so that the
    /// next waiters go ahead at once.
    fn release(&self) -> Boxed<'_, Result<(), StoreError>>;
    /// How long every renewal waits beyond its round trips, where the
    /// store's protocol makes it wait and that is known now, with why
    /// (ZooKeeper: between its two syncs); `None` if it does not. `rhythm`
    /// is how often the lease is renewed plus its margin: a store that
    /// granted at least that much longer than asked spares the wait.
    fn renewal_waits(&self, _rhythm: Duration) -> Option<(Duration, String)> {
        None
    }
}

/// A place in one lock's queue, held under a session.
pub trait Lock {
    /// The store's name for this holder (`ELECT_KEY`).
    fn key(&self) -> &str;
    /// The place in the queue, where the store orders waiters (etcd: the
    /// key's create revision); 0 where it does not.
    fn rank(&self) -> u64;
    /// Wait until this place is first in line and still there, or until
    /// `until` has passed, after at least one full look at the queue.
    /// Retries transient errors itself; fails with [`ErrorKind::Gone`] if
    /// the place vanished.
    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>>;
    /// Return when the store says this holder is gone ([`Loss::Gone`]) or
    /// asked to let go ([`Loss::Asked`]).
    fn lost(&self) -> Boxed<'_, Loss>;
    /// Leave the queue (or the lock), keeping the session: what a holder
    /// queued for several locks does with the others once one is its own.
    #[allow(dead_code)]
    fn leave(&self) -> Boxed<'_, Result<(), StoreError>>;
    /// Record what the store keeps of a holder beyond its turn (etcd: who
    /// held a shard last), once the lock is ours; beside the command's start.
    fn acquired(&self) -> Boxed<'_, ()> {
        Box::pin(async {})
    }
    /// The lock's checkpoint as of our turn (call it once the lock is ours).
    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>>;
    /// Descriptors that hold the lock and that the guard must keep open until
    /// the command's process group is dead, so that a crash of elect cannot
    /// release the lock while its command still runs.
    fn hold_fds(&self) -> std::io::Result<Vec<OwnedFd>> {
        Ok(Vec::new())
    }
}

/// Renews a lease, one request at a time.
pub trait Renewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>>;
    /// Forget any connection state: the next renewal starts afresh.
    fn reset(&mut self);
}

/// Wait for the first of `locks` whose turn comes; its index and the turn
/// (`Busy` once every one is still busy at `until`). The others are left
/// as they are: the caller leaves them.
pub async fn first_turn(
    locks: &[Box<dyn Lock + '_>],
    until: Option<Instant>,
) -> Result<(usize, Turn), StoreError> {
    use std::task::Poll;
    let mut waits: Vec<Option<Boxed<'_, _>>> = locks
        .iter()
        .map(|lock| Some(lock.wait_turn(until)))
        .collect();
    std::future::poll_fn(|cx| {
        for (i, slot) in waits.iter_mut().enumerate() {
            let Some(wait) = slot else { continue };
            match wait.as_mut().poll(cx) {
                Poll::Ready(Ok(Turn::Busy)) => *slot = None,
                Poll::Ready(result) => return Poll::Ready(result.map(|turn| (i, turn))),
                Poll::Pending => {}
            }
        }
        match waits.iter().all(Option::is_none) {
            true => Poll::Ready(Ok((0, Turn::Busy))),
            false => Poll::Pending,
        }
    })
    .await
}

/// How waiting in the queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// First in line: the lock is ours, with a fencing `token` strictly
    /// greater than every earlier holder's. `taken`: where the lock is a
    /// record with an expiry of its own (a row), the send time of the
    /// earliest request that may have taken it, from which that expiry
    /// counts ([`crate::lease::Keeper::taken`]); `None` where the lock
    /// lives exactly as long as the session's lease.
    First {
        token: Token,
        taken: Option<Instant>,
    },
    /// Still behind someone when the wait ran out.
    Busy,
}

/// Why the lease is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Someone asked the holder to let go (`elect break`), for this reason.
    /// The lease is still good, so the command gets its whole grace.
    Asked(String),
    /// The store ended the lease, for this reason: another holder may
    /// already run, so the command gets little or no grace.
    Gone(String),
    /// No renewal was confirmed in time.
    Expired { last_confirmed: Instant },
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Asked(why) | Loss::Gone(why) => f.write_str(why),
            Loss::Expired { last_confirmed } => write!(
                f,
                "no renewal was confirmed in time (the last one was sent {} ago)",
                crate::clock::show(last_confirmed.elapsed())
            ),
        }
    }
}

/// What a renewal found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease lives on; the store's time-to-live for it.
    Alive(Duration),
    /// The lease is gone, and why.
    Gone(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The store cannot be reached or refused the request.
    Unavailable,
    /// The store location or its settings are wrong.
    Config,
    /// Our lease or our key vanished.
    Gone,
    /// The store refused the user elect reached it as: its credentials, or
    /// a permission it lacks. Asking again would not help; the operator
    /// must fix the credentials or grant the permission.
    Denied,
    /// The store refused for load (an API server's 429 Too Many
    /// Requests): it is up, and asks to be asked again, after
    /// `again_after` where it said when. Worth another try within the
    /// bound, each asker at a moment of its own
    /// ([`crate::backoff::at_least`]), never at once.
    Crowded { again_after: Option<Duration> },
    /// The store went back in time ([`super::rewind`]): a token taken now
    /// could be at or below one already handed out.
    Rewound,
    /// This machine could not give elect what the request needed: a
    /// descriptor, the open-file limit being reached. Not the store's
    /// doing, and asking again would not help.
    Local,
}

#[derive(Clone, Debug)]
pub struct StoreError {
    pub kind: ErrorKind,
    pub message: String,
}

impl StoreError {
    pub fn unavailable(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Unavailable,
            message: message.into(),
        }
    }
    /// Refused for load; `again_after`: when the store asked to be asked again.
    pub fn crowded(message: impl Into<String>, again_after: Option<Duration>) -> Self {
        StoreError {
            kind: ErrorKind::Crowded { again_after },
            message: message.into(),
        }
    }
    /// Whether another try may get through: the store could not be
    /// reached, or refused for load.
    pub fn passing(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Unavailable | ErrorKind::Crowded { .. }
        )
    }
    /// The pause before another try after this error: if the store
    /// refused for load, at least what it asked for, spread at random
    /// ([`crate::backoff::at_least`]), or one of `backoff`'s, jittered,
    /// where it did not say; else `backoff`'s next.
    pub fn pause(&self, backoff: &mut crate::backoff::Backoff) -> Duration {
        match self.kind {
            ErrorKind::Crowded {
                again_after: Some(asked),
            } => crate::backoff::at_least(asked),
            ErrorKind::Crowded { again_after: None } => backoff.jittered(),
            _ => backoff.pause(),
        }
    }
    pub fn config(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Config,
            message: message.into(),
        }
    }
    /// [`StoreError::config`] about the I/O error `e` (a file that cannot
    /// be read or written), unless `e` says a descriptor could not be had.
    pub fn config_io(e: &std::io::Error, message: impl Into<String>) -> Self {
        match crate::descriptors::of_io(e) {
            Some(errno) => StoreError::out_of_descriptors(errno),
            None => StoreError::config(message),
        }
    }
    pub fn denied(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Denied,
            message: message.into(),
        }
    }
    pub fn rewound(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Rewound,
            message: message.into(),
        }
    }
    /// A descriptor could not be had (`errno` EMFILE or ENFILE).
    pub fn out_of_descriptors(errno: i32) -> Self {
        StoreError {
            kind: ErrorKind::Local,
            message: crate::descriptors::message(errno),
        }
    }
    /// [`StoreError::out_of_descriptors`], if that is what `e` or one of
    /// its sources says.
    pub fn descriptors_in(e: &(dyn std::error::Error + 'static)) -> Option<Self> {
        crate::descriptors::in_chain(e).map(StoreError::out_of_descriptors)
    }
    pub fn gone(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Gone,
            message: message.into(),
        }
    }
}

/// `text`, then each cause of `e` that it does not already say, on one
/// line: clients' transport errors say what went wrong only in their
/// sources.
pub fn with_causes(mut text: String, e: &(dyn std::error::Error + 'static)) -> String {
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
