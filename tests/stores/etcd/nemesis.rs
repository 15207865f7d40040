//! The nemesis: faults injected into a running lock, chosen from a logged
//! seed, and the world they are injected into.
//!
//! The world is etcd (one node or three), N contenders for one lock, each
//! behind its own fault proxies (one per member, so that cutting a
//! contender off cuts it off from the whole cluster), the fenced register
//! their children write to, and the history everything is logged in.
//!
//! The faults are the ones a lock meets in production: a process pause (a
//! GC pause, a VM stop: SIGSTOP of elect, its guard and its command's group
//! together), elect alone frozen, elect or its command crashing (SIGKILL),
//! elect told to stop (SIGTERM), a partition that drops packets or resets
//! connections, an etcd member crashing (the leader too) and the cluster
//! losing its quorum. One fault at a time, each healed before the next.
//!
//! The same seed gives the same sequence of choices; the timing of the
//! processes, and so the outcome, may still differ between runs. Every wait
//! polls its condition with a bound; the only plain sleeps are the nemesis's
//! own pauses between and during faults.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::Etcd;
use crate::support::contender::{Contender, Sweep, comm, marked};
use crate::support::history::{History, What};
use crate::support::now_ns;
use crate::support::proxy::{Mode, Proxy};
use crate::support::register::Register;

/// A small, seedable generator (xorshift64*): the seed is all it takes to
/// replay the nemesis's choices.
pub struct Prng(u64);

impl Prng {
    /// Seeded from `ELECT_FAULT_SEED` (decimal or 0x hex), else the clock.
    pub fn from_env() -> (Prng, u64) {
        let seed = match std::env::var("ELECT_FAULT_SEED") {
            Ok(s) => {
                let s = s.trim();
                match s.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => s.parse(),
                }
                .unwrap_or_else(|_| panic!("ELECT_FAULT_SEED={s:?} is not a number"))
            }
            Err(_) => now_ns() as u64,
        };
        (Prng(seed.max(1)), seed)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = (hi - lo).as_millis() as u64 + 1;
        lo + Duration::from_millis(self.next() % span)
    }

    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGSTOP elect, its guard and its command's group; SIGCONT later.
    Pause,
    /// SIGSTOP elect alone: its guard must still stop the command in time.
    FreezeElect,
    KillElect,
    KillCommand,
    TermElect,
    Blackhole,
    Reset,
    /// SIGKILL one etcd member (with one member: the whole store), restart it.
    KillMember,
    /// SIGKILL the member that is the Raft leader, restart it.
    KillLeader,
    /// SIGKILL a majority of the members, restart them.
    LoseQuorum,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Pause => "pause elect+guard+command",
            Fault::FreezeElect => "SIGSTOP elect alone",
            Fault::KillElect => "SIGKILL elect",
            Fault::KillCommand => "SIGKILL command",
            Fault::TermElect => "SIGTERM elect",
            Fault::Blackhole => "partition (blackhole)",
            Fault::Reset => "partition (reset)",
            Fault::KillMember => "kill etcd member",
            Fault::KillLeader => "kill etcd leader",
            Fault::LoseQuorum => "lose etcd quorum",
        }
    }

    /// The faults that make sense for a store of `members` members.
    pub fn all(members: usize) -> Vec<Fault> {
        let mut kinds = vec![
            Fault::Pause,
            Fault::FreezeElect,
            Fault::KillElect,
            Fault::KillCommand,
            Fault::TermElect,
            Fault::Blackhole,
            Fault::Reset,
            Fault::KillMember,
        ];
        if members > 1 {
            kinds.extend([Fault::KillLeader, Fault::LoseQuorum]);
        }
        kinds
    }
}

/// Chooses the faults: first every kind once, in a seeded order, so that
/// even a short run meets them all; then any kind at random.
pub struct Nemesis {
    pub rng: Prng,
    pub seed: u64,
    kinds: Vec<Fault>,
    first_pass: Vec<Fault>,
}

impl Nemesis {
    pub fn new(members: usize) -> Nemesis {
        let (mut rng, seed) = Prng::from_env();
        let kinds = Fault::all(members);
        let mut first_pass = kinds.clone();
        for i in (1..first_pass.len()).rev() {
            first_pass.swap(i, rng.below(i + 1));
        }
        first_pass.reverse();
        Nemesis {
            rng,
            seed,
            kinds,
            first_pass,
        }
    }

    pub fn next(&mut self) -> Fault {
        match self.first_pass.pop() {
            Some(f) => f,
            None => self.kinds[self.rng.below(self.kinds.len())],
        }
    }

    /// Whether every kind has been chosen once.
    pub fn first_pass_done(&self) -> bool {
        self.first_pass.is_empty()
    }
}

/// How long a supervisor waits before it restarts an elect that exited.
const RESTART_DELAY: Duration = Duration::from_millis(100);

/// The system under test.
pub struct World {
    /// Dropped first: elect, guards and commands die before the rest.
    pub contenders: Vec<Contender>,
    restart_at: Vec<Option<Instant>>,
    pub register: Register,
    pub cluster: Etcd,
    /// Per contender, one proxy per member.
    pub links: Vec<Vec<Proxy>>,
    pub ttl: Duration,
    pub lock: String,
    pub history: Arc<History>,
    /// Dropped last: kills anything the guards above missed.
    _sweep: Sweep,
}

