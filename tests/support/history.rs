//! The history of a fault-injection run, and the properties checked over it.
//!
//! Everything that happens is logged with a wall-clock timestamp: every
//! request the fenced register saw, every child start (a grant) and death,
//! every fault the nemesis injected, every exit of an elect and every line
//! elect printed. All processes run on this one machine, so the timestamps
//! of different processes compare. The checkers then read the history
//! rather than trusting what happened to be observed while it ran, and a
//! failure shows the part of the history around the violation.
//!
//! What each property means:
//!
//! 1. *tokens*: every grant has its own token, and tokens rise in the order
//!    the children started.
//! 2. *fencing*: the register never accepted a token lower than one it had
//!    accepted before. This is what the token is for, and it must hold
//!    under every fault, pauses included.
//! 3. *exclusion*: no two children of the lock were alive at the same time,
//!    unless the older one had been paused (SIGSTOP of its elect, guard and
//!    group: the GC-pause case, which no lease can rule out). Evidence of an
//!    overlap is any of: the lifetimes (start timestamp to pidfd death)
//!    intersect; an older child was still alive when a newer child's first
//!    line arrived; the register rejected a write from a child that was
//!    never paused (it wrote after a newer holder had written).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;

use super::{ms, now_ns};

#[derive(Clone, Debug, PartialEq)]
pub enum What {
    /// A child's first line: it started with this token at `at`.
    /// `older_alive`: children still alive when the line arrived.
    Grant {
        label: String,
        token: u64,
        pid: i32,
        older_alive: Vec<i32>,
    },
    /// A request to the register, at the time it arrived.
    Write {
        label: String,
        token: u64,
        pid: i32,
        seq: u64,
        accepted: bool,
        /// The highest token accepted before this request.
        highest: u64,
    },
    /// A child died (`exact`: seen by its pidfd; otherwise it was gone
    /// before it could be watched, and `at` is an upper bound).
    Death { pid: i32, exact: bool },
    /// The nemesis injected a fault. `paused`: the child it paused, if any.
    Fault {
        kind: &'static str,
        detail: String,
        paused: Option<i32>,
    },
    /// The nemesis ended a fault.
    Heal { detail: String },
    /// An elect exited (the supervisor restarts it).
    Exit { label: String, status: String },
    /// A line elect printed on stderr.
    Said { label: String, line: String },
    /// A remark of the test itself.
    Note { text: String },
}

#[derive(Clone, Debug)]
pub struct Event {
    pub at: i128,
    pub what: What,
}

pub struct History {
    pub origin: i128,
    events: Mutex<Vec<Event>>,
}

impl History {
    pub fn new() -> History {
        History {
            origin: now_ns(),
            events: Mutex::new(Vec::new()),
        }
    }

    pub fn log_at(&self, at: i128, what: What) {
        self.events.lock().unwrap().push(Event { at, what });
    }

    pub fn log(&self, what: What) {
        self.log_at(now_ns(), what);
    }

    pub fn note(&self, text: impl Into<String>) {
        self.log(What::Note { text: text.into() });
    }

