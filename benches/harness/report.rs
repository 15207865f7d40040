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

/// What machine ran the bench, with what, when and in which mode: printed
/// first, and in each figure's section of the page.
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
    /// MemTotal, in kB as /proc/meminfo says it.
    pub memory_kb: Option<u64>,
    pub kernel: String,
    /// The first lines of `etcd --version` and `etcdctl version`.
    pub etcd: String,
    pub etcdctl: String,
    /// When the run started, UTC, as `date -u +%Y-%m-%dT%H:%M:%SZ`.
    pub date: String,
    pub mode: String,
}

impl Machine {
    /// This machine, now.
    pub fn now(mode: &str) -> Machine {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                    .map(|(_, m)| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let etcd = std::env::var("ELECT_TEST_ETCD").unwrap_or_else(|_| "etcd".into());
        let etcdctl = std::env::var("ELECT_TEST_ETCDCTL").unwrap_or_else(|_| "etcdctl".into());
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: model,
            memory_kb: std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            }),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            etcd: first_line(&etcd, &["--version"]),
            etcdctl: first_line(&etcdctl, &["version"]),
            date: first_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
            mode: mode.to_string(),
        }
    }
}

/// nproc, CPU model, memory, kernel, etcd version, date and mode, one per line.
impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let memory = self
            .memory_kb
            .map_or(String::new(), |kb| format!("{kb} kB"));
        writeln!(f, "nproc:    {}", self.nproc)?;
        writeln!(f, "cpu:      {}", self.cpu)?;
        writeln!(f, "memory:   {memory}")?;
        writeln!(f, "kernel:   {}", self.kernel)?;
        writeln!(f, "etcd:     {}", self.etcd)?;
        writeln!(f, "etcdctl:  {}", self.etcdctl)?;
        writeln!(f, "date:     {}", self.date)?;
        write!(f, "mode:     {}", self.mode)
    }
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

/// The rows and notes of a run, each kept under the figure it was measured
/// under, so that the page can show each figure's apart.
#[derive(Default)]
pub struct Table {
    /// The figure being measured now, one of [`super::figures::FIGURES`].
    under: &'static str,
    rows: Vec<(&'static str, Row)>,
    notes: Vec<(&'static str, String)>,
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
    /// Keep the rows and notes from now on under `figure`.
    pub fn measuring(&mut self, figure: &'static str) {
        debug_assert!(super::figures::names().any(|f| f == figure), "{figure}");
        self.under = figure;
    }

    /// Add a row and print it at once, so a run cut short still shows it.
    pub fn row(&mut self, row: Row) {
        println!("  {}", Self::line(&row, &self.widths_for(&row)));
        self.rows.push((self.under, row));
    }

    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        println!("  note: {note}");
        self.notes.push((self.under, note));
    }

    /// The rows measured under `figure`, in the order they came.
    pub fn rows_of<'a>(&'a self, figure: &'a str) -> impl Iterator<Item = &'a Row> {
        self.rows
            .iter()
            .filter(move |(f, _)| *f == figure)
            .map(|(_, r)| r)
    }

    /// The notes made under `figure`, in the order they came.
    pub fn notes_of<'a>(&'a self, figure: &'a str) -> impl Iterator<Item = &'a str> {
        self.notes
            .iter()
            .filter(move |(f, _)| *f == figure)
            .map(|(_, n)| n.as_str())
    }

    fn widths_for(&self, extra: &Row) -> [usize; 5] {
        let mut w = [44, 22, 22, 8, 20];
        for r in self
            .rows
            .iter()
            .map(|(_, r)| r)
            .chain(std::iter::once(extra))
        {
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
        for (_, r) in &self.rows {
            println!("{}", Self::line(r, &w));
        }
        for (_, n) in &self.notes {
            println!("note: {n}");
        }
        let misses = self
            .rows
            .iter()
            .filter(|(_, r)| r.verdict == Verdict::Miss)
            .count();
        let passes = self
            .rows
            .iter()
            .filter(|(_, r)| r.verdict == Verdict::Pass)
            .count();
        println!("targets: {passes} PASS, {misses} MISS");
    }
}
