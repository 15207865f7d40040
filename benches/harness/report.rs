//! The report: what machine ran it, then one row per figure with elect's
//! value, the reference tool's value, their ratio and the target.

use std::process::Command;

/// The first line `cmd args` prints, or a note that it could not run.
fn first_line(cmd: &str, args: &[&str]) -> String {
    match Command::new(cmd).args(args).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        Err(e) => format!("({cmd}: {e})"),
    }
}

/// nproc, CPU model, kernel, etcd version and date, one per line.
pub fn machine(mode: &str) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let etcd = std::env::var("ELECT_TEST_ETCD").unwrap_or_else(|_| "etcd".into());
    let etcdctl = std::env::var("ELECT_TEST_ETCDCTL").unwrap_or_else(|_| "etcdctl".into());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default();
    [
        format!("nproc:    {cpus}"),
        format!("cpu:      {model}"),
        format!("memory:   {memory}"),
        format!("kernel:   {kernel}"),
        format!("etcd:     {}", first_line(&etcd, &["--version"])),
        format!("etcdctl:  {}", first_line(&etcdctl, &["version"])),
        format!(
            "date:     {}",
            first_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        ),
        format!("mode:     {mode}"),
    ]
    .join("\n")
}

/// Whether a figure met its target.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Miss,
    /// No target for this figure: reported for comparison only.
    Info,
}

pub struct Row {
    pub figure: String,
    pub elect: String,
    pub reference: String,
    pub ratio: String,
    pub target: String,
    pub verdict: Verdict,
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
}

/// `a / b` as "0.25x", or "-" when it means nothing.
pub fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b != 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

impl Table {
    /// Add a row and print it at once, so a run cut short still shows it.
    pub fn row(&mut self, row: Row) {
        println!("  {}", Self::line(&row, &self.widths_for(&row)));
        self.rows.push(row);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        println!("  note: {note}");
        self.notes.push(note);
    }

    fn widths_for(&self, extra: &Row) -> [usize; 5] {
        let mut w = [44, 22, 22, 8, 20];
        for r in self.rows.iter().chain(std::iter::once(extra)) {
            for (i, len) in [&r.figure, &r.elect, &r.reference, &r.ratio, &r.target]
                .iter()
                .map(|s| s.chars().count())
                .enumerate()
            {
                w[i] = w[i].max(len);
            }
        }
        w
    }

    fn line(r: &Row, w: &[usize; 5]) -> String {
        let verdict = match r.verdict {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::Info => "",
        };
        format!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:<w4$}  {verdict}",
            r.figure,
            r.elect,
            r.reference,
            r.ratio,
            r.target,
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
        )
        .trim_end()
        .to_string()
    }

    pub fn print(&self) {
        let header = Row {
            figure: "figure".into(),
            elect: "elect".into(),
            reference: "reference".into(),
            ratio: "ratio".into(),
            target: "target".into(),
            verdict: Verdict::Info,
        };
        let w = self.widths_for(&header);
        println!("{}", Self::line(&header, &w));
        println!("{}", "-".repeat(w.iter().sum::<usize>() + 2 * 5 + 4));
        for r in &self.rows {
            println!("{}", Self::line(r, &w));
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        let misses = self
            .rows
            .iter()
            .filter(|r| r.verdict == Verdict::Miss)
            .count();
        let passes = self
            .rows
            .iter()
            .filter(|r| r.verdict == Verdict::Pass)
            .count();
        println!("targets: {passes} PASS, {misses} MISS");
    }
}