    /// Everything so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self.events.lock().unwrap().clone();
        events.sort_by_key(|e| e.at);
        events
    }

    /// Seconds since the history began, for reading.
    pub fn clock(&self, at: i128) -> String {
        format!("{:+9.3}s", (at - self.origin) as f64 / 1e9)
    }

    /// The events between `from` and `to` (ns), one per line, at most
    /// `limit` lines; runs of writes from one child are folded.
    pub fn excerpt(&self, from: i128, to: i128, limit: usize) -> String {
        let mut out = Vec::new();
        let mut folded: Option<(i32, bool, usize)> = None;
        for e in self.events().iter().filter(|e| e.at >= from && e.at <= to) {
            if let What::Write { pid, accepted, .. } = e.what {
                if let Some((p, a, n)) = &mut folded
                    && *p == pid
                    && *a == accepted
                {
                    *n += 1;
                    continue;
                }
                if let Some((_, _, n)) = folded.take()
                    && n > 0
                {
                    out.push(format!("{:>11}  … and {n} more such writes", ""));
                }
                folded = Some((pid, accepted, 0));
            } else if let Some((_, _, n)) = folded.take()
                && n > 0
            {
                out.push(format!("{:>11}  … and {n} more such writes", ""));
            }
            out.push(format!("{}  {}", self.clock(e.at), e.what));
        }
        if out.len() > limit {
            let cut = out.len() - limit;
            out.drain(limit / 2..limit / 2 + cut);
            out.insert(limit / 2, format!("{:>11}  … {cut} lines left out", ""));
        }
        out.join("\n")
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            What::Grant {
                label,
                token,
                pid,
                older_alive,
            } => {
                write!(f, "GRANT  {label} token={token} child={pid}")?;
                if !older_alive.is_empty() {
                    write!(f, " (older children still alive: {older_alive:?})")?;
                }
                Ok(())
            }
            What::Write {
                label,
                token,
                pid,
                seq,
                accepted,
                highest,
            } => match accepted {
                true => write!(f, "ACCEPT {label} token={token} child={pid} seq={seq}"),
                false => write!(
                    f,
                    "REJECT {label} token={token} child={pid} seq={seq} (highest seen {highest})"
                ),
            },
            What::Death { pid, exact: true } => write!(f, "DIED   child={pid}"),
            What::Death { pid, exact: false } => {
                write!(f, "DIED   child={pid} (already gone when first seen)")
            }
            What::Fault {
                kind,
                detail,
                paused,
            } => {
                write!(f, "FAULT  {kind}: {detail}")?;
                if let Some(p) = paused {
                    write!(f, " (child {p} paused)")?;
                }
                Ok(())
            }
            What::Heal { detail } => write!(f, "HEAL   {detail}"),
            What::Exit { label, status } => write!(f, "EXIT   {label} elect {status}"),
            What::Said { label, line } => write!(f, "SAID   {label}: {line}"),
            What::Note { text } => write!(f, "NOTE   {text}"),
        }
    }
}

/// A property that does not hold: which, why, and when (for the excerpt).
#[derive(Debug)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
    pub from: i128,
    pub to: i128,
}

/// One child of the lock, from its grant to its death.
#[derive(Clone, Debug)]
pub struct Life {
    pub label: String,
    pub pid: i32,
    pub token: u64,
    pub start: i128,
    pub death: Option<i128>,
    pub paused: bool,
}

/// What the checkers measured, for the summary.
#[derive(Debug, Default)]
pub struct Figures {
    pub grants: usize,
    pub accepted: usize,
    pub rejected: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub exits: BTreeMap<String, usize>,
    /// Pairs of children alive at once because the older one was paused.
    pub paused_overlaps: usize,
    pub max_paused_overlap_ms: f64,
    /// The shortest time from one child's death to the next one's start,
    /// over handovers where nobody was paused.
    pub min_handover_ms: Option<f64>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "faults injected: {:?}", self.faults)?;
        writeln!(f, "elect exits: {:?}", self.exits)?;
        writeln!(
            f,
            "grants: {}; register writes accepted: {}, rejected: {}",
            self.grants, self.accepted, self.rejected
        )?;
        write!(
            f,
            "overlaps under pauses: {} pairs, longest {:.1} ms; shortest clean handover: {}",
            self.paused_overlaps,
            self.max_paused_overlap_ms,
            self.min_handover_ms
                .map_or("none".to_string(), |m| format!("{m:.1} ms"))
        )
    }
}

/// The children of the lock, in the order they started.
pub fn lives(events: &[Event]) -> Vec<Life> {
    let paused: HashSet<i32> = events
        .iter()
        .filter_map(|e| match e.what {
            What::Fault {
                paused: Some(p), ..
            } => Some(p),
            _ => None,
        })
        .collect();
    let deaths: HashMap<i32, i128> = events
        .iter()
        .filter_map(|e| match e.what {
            What::Death { pid, .. } => Some((pid, e.at)),
            _ => None,
        })
        .collect();
    let mut lives: Vec<Life> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::Grant {
                label, token, pid, ..
            } => Some(Life {
                label: label.clone(),
                pid: *pid,
                token: *token,
                start: e.at,
                death: deaths.get(pid).copied(),
                paused: paused.contains(pid),
            }),
            _ => None,
        })
        .collect();
    lives.sort_by_key(|l| l.start);
    lives
}

/// Property 1: distinct tokens, rising in the order of the grants.
pub fn check_tokens(events: &[Event]) -> Result<(), Violation> {
    let lives = lives(events);
    let mut seen: HashMap<u64, &Life> = HashMap::new();
    for l in &lives {
        if let Some(other) = seen.insert(l.token, l) {
            return Err(Violation {
                property: "1 (every grant has its own token)",
                detail: format!(
                    "children {} ({}) and {} ({}) both got token {}",
                    other.pid, other.label, l.pid, l.label, l.token
                ),
                from: other.start,
                to: l.start,
            });
        }
    }
    for pair in lives.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.token <= a.token {
            return Err(Violation {
                property: "1 (tokens rise in grant order)",
                detail: format!(
                    "child {} ({}) started after child {} ({}) with a lower token: {} after {}",
                    b.pid, b.label, a.pid, a.label, b.token, a.token
                ),
                from: a.start,
                to: b.start,
            });
        }
    }
    Ok(())
}