impl World {
    /// etcd of `members` members and `n` contenders for `lock`, each
    /// reaching every member through proxies of its own.
    pub fn start(members: usize, n: usize, lock: &str, ttl_secs: u64) -> World {
        let history = Arc::new(History::new());
        let register = Register::start(history.clone());
        let sweep = Sweep(format!(
            "{}={}",
            crate::support::register::ENV,
            register.path.display()
        ));
        let cluster = Etcd::cluster(members);
        let links: Vec<Vec<Proxy>> = (0..n)
            .map(|_| {
                cluster
                    .endpoints()
                    .iter()
                    .map(|e| Proxy::start(e))
                    .collect()
            })
            .collect();
        let ttl = format!("{ttl_secs}s");
        let contenders = links
            .iter()
            .enumerate()
            .map(|(i, link)| {
                let store = format!(
                    "etcd://{}",
                    link.iter()
                        .map(|p| format!("127.0.0.1:{}", p.port))
                        .collect::<Vec<_>>()
                        .join(",")
                );
                Contender::spawn(
                    &format!("c{i}"),
                    &store,
                    lock,
                    &["--ttl", &ttl, "--connect-timeout", "3s", "-v"],
                    "0.05",
                    &register,
                    &history,
                )
            })
            .collect();
        World {
            contenders,
            restart_at: vec![None; n],
            register,
            cluster,
            links,
            ttl: Duration::from_secs(ttl_secs),
            lock: lock.to_string(),
            history,
            _sweep: sweep,
        }
    }

    /// The supervisor's round: restart, after a short delay, every elect
    /// that exited.
    pub fn supervise(&mut self) {
        for (i, c) in self.contenders.iter_mut().enumerate() {
            if c.exited().is_some() {
                self.restart_at[i] = Some(Instant::now() + RESTART_DELAY);
            }
            if let Some(at) = self.restart_at[i]
                && Instant::now() >= at
            {
                self.restart_at[i] = None;
                c.restart();
            }
        }
    }

