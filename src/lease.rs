//! The lease loop: when to renew, and until when a confirmed renewal keeps
//! the lease safe.
//!
//! The store cannot tell a paused or partitioned holder that its lease
//! expired, so elect judges expiry itself, on its own clock, from the moment
//! it SENT the renewal whose reply confirmed the lease: the store started
//! counting no earlier than that. Counting from the reply's arrival (as Go's
//! client does) would let elect believe in a lease the store already dropped.
//!
//! ```text
//!  sent ──TTL/3──▶ next sent ──▶ its answer … stop_at ── grace ── deadline ── margin ── sent + TTL
//!                                             first signal        SIGKILL
//! ```
//!
//! The margin covers the difference in clock rates between this machine and
//! the store's, and the time the kernel takes to kill a process group:
//! 1/50 of the TTL plus 50 ms.
//!
//! An answer that comes late still counts, from its own send time: a
//! renewal unanswered after TTL/6 gets another beside it, over another
//! connection, and both are awaited. So the lease survives any round trip
//! that brings the answer to the next renewal, sent TTL/3 after the last
//! confirmed one, before the stop time: a round trip shorter than
//! TTL − TTL/3 − grace − margin, with the default grace TTL/3 − margin
//! (263 ms at a 1 s TTL, 890 ms at 3 s). A request is given up only when a
//! third is due, at least TTL/3 after it was sent, so no longer round trip
//! can keep the lease, whatever the grace.
//!
//! A lock that lives in a record with an expiry of its own (a row) is
//! renewed with the session, but a renewal sent while the request that took
//! it was on its way may have missed it. So until a renewal sent after that
//! request's answer is confirmed, no deadline counts past the taking
//! request's own send time plus the TTL ([`Keeper::taken`]): the rule is
//! here, once, not kept apart by each store.
//!
//! This module knows no store and no child.

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::clock::{Instant, show, sleep_until};
use crate::log;
use crate::store::{ErrorKind, Loss, Renewal, Renewer, Session, StoreError};

/// The grace of a command whose lease the store already ended (revoked,
/// expired on the server, key deleted): another holder may already run.
pub const GONE_GRACE: Duration = Duration::from_millis(100);

/// The shortest lease elect asks for: stores grant whole seconds.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longer leases mean hours of waiting after a crash: surely a typo.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// TTL and grace, checked to fit together.
/// Why `--ttl` and `--grace` cannot be a lease's timing: a usage error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("--ttl {} is too short; the minimum is 1s", show(*.0))]
    TtlTooShort(Duration),
    #[error("--ttl {} is too long; the maximum is 24h", show(*.0))]
    TtlTooLong(Duration),
    #[error("--grace must be longer than zero; use --signal KILL to kill at once")]
    NoGrace,
    /// The first signal must come after at least one renewal retry.
    #[error(
        "--grace {} does not fit in --ttl {}: it must be shorter than {} \
         (TTL minus the renewal interval TTL/3 minus the safety margin); \
         shorten --grace or lengthen --ttl",
        show(*grace), show(*ttl), show(*room)
    )]
    GraceDoesNotFit {
        grace: Duration,
        ttl: Duration,
        room: Duration,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    ttl: Duration,
    grace: Duration,
}

impl Timing {
    /// Check `--ttl` and `--grace` (default TTL/3) together.
    pub fn new(ttl: Duration, grace: Option<Duration>) -> Result<Self, TimingError> {
        if ttl < MIN_TTL {
            return Err(TimingError::TtlTooShort(ttl));
        }
        if ttl > MAX_TTL {
            return Err(TimingError::TtlTooLong(ttl));
        }
        let grace = grace.unwrap_or(ttl / 3);
        if grace.is_zero() {
            return Err(TimingError::NoGrace);
        }
        let timing = Timing { ttl, grace };
        // The first signal must come after at least one renewal retry, or a
        // single lost packet would stop the child.
        let room = ttl.saturating_sub(timing.renew_every() + timing.margin());
        if grace >= room {
            return Err(TimingError::GraceDoesNotFit { grace, ttl, room });
        }
        Ok(timing)
    }

