//! A command that proves overlap, or its absence, on one monotonic clock.
//!
//! The command (`sh`) prints its process group and starts a grandchild
//! that appends `LABEL NS` to a log every 10 ms, NS from `CLOCK_MONOTONIC`:
//! one clock for every process on the machine, which never jumps. Two
//! holders overlapped exactly when the old one's last tick comes after the
//! new one's first. The ticks come from a grandchild on purpose: it is what
//! a parent-death signal does not reach.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::SECOND;

/// The ticking loop. One `print` per line on an unbuffered append-mode
/// handle: one write(2), so lines from several tickers never tear.
const TICK: &str = r#"use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);
open(my $log, ">>", $ARGV[1]) or die "cannot open $ARGV[1]: $!";
$log->autoflush(1);
while (1) {
    printf $log "%s %d\n", $ARGV[0], clock_gettime(CLOCK_MONOTONIC) * 1e9;
    usleep(10000);
}"#;

pub struct Ticks {
    pub log: PathBuf,
}

impl Ticks {
    /// A fresh log in `dir`. Fails loudly if perl's Time::HiRes is missing.
    pub fn new(dir: &Path) -> Ticks {
        let ok = Command::new("perl")
            .args(["-MTime::HiRes", "-e", "1"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "perl with Time::HiRes not found: install Debian's perl package (apt-get install perl)"
        );
        Ticks {
            log: dir.join("ticks.log"),
        }
    }

    /// The `sh -c` script of a holder labelled `label`. With `ignore_term`
    /// the command and its ticker ignore SIGTERM, so only SIGKILL ends them.
    pub fn script(&self, label: &str, ignore_term: bool) -> String {
        let trap = if ignore_term { "trap '' TERM; " } else { "" };
        format!(
            "{trap}echo \"token $ELECT_TOKEN\"; echo \"pgid $(cut -d' ' -f5 /proc/$$/stat)\"; \
             perl -e '{}' {label} {} & wait",
            TICK.replace('\'', r"'\''"),
            self.log.display()
        )
    }

    /// Every tick so far: (label, monotonic ns).
    pub fn all(&self) -> Vec<(String, i128)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let (label, ns) = line.split_once(' ')?;
                Some((label.to_string(), ns.parse().ok()?))
            })
            .collect()
    }

    fn of(&self, label: &str) -> Vec<i128> {
        self.all()
            .into_iter()
            .filter(|(l, _)| l == label)
            .map(|(_, ns)| ns)
            .collect()
    }

    /// Wait until `label` has ticked; its first tick.
    pub fn first(&self, label: &str, within: Duration) -> i128 {
        let give_up = Instant::now() + within;
        loop {
            if let Some(&first) = self.of(label).first() {
                return first;
            }
            assert!(
                Instant::now() < give_up,
                "{label} never ticked within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `label`'s first tick, if it ticked.
    pub fn earliest(&self, label: &str) -> Option<i128> {
        self.of(label).first().copied()
    }

    pub fn last(&self, label: &str) -> Option<i128> {
        self.of(label).last().copied()
    }

    /// How long `old` ticked on after `new` began, in ms (negative: the gap
    /// between them). Waits for `new`'s first tick, then for the old
    /// command's group to be gone, at most `OBSERVE` more.
    pub fn overlap_ms(&self, old: &str, old_group: i32, new: &str) -> f64 {
        const OBSERVE: Duration = Duration::from_secs(2);
        let first_new = self.first(new, 30 * SECOND);
        let give_up = Instant::now() + OBSERVE;
        while group_alive(old_group) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        let last_old = self.last(old).expect("the old holder never ticked");
        (last_old - first_new) as f64 / 1e6
    }

    /// After a cut of the old holder's link at `cut` (monotonic ns): the
    /// old one's command must end before the new one's begins, with nothing
    /// of its group left. Says when each happened, for `what`.
    pub fn assert_handed_over_after_cut(&self, what: &str, cut: i128, old_group: i32) {
        let overlap = self.overlap_ms("A", old_group, "B");
        let (last_a, first_b) = (self.last("A").unwrap(), self.first("B", SECOND));
        eprintln!(
            "{what}: A's last tick {:.0} ms after the cut, B's first {:.0} ms after; overlap {overlap:.1} ms",
            (last_a - cut) as f64 / 1e6,
            (first_b - cut) as f64 / 1e6
        );
        assert!(overlap < 0.0, "{what}: A ran {overlap:.1} ms beside B");
        assert!(
            !group_alive(old_group),
            "{what}: {:?}",
            group_members(old_group)
        );
    }
}

/// What a command's leader leaves in its group when it exits at once.
#[derive(Clone, Copy, Debug)]
pub enum Left {
    /// A grandchild that ticks on.
    Ticking,
    /// One that ticks on and ignores SIGTERM (and SIGHUP).
    IgnoringTerm,
    /// One that the leader stopped (SIGSTOP) before it left.
    Stopped,
}

/// A grandchild that holds `$ARGV[2]` MiB (which the kernel takes tens of
/// milliseconds to free when it dies), says it is ready in `LOG.LABEL.ready`,
/// and ticks as the ticker does.
const BALLAST_TICK: &str = r#"use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);
if ($ARGV[3]) { $SIG{TERM} = "IGNORE"; $SIG{HUP} = "IGNORE"; }
my $ballast = "x" x ($ARGV[2] * 1048576);
open(my $log, ">>", $ARGV[1]) or die "cannot open $ARGV[1]: $!";
$log->autoflush(1);
printf $log "%s %d\n", $ARGV[0], clock_gettime(CLOCK_MONOTONIC) * 1e9;
open(my $ready, ">", "$ARGV[1].$ARGV[0].ready") or die; close($ready);
while (1) {
    printf $log "%s %d\n", $ARGV[0], clock_gettime(CLOCK_MONOTONIC) * 1e9;
    usleep(10000);
}"#;

/// The next holder's command: its one tick, then how many processes of
/// group `$ARGV[2]` can still run, as `left N`.
const TICK_AND_LOOK: &str = r#"use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
open(my $log, ">>", $ARGV[1]) or die "cannot open $ARGV[1]: $!";
$log->autoflush(1);
printf $log "%s %d\n", $ARGV[0], clock_gettime(CLOCK_MONOTONIC) * 1e9;
my @left;
for my $stat (glob "/proc/[0-9]*/stat") {
    open(my $f, "<", $stat) or next;
    my $line = <$f>;
    next unless defined $line && $line =~ /\)\s+(\S)\s+\S+\s+(\d+)/;
    push @left, "$stat $1" if $2 == $ARGV[2] && $1 ne "Z" && $1 ne "X";
}
print "left " . scalar(@left) . " @left\n";"#;

impl Ticks {
    /// The `sh -c` script of a holder labelled `label` that prints its
    /// process group, starts a grandchild in it holding `mib` MiB that
    /// ticks, waits for a line on stdin, and then exits at once, leaving
    /// the grandchild as `left` says.
    pub fn script_leaving(&self, label: &str, left: Left, mib: u32) -> String {
        let ignore = u8::from(matches!(left, Left::IgnoringTerm));
        let stop = match left {
            Left::Stopped => "kill -STOP $p; ",
            _ => "",
        };
        let log = self.log.display();
        format!(
            "echo \"pgid $(cut -d' ' -f5 /proc/$$/stat)\"; \
             perl -e '{}' {label} {log} {mib} {ignore} & p=$!; \
             until [ -e {log}.{label}.ready ]; do sleep 0.01; done; \
             echo ready; read _line; {stop}exit 0",
            BALLAST_TICK.replace('\'', r"'\''"),
        )
    }

    /// The `sh -c` script of the next holder, labelled `label`: it ticks
    /// once and prints `left N …`, the processes of `old_group` that can
    /// still run as it starts.
    pub fn script_looking(&self, label: &str, old_group: i32) -> String {
        format!(
            "exec perl -e '{}' {label} {} {old_group}",
            TICK_AND_LOOK.replace('\'', r"'\''"),
            self.log.display()
        )
    }
}

/// Whether any process of group `pgid` can still run (exists and is not a zombie).
pub fn group_alive(pgid: i32) -> bool {
    !group_members(pgid).is_empty()
}

/// The processes of group `pgid` that can still run, as `stat` shows them.
pub fn group_members(pgid: i32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let member = fields.get(2).and_then(|p| p.parse::<i32>().ok()) == Some(pgid)
                && !matches!(fields.first(), Some(&("Z" | "X")));
            member.then(|| stat.trim().to_string())
        })
        .collect()
}

/// The monotonic clock the ticks are on, now.
pub fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}