/// Property 2: the register never accepted a token below one it had
/// accepted; checked over the log, not trusted from the register's logic.
pub fn check_fencing(events: &[Event]) -> Result<(), Violation> {
    let mut highest: Option<(u64, i128)> = None;
    for e in events {
        if let What::Write {
            token,
            accepted: true,
            ..
        } = e.what
        {
            if let Some((h, when)) = highest
                && token < h
            {
                return Err(Violation {
                    property: "2 (fencing: never accept a lower token)",
                    detail: format!("accepted token {token} after token {h}"),
                    from: when,
                    to: e.at,
                });
            }
            if highest.is_none_or(|(h, _)| token > h) {
                highest = Some((token, e.at));
            }
        }
    }
    Ok(())
}

/// Property 3: no two children alive at once, unless the older was paused.
/// Returns the overlap figures for the paused ones.
pub fn check_exclusion(events: &[Event], figures: &mut Figures) -> Result<(), Violation> {
    let lives = lives(events);
    let by_pid: HashMap<i32, &Life> = lives.iter().map(|l| (l.pid, l)).collect();
    let excused = |pid: i32| by_pid.get(&pid).is_some_and(|l| l.paused);
    // Evidence that needs no clock: the register and the pidfds.
    for e in events {
        match &e.what {
            What::Grant {
                pid, older_alive, ..
            } => {
                if let Some(&older) = older_alive.iter().find(|&&o| !excused(o)) {
                    return Err(Violation {
                        property: "3 (one child at a time)",
                        detail: format!(
                            "child {older} was still alive when child {pid}'s first line arrived"
                        ),
                        from: by_pid.get(&older).map_or(e.at, |l| l.start),
                        to: e.at,
                    });
                }
            }
            What::Write {
                pid,
                accepted: false,
                token,
                highest,
                ..
            } if !excused(*pid) => {
                return Err(Violation {
                    property: "3 (one child at a time)",
                    detail: format!(
                        "child {pid}, never paused, wrote with token {token} after a newer \
                         holder had written with {highest}: both were alive"
                    ),
                    from: by_pid.get(pid).map_or(e.at, |l| l.start),
                    to: e.at,
                });
            }
            _ => {}
        }
    }
    // Evidence from the lifetimes.
    for (i, newer) in lives.iter().enumerate() {
        for older in &lives[..i] {
            let older_end = older.death.unwrap_or(i128::MAX);
            let overlap = older_end.min(newer.death.unwrap_or(i128::MAX)) - newer.start;
            if overlap <= 0 {
                continue;
            }
            if older.paused {
                figures.paused_overlaps += 1;
                let o = if older_end == i128::MAX {
                    f64::INFINITY
                } else {
                    ms(overlap)
                };
                figures.max_paused_overlap_ms = figures.max_paused_overlap_ms.max(o);
                continue;
            }
            return Err(Violation {
                property: "3 (one child at a time)",
                detail: format!(
                    "child {} ({}, token {}) started {:.1} ms before child {} ({}, token {}) died, \
                     and neither was paused",
                    newer.pid,
                    newer.label,
                    newer.token,
                    ms(overlap),
                    older.pid,
                    older.label,
                    older.token
                ),
                from: older.start,
                to: older.death.unwrap_or(newer.start),
            });
        }
    }
    for pair in lives.windows(2) {
        if let (false, Some(death)) = (pair[0].paused, pair[0].death) {
            let gap = ms(pair[1].start - death);
            figures.min_handover_ms = Some(figures.min_handover_ms.map_or(gap, |m| m.min(gap)));
        }
    }
    Ok(())
}

/// Count what happened, for the summary.
pub fn count(events: &[Event]) -> Figures {
    let mut f = Figures::default();
    for e in events {
        match &e.what {
            What::Grant { .. } => f.grants += 1,
            What::Write { accepted: true, .. } => f.accepted += 1,
            What::Write {
                accepted: false, ..
            } => f.rejected += 1,
            What::Fault { kind, .. } => *f.faults.entry(kind).or_default() += 1,
            What::Exit { status, .. } => *f.exits.entry(status.clone()).or_default() += 1,
            _ => {}
        }
    }
    f
}