    /// Let time pass, supervising.
    pub fn idle(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.supervise();
            thread::sleep(Duration::from_millis(10).min(until - Instant::now()));
        }
    }

    /// Poll `done` (supervising meanwhile) until it holds; Err after `within`.
    pub fn wait_until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&mut World) -> bool,
    ) -> Result<Duration, Duration> {
        let start = Instant::now();
        loop {
            if done(self) {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= within {
                return Err(start.elapsed());
            }
            self.idle(Duration::from_millis(20));
        }
    }

    /// The contender whose command holds the highest token among the live
    /// commands the register knows: the current holder, as far as anyone
    /// can tell.
    pub fn holder(&self) -> Option<usize> {
        let (pid, _) = self.register.alive().into_iter().max_by_key(|&(_, t)| t)?;
        self.contenders.iter().position(|c| c.writer() == Some(pid))
    }

    fn fault(&self, kind: Fault, detail: String, paused: Option<i32>) {
        self.history.log(What::Fault {
            kind: kind.name(),
            detail,
            paused,
        });
    }

    fn heal(&self, detail: String) {
        self.history.log(What::Heal { detail });
    }

    /// Inject one fault of `kind`, hold it, heal it.
    pub fn inject(&mut self, kind: Fault, rng: &mut Prng) {
        let ttl = self.ttl;
        // Mostly the holder: that is where faults hurt.
        // (Killing a command needs one: always the holder's, if any.)
        let target = match self.holder() {
            Some(h) if kind == Fault::KillCommand || rng.chance(3, 4) => h,
            _ => rng.below(self.contenders.len()),
        };
        let lasting = rng.between(Duration::from_millis(200), ttl * 5 / 2);
        let label = self.contenders[target].label.clone();
        match kind {
            Fault::Pause => self.pause(target, lasting, rng.chance(1, 2)),
            Fault::FreezeElect => {
                let c = &self.contenders[target];
                c.signal(libc::SIGSTOP);
                self.fault(
                    kind,
                    format!("{label} elect (pid {}) for {lasting:?}", c.pid),
                    None,
                );
                self.idle(lasting);
                self.contenders[target].signal(libc::SIGCONT);
                self.heal(format!("SIGCONT {label} elect"));
            }
            Fault::KillElect | Fault::TermElect => {
                let sig = match kind {
                    Fault::KillElect => libc::SIGKILL,
                    _ => libc::SIGTERM,
                };
                let c = &self.contenders[target];
                c.signal(sig);
                self.fault(kind, format!("{label} elect (pid {})", c.pid), None);
            }
            Fault::KillCommand => match self.contenders[target].writer() {
                Some(w) => {
                    // SAFETY: plain kill(2) of a command elect started for us.
                    unsafe { libc::kill(w, libc::SIGKILL) };
                    self.fault(kind, format!("{label} command (pid {w})"), None);
                }
                None => self
                    .history
                    .note(format!("{}: {label} has no command", kind.name())),
            },
            Fault::Blackhole | Fault::Reset => {
                let mode = match kind {
                    Fault::Blackhole => Mode::Blackhole,
                    _ => Mode::Reset,
                };
                for p in &self.links[target] {
                    p.set(mode);
                }
                self.fault(kind, format!("{label} cut off for {lasting:?}"), None);
                self.idle(lasting);
                for p in &self.links[target] {
                    p.set(Mode::Forward);
                }
                self.heal(format!("{label} reconnected"));
            }
            Fault::KillMember | Fault::KillLeader | Fault::LoseQuorum => {
                let size = self.cluster.size();
                let victims: Vec<usize> = match kind {
                    Fault::KillMember => vec![rng.below(size)],
                    Fault::KillLeader => vec![self.cluster.wait_leader()],
                    _ => {
                        let spared = rng.below(size);
                        (0..size).filter(|&i| i != spared).collect()
                    }
                };
                for &i in &victims {
                    self.cluster.kill(i);
                }
                self.fault(
                    kind,
                    format!("members {victims:?} down for {lasting:?}"),
                    None,
                );
                self.idle(lasting);
                for &i in &victims {
                    self.cluster.restart(i);
                }
                self.cluster.wait_healthy();
                self.heal(format!("members {victims:?} back and healthy"));
            }
        }
    }

    /// The GC-pause case: stop elect's group, its guard's group and its
    /// command's group, as a stopped VM or a long pause would; continue
    /// them later, the command first or last as `command_first` says.
    fn pause(&mut self, target: usize, lasting: Duration, command_first: bool) {
        let label = self.contenders[target].label.clone();
        self.contenders[target].signal_group(libc::SIGSTOP);
        let writer = self.contenders[target].writer();
        if let Some(w) = writer {
            stop_group(w, libc::SIGSTOP);
            // A command stopped before its first line would report its start
            // late, after others' starts: the history could not say when it
            // started. Such a pause is called off at once (elect still holds
            // its lease: nobody else can have started meanwhile).
            if !self.register.knows(w) {
                stop_group(w, libc::SIGCONT);
                self.contenders[target].signal_group(libc::SIGCONT);
                self.history.note(format!(
                    "pause of {label} called off: its command {w} had just started"
                ));
                return;
            }
        }
        let what = match writer {
            Some(w) => format!(
                "{label} elect+guard (pgid {}) and command (pgid {w})",
                self.contenders[target].pid
            ),
            None => format!(
                "{label} elect+guard (pgid {}), no command",
                self.contenders[target].pid
            ),
        };
        self.fault(Fault::Pause, format!("{what} for {lasting:?}"), writer);
        self.idle(lasting);
        let order = match (writer, command_first) {
            (Some(w), true) => {
                stop_group(w, libc::SIGCONT);
                self.contenders[target].signal_group(libc::SIGCONT);
                "command first"
            }
            (Some(w), false) => {
                self.contenders[target].signal_group(libc::SIGCONT);
                stop_group(w, libc::SIGCONT);
                "elect first"
            }
            (None, _) => {
                self.contenders[target].signal_group(libc::SIGCONT);
                "elect"
            }
        };
        self.heal(format!("SIGCONT {label} ({order})"));
    }

    /// End every fault: reconnect every contender, continue every process,
    /// bring every member back and wait until the cluster is healthy.
    pub fn heal_all(&mut self) {
        for link in &self.links {
            for p in link {
                p.set(Mode::Forward);
            }
        }
        for c in &self.contenders {
            c.signal_group(libc::SIGCONT);
            if let Some(w) = c.writer() {
                stop_group(w, libc::SIGCONT);
            }
        }
        for i in 0..self.cluster.size() {
            self.cluster.restart(i);
        }
        self.cluster.wait_healthy();
        self.heal("everything".into());
    }

    /// Stop every contender as an operator would (SIGTERM), and stop
    /// restarting them. Returns how each elect ended.
    pub fn stop(&mut self) -> Vec<String> {
        for c in &self.contenders {
            c.signal_group(libc::SIGCONT);
            c.signal(libc::SIGTERM);
        }
        self.contenders
            .iter_mut()
            .map(|c| match c.running() {
                true => c.wait(Duration::from_secs(10)),
                false => "not running".into(),
            })
            .collect()
    }

    /// Processes started by any elect of this world that are still there,
    /// polled for up to `within`; described for a failure message.
    pub fn orphans(&self, within: Duration) -> Vec<String> {
        let marker = format!(
            "{}={}",
            crate::support::register::ENV,
            self.register.path.display()
        );
        let give_up = Instant::now() + within;
        loop {
            let left = marked(&marker);
            if left.is_empty() || Instant::now() >= give_up {
                return left
                    .into_iter()
                    .map(|p| format!("{p} ({})", comm(p).unwrap_or_default()))
                    .collect();
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// killpg and kill: the group if it exists, the process if it does not lead one yet.
fn stop_group(pid: i32, sig: i32) {
    // SAFETY: plain killpg(2) and kill(2) of a command elect started for us.
    unsafe {
        libc::killpg(pid, sig);
        libc::kill(pid, sig);
    }
}