    /// Use the smaller of what was asked and what the store granted.
    pub fn granted(self, granted: Duration) -> Self {
        Timing {
            ttl: self.ttl.min(granted),
            ..self
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// How long a renewal may go unanswered before another is sent beside it.
    pub fn attempt_timeout(&self) -> Duration {
        (self.renew_every() / 2).max(Duration::from_millis(100))
    }

    pub fn margin(&self) -> Duration {
        self.ttl / 50 + Duration::from_millis(50)
    }

    /// Until when a renewal sent at `sent`, confirmed with `ttl`, keeps the lease safe.
    pub fn deadline(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + self.ttl.min(ttl) - self.margin()
    }

    /// When the child gets the first signal if no renewal confirms the lease first.
    pub fn stop_at(&self, deadline: Instant) -> Instant {
        deadline - self.grace
    }

    /// How long the renewal sent TTL/3 after the last confirmed one may
    /// take to be answered: until the stop time that confirmation set.
    pub fn answer_within(&self) -> Duration {
        let confirmed = Instant::from_nanos(1_000_000_000_000);
        let stop_at = self.stop_at(self.deadline(confirmed, self.ttl));
        stop_at.since(confirmed + self.renew_every())
    }

    /// Whether, at `now`, a renewal that was due is still unconfirmed for a
    /// lease safe until `deadline`: its stop time is nearer than the time
    /// the renewal sent a renewal interval after the last confirmed one may
    /// take. (Renewals answered at once leave between that and a renewal
    /// interval more.)
    pub fn overdue(&self, deadline: Instant, now: Instant) -> bool {
        self.stop_at(deadline) < now + self.answer_within()
    }

    /// A store whose renewal `waits` (beyond its round trips) cannot keep
    /// the lease with this timing: say so, and what would do.
    pub fn refuse_renewal_wait(&self, waits: Duration, why: &str) -> Option<String> {
        if waits < self.answer_within() {
            return None;
        }
        let enough = (1..=MAX_TTL.as_secs() * 10)
            .map(|tenths| Duration::from_millis(100 * tenths))
            .find(|&ttl| Timing::new(ttl, None).is_ok_and(|t| waits < t.answer_within()));
        let lengthen = match enough {
            Some(ttl) => format!("lengthen --ttl to {} or more", show(ttl)),
            None => "lengthen --ttl".into(),
        };
        Some(format!(
            "--ttl {} with --grace {} is too short for this store: {why}, and \
             it must be answered within {} (TTL less the renewal interval TTL/3, the grace and \
             the safety margin); {lengthen}, or shorten --grace",
            show(self.ttl),
            show(self.grace),
            show(self.answer_within())
        ))
    }
}

/// The deadline of a lease that does not expire by time.
pub const NEVER: Instant = Instant::FAR_FUTURE;

/// What renewing brought.
pub enum Kept {
    /// A confirmed renewal: the lease is safe until this instant.
    Extended(Instant),
    Lost(Loss),
}

/// A session's lease, kept alive: the renewal loop, and the deadline it
/// publishes after each confirmed renewal.
pub struct Keeper {
    /// The loop until it ends; `None` after.
    renewing: Option<Pin<Box<dyn Future<Output = Loss>>>>,
    deadline: watch::Receiver<Instant>,
    taking: Rc<Taking>,
    timing: Timing,
    tally: Rc<Tally>,
}

/// What the renewal loops of a run did, across its sessions: what
/// `elect run --listen` and systemd's watchdog report. Written only by the
/// loop (and by [`Keeper`] as it starts and ends), read by anyone.
#[derive(Default)]
pub struct Tally {
    /// Renewals confirmed.
    pub renewed: Cell<u64>,
    /// Renewals that failed or were given up unanswered.
    pub failed: Cell<u64>,
    /// Requests out, unanswered.
    out: Cell<u64>,
    /// The deadline of the last confirmed renewal (or confirmed place in a
    /// queue), of whichever session had it; `None` before the first and
    /// after a session ended with its lease still safe.
    safe_until: Cell<Option<Instant>>,
    /// When the live loop's next request is due; `None` while no loop runs.
    due: Cell<Option<Instant>>,
    /// The live loop's renewal interval.
    every: Cell<Duration>,
}

impl Tally {
    /// A lease was confirmed safe until `deadline` by other means than a
    /// renewal (a place in the queue, which the store gave under it).
    pub fn confirmed(&self, deadline: Instant) {
        self.safe_until.set(Some(deadline));
    }

    /// The session ended, released by elect: if its lease was still safe,
    /// nothing failed.
    pub fn released(&self) {
        if self.safe_until.get().is_some_and(|d| d > Instant::now()) {
            self.safe_until.set(None);
        }
    }

    /// The session's renewals are no longer run (its lock was lost, or its
    /// command ended and the session is on its way to be released): its
    /// loop is not wedged for not sending them.
    pub fn retired(&self) {
        self.due.set(None);
    }

    /// The lease expired: what is still out is given up with it.
    pub fn expired(&self) {
        self.failed.set(self.failed.get() + self.out.take());
    }

    /// Until when the last confirmation keeps a lease safe.
    pub fn safe_until(&self) -> Option<Instant> {
        self.safe_until.get()
    }

    /// Why the renewals are not well, if they are not: the last confirmed
    /// deadline passed with none since, or the loop has not sent a request
    /// due more than a renewal interval ago (it is not being run).
    pub fn unwell(&self) -> Option<String> {
        let now = Instant::now();
        if let Some(deadline) = self.safe_until.get()
            && deadline <= now
        {
            return Some(format!(
                "no renewal confirmed the lease since its deadline {} ago",
                show(now.since(deadline))
            ));
        }
        match self.due.get() {
            Some(due) if due + self.every.get() < now => Some(format!(
                "the renewal loop is wedged: a renewal due {} ago was not sent",
                show(now.since(due))
            )),
            _ => None,
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.tally.due.set(None);
        self.tally.out.set(0);
    }
}

/// A lock taken by a request of its own, as the renewal loop must know it.
#[derive(Default)]
pub struct Taking {
    /// The taking request's send time, and when its answer was known.
    taken: Cell<Option<(Instant, Instant)>>,
    /// Told when a lock is taken.
    told: Notify,
}

impl Taking {
    /// `deadline` no later than the taken lock's own, while it caps it.
    fn cap(&self, timing: Timing, ttl: Duration, deadline: Instant) -> Instant {
        match self.taken.get() {
            Some((sent, _)) => deadline.min(timing.deadline(sent, ttl)),
            None => deadline,
        }
    }

    /// A renewal sent at `sent` was confirmed: if it left after the taking
    /// request's answer, it renewed the taken lock too.
    fn renewed(&self, sent: Instant) {
        if self
            .taken
            .get()
            .is_some_and(|(_, answered)| sent >= answered)
        {
            self.taken.set(None);
        }
    }
}

impl Keeper {
    /// Start renewing `session`'s lease with `timing`, adjusted to the TTL
    /// the store granted.
    pub fn start(session: &dyn Session, timing: Timing, tally: Rc<Tally>) -> Keeper {
        let (timing, first) = match session.ttl() {
            Some(ttl) => {
                let timing = timing.granted(ttl);
                (timing, timing.deadline(session.granted_at(), ttl))
            }
            None => (timing, NEVER),
        };
        let (tx, deadline) = watch::channel(first);
        let renewers = [session.renewer(), session.renewer()];
        let granted_at = session.granted_at();
        let taking = Rc::new(Taking::default());
        let theirs = taking.clone();
        tally.every.set(timing.renew_every());
        let counts = tally.clone();
        let renewing =
            async move { keep(renewers, timing, granted_at, &tx, &theirs, &counts).await };
        Keeper {
            renewing: Some(Box::pin(renewing)),
            deadline,
            taking,
            timing,
            tally,
        }
    }

    /// The place in the queue, asked for under this lease, was given: the
    /// lease is confirmed until its deadline as of now.
    pub fn queued(&self) {
        self.tally.confirmed(self.deadline());
    }

    /// The lock just won was taken by a request sent at `sent`, into a
    /// record with an expiry of its own: see the module's doc.
    pub fn taken(&mut self, sent: Instant) {
        self.taking.taken.set(Some((sent, Instant::now())));
        self.taking.told.notify_one();
    }

    /// Until when the lease is safe, as of the last confirmed renewal.
    pub fn deadline(&self) -> Instant {
        self.taking
            .cap(self.timing, self.timing.ttl(), *self.deadline.borrow())
    }

    /// Whether a renewal due by now is still unconfirmed: a command started
    /// now would have less than a renewal's answer time before its stop.
    pub fn overdue(&self) -> bool {
        self.timing.overdue(self.deadline(), Instant::now())
    }

    /// The next thing the renewals bring: a later deadline, or the loss
    /// of the lease (once; then nothing ever again).
    pub async fn next(&mut self) -> Kept {
        let Some(renewing) = self.renewing.as_mut() else {
            return std::future::pending().await;
        };
        let loss = tokio::select! {
            biased;
            Ok(()) = self.deadline.changed() => {
                return Kept::Extended(*self.deadline.borrow_and_update());
            }
            loss = renewing => loss,
        };
        self.renewing = None;
        Kept::Lost(loss)
    }

    /// Why the lease was lost, when it is (later deadlines are taken in
    /// passing).
    pub async fn lost(&mut self) -> Loss {
        loop {
            if let Kept::Lost(loss) = self.next().await {
                return loss;
            }
        }
    }
}

/// One renewal request on its way: when it was sent, and its answer.
struct Flight<'a> {
    sent: Instant,
    answer: Pin<Box<dyn Future<Output = Result<Renewal, StoreError>> + 'a>>,
}

impl<'a> Flight<'a> {
    /// The renewer stays borrowed while the request is out: it can be used
    /// or reset again only once the flight has landed or been dropped.
    #[allow(clippy::await_holding_refcell_ref)]
    fn send(renewer: &'a RefCell<Box<dyn Renewer>>) -> Self {
        Flight {
            sent: Instant::now(),
            answer: Box::pin(async move { renewer.borrow_mut().renew().await }),
        }
    }
}

/// The first answer to arrive, with its slot (now empty) and send time.
/// Pending for ever while nothing is out.
async fn landing(
    flights: &mut [Option<Flight<'_>>; 2],
) -> (usize, Instant, Result<Renewal, StoreError>) {
    std::future::poll_fn(|cx| {
        for (i, slot) in flights.iter_mut().enumerate() {
            if let Some(flight) = slot
                && let Poll::Ready(answer) = flight.answer.as_mut().poll(cx)
            {
                let sent = flight.sent;
                *slot = None;
                return Poll::Ready((i, sent, answer));
            }
        }
        Poll::Pending
    })
    .await
}

/// Renew the lease until it is lost; publish each new deadline on `deadline`.
///
/// Renewals go out every TTL/3 through one of two renewers, each on its own
/// connection. A request unanswered after TTL/6 gets another beside it
/// through the other renewer (reset first, unless it had an answer since
/// the first left), and is still awaited: whichever is answered first
/// counts, from its own send time, and its renewer goes first next time.
/// So a slow link costs nothing as long as answers come before the stop
/// time. When both requests are out and a third is due, the older is given
/// up and its renewer reset: a late answer on that stream must never count
/// for a later send. A failed request is retried after a short backoff, its
/// renewer reset and last in line. Returns when the store says the lease is
/// gone, or when the stop time passes without a confirmed renewal.
pub async fn keep(
    renewers: [Box<dyn Renewer>; 2],
    timing: Timing,
    granted_at: Instant,
    deadline: &watch::Sender<Instant>,
    taking: &Taking,
    tally: &Tally,
) -> Loss {
    let renewers = renewers.map(RefCell::new);
    // The second starts on a connection of its own: a retry must not wait
    // behind the same dead one.
    renewers[1].borrow_mut().reset();
    let mut book = Book::new(&renewers, timing, granted_at, tally);
    loop {
        let stop_at = timing.stop_at(*deadline.borrow());
        tally.due.set(Some(book.next));
        tokio::select! {
            biased;
            () = sleep_until(stop_at) => {
                tally.expired();
                return Loss::Expired { last_confirmed: book.last_confirmed };
            }
            (i, sent, answer) = landing(&mut book.flights) => {
                tally.out.set(tally.out.get().saturating_sub(1));
                if let Some(loss) = book.answered(i, sent, answer, deadline, taking) {
                    return loss;
                }
            }
            () = sleep_until(book.next) => book.send_next(),
            () = taking.told.notified() => {
                let capped = taking.cap(timing, timing.ttl(), *deadline.borrow());
                deadline.send_if_modified(|d| {
                    let lower = capped < *d;
                    *d = capped;
                    lower
                });
            }
        }
    }
}

/// The renewal loop's state: what is out, what was heard, what is next.
struct Book<'a> {
    renewers: &'a [RefCell<Box<dyn Renewer>>; 2],
    timing: Timing,
    flights: [Option<Flight<'a>>; 2],
    /// When each renewer last had an answer.
    heard: [Instant; 2],
    /// The renewer to use first.
    first: usize,
    last_sent: Instant,
    last_confirmed: Instant,
    next: Instant,
    backoff: crate::backoff::Backoff,
    tally: &'a Tally,
}

impl<'a> Book<'a> {
    const FIRST_BACKOFF: Duration = Duration::from_millis(50);

    fn new(
        renewers: &'a [RefCell<Box<dyn Renewer>>; 2],
        timing: Timing,
        granted_at: Instant,
        tally: &'a Tally,
    ) -> Self {
        Book {
            renewers,
            timing,
            flights: [None, None],
            heard: [granted_at; 2],
            first: 0,
            last_sent: granted_at,
            last_confirmed: granted_at,
            next: granted_at + timing.renew_every(),
            // At most half a renewal's period: a retry still comes before
            // the next renewal is due.
            backoff: crate::backoff::Backoff::new(Self::FIRST_BACKOFF, timing.renew_every() / 2),
            tally,
        }
    }

    /// Renewer `i` answered the request sent at `sent`. The loss, if this
    /// is one.
    fn answered(
        &mut self,
        i: usize,
        sent: Instant,
        answer: Result<Renewal, StoreError>,
        deadline: &watch::Sender<Instant>,
        taking: &Taking,
    ) -> Option<Loss> {
        let renewal = match answer {
            Ok(Renewal::Gone(why)) => return Some(Loss::Gone(why)),
            Ok(renewal) => renewal,
            Err(e) => {
                self.failed(i, sent, &e, self.timing.stop_at(*deadline.borrow()));
                return None;
            }
        };
        self.heard[i] = Instant::now();
        if let Renewal::Alive(ttl) = renewal {
            taking.renewed(sent);
            let new = taking.cap(self.timing, ttl, self.timing.deadline(sent, ttl));
            if new > *deadline.borrow() {
                deadline.send_replace(new);
                log::verbose(format_args!(
                    "lease renewed, answered in {}; safe for {}",
                    show(Instant::now().since(sent)),
                    show(new.remaining())
                ));
            }
            let tally = self.tally;
            tally.renewed.set(tally.renewed.get() + 1);
            tally.confirmed(*deadline.borrow());
        }
        // An answer to an older request than one already confirmed
        // changes nothing.
        if sent > self.last_confirmed {
            self.last_confirmed = sent;
            self.next = sent + self.timing.renew_every();
            self.first = i;
            self.backoff.reset();
        }
        None
    }

    /// Renewer `i` failed the request sent at `sent`: reset it, put it
    /// last, and retry soon, unless a newer request is out. A store that
    /// refused for load is asked again once the pause it asked for has
    /// passed, spread at random, but never so late that no try is left
    /// before `stop_at`: half of what is left at most.
    fn failed(&mut self, i: usize, sent: Instant, e: &StoreError, stop_at: Instant) {
        self.tally.failed.set(self.tally.failed.get() + 1);
        self.renewers[i].borrow_mut().reset();
        self.first = 1 - i;
        if sent == self.last_sent {
            let pause = match e.kind {
                ErrorKind::Crowded { .. } => {
                    e.pause(&mut self.backoff).min(stop_at.remaining() / 2)
                }
                _ => self.backoff.pause(),
            };
            log::verbose(format_args!(
                "renewal failed, retrying in {}: {e}",
                show(pause)
            ));
            self.next = Instant::now() + pause;
        } else {
            log::verbose(format_args!("an earlier renewal failed: {e}"));
        }
    }

    /// Send the next request, through the first renewer that has none out,
    /// else instead of the older request.
    fn send_next(&mut self) {
        let older = match (&self.flights[0], &self.flights[1]) {
            (Some(a), Some(b)) if b.sent < a.sent => 1,
            _ => 0,
        };
        let i = [self.first, 1 - self.first]
            .into_iter()
            .find(|&i| self.flights[i].is_none())
            .unwrap_or(older);
        if self.last_sent > self.last_confirmed {
            log::verbose(format_args!(
                "renewal unanswered after {}; sending another over another connection",
                show(Instant::now().since(self.last_sent))
            ));
        }
        // Given up on, or silent since the unanswered request left: its
        // connection may be as dead as that one's.
        let silent = self.last_sent > self.last_confirmed && self.heard[i] < self.last_sent;
        let given_up = self.flights[i].take().is_some();
        let tally = self.tally;
        if given_up {
            tally.failed.set(tally.failed.get() + 1);
            tally.out.set(tally.out.get().saturating_sub(1));
        }
        if given_up || silent {
            self.renewers[i].borrow_mut().reset();
        }
        let flight = Flight::send(&self.renewers[i]);
        tally.out.set(tally.out.get() + 1);
        self.last_sent = flight.sent;
        self.flights[i] = Some(flight);
        self.next = self.last_sent + self.timing.attempt_timeout();
    }
}

#[cfg(test)]
mod tests;
