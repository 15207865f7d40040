//! What the kernel says about a process: CPU time, context switches, peak
//! memory, children. Read from /proc, summed over all threads.

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

/// One reading of a process's resource use.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Time on a CPU, user and system, summed over the live threads.
    pub cpu: Duration,
    /// Voluntary context switches of the live threads: each one is the
    /// process going to sleep, that is, a wake-up afterwards.
    pub wakeups: u64,
    /// Involuntary ones: the process preempted while it ran (by a store
    /// server on the same machine that its request woke, say); no sleep,
    /// and no wake-up of its own.
    pub preempted: u64,
    /// Peak resident set size (VmHWM), KiB.
    pub peak_rss_kib: u64,
    /// Proportional set size now, KiB: each page shared with other
    /// processes counted in parts, so that two processes that share pages
    /// (elect and its forked guard) are not charged twice for them.
    pub pss_kib: u64,
}

impl Usage {
    pub fn read(pid: i32) -> Option<Usage> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let peak_rss_kib = field(&status, "VmHWM:")?;
        let pss_kib = field(
            &fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?,
            "Pss:",
        )?;
        let mut cpu = Duration::ZERO;
        let (mut wakeups, mut preempted) = (0, 0);
        for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
            let dir = task.path();
            // schedstat: time on CPU in ns, time waiting, timeslices.
            if let Ok(s) = fs::read_to_string(dir.join("schedstat")) {
                let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
                cpu += Duration::from_nanos(ns);
            }
            if let Ok(s) = fs::read_to_string(dir.join("status")) {
                wakeups += field(&s, "voluntary_ctxt_switches:").unwrap_or(0);
                preempted += field(&s, "nonvoluntary_ctxt_switches:").unwrap_or(0);
            }
        }
        Some(Usage {
            cpu,
            wakeups,
            preempted,
            peak_rss_kib,
            pss_kib,
        })
    }

    /// What was used between `self` (earlier) and `later`; the memory
    /// figures are the later ones.
    pub fn until(self, later: Usage) -> Usage {
        Usage {
            cpu: later.cpu.saturating_sub(self.cpu),
            wakeups: later.wakeups.saturating_sub(self.wakeups),
            preempted: later.preempted.saturating_sub(self.preempted),
            peak_rss_kib: later.peak_rss_kib,
            pss_kib: later.pss_kib,
        }
    }

    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            cpu: self.cpu + other.cpu,
            wakeups: self.wakeups + other.wakeups,
            preempted: self.preempted + other.preempted,
            peak_rss_kib: self.peak_rss_kib + other.peak_rss_kib,
            pss_kib: self.pss_kib + other.pss_kib,
        }
    }
}

/// The number after `name` in a /proc status file.
fn field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The command line of `pid`, arguments joined by spaces.
pub fn command_line(pid: i32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The children of `pid`, found by scanning /proc for their parent.
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&child| {
            fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // The parent pid is the second field after the parenthesized name.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// SIGKILL `pid` and every process below it, as one crash: all are
/// stopped first, so none can notice another's death and act on it.
pub fn kill_tree(pid: i32) {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        all.extend(children(all[i]));
        i += 1;
    }
    for signal in [libc::SIGSTOP, libc::SIGKILL] {
        for &pid in &all {
            // SAFETY: plain kill(2) of our own child and its descendants.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

/// Every process's children, from one scan of /proc: cheaper than
/// [`children`] once per process when a figure runs a thousand of them.
pub fn family() -> HashMap<i32, Vec<i32>> {
    let mut family: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return family;
    };
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if let Some(parent) = stat_fields(pid).and_then(|f| f.get(1)?.parse().ok()) {
            family.entry(parent).or_default().push(pid);
        }
    }
    family
}

/// The fields of /proc/PID/stat after the parenthesized name: state first.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time of `root` and every process below it, live or already reaped
/// (a server that forks a process per connection, as PostgreSQL does,
/// has had its exited children's time added to its own by the kernel).
pub fn tree_cpu(root: i32, family: &HashMap<i32, Vec<i32>>) -> Duration {
    // The clock ticks of /proc/PID/stat: sysconf(_SC_CLK_TCK), 100 on Linux.
    const TICK: Duration = Duration::from_millis(10);
    let mut cpu = Duration::ZERO;
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        cpu += Usage::read(pid).map_or(Duration::ZERO, |u| u.cpu);
        // cutime and cstime: the waited-for children's user and system time.
        if let Some(f) = stat_fields(pid) {
            let reaped: u64 = f[13..15].iter().filter_map(|v| v.parse::<u64>().ok()).sum();
            cpu += TICK * reaped as u32;
        }
        todo.extend(family.get(&pid).into_iter().flatten());
    }
    cpu
}

/// Proportional memory of `root` and every process below it, KiB.
pub fn tree_pss_kib(root: i32, family: &HashMap<i32, Vec<i32>>) -> u64 {
    let mut pss = 0;
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        pss += Usage::read(pid).map_or(0, |u| u.pss_kib);
        todo.extend(family.get(&pid).into_iter().flatten());
    }
    pss
}

/// The memory the kernel could give without swapping (MemAvailable), KiB.
pub fn available_kib() -> u64 {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| field(&m, "MemAvailable:"))
        .unwrap_or(0)
}

/// The 1-minute load average, and how many processes there are: what
/// else the machine was doing while a figure was read.
pub fn machine_load() -> (f64, usize) {
    let load = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    let processes = fs::read_dir("/proc").map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .count()
    });
    (load, processes)
}
