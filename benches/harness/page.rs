//! docs/benchmarks.md, written by the bench itself: a fixed head, then a
//! section for each figure of [`FIGURES`], in their order, between
//! `<!-- figure: NAME -->` and `<!-- end: NAME -->`. A run replaces the
//! sections of the figures it measured and keeps the others byte for
//! byte, so that `cargo bench -- cycle` updates the cycle section alone;
//! a figure never measured says how to measure it.

use std::path::Path;

use super::figures::{FIGURES, Figure};
use super::report::{Machine, Row, Verdict};

/// The head of the page, the same on every run.
const HEAD: &str = "\
# Benchmarks

How `elect run` compares with the tools it replaces (`etcdctl lock`, \
`flock`, a store's own client), each figure with its target and the run \
that measured it.

This page is written by the bench, `benches/elect.rs`: a run replaces the \
sections of the figures it measured and keeps the others as they were, so \
edits by hand are lost.

- `cargo bench`: every figure, full counts.
- `ELECT_BENCH_QUICK=1 cargo bench`: every figure, small counts.
- `cargo bench -- FIGURE...`: only the figures named, such as \
`cargo bench -- cycle revoke`.
- `ELECT_BENCH_PAGE=PATH`: write this page to PATH instead, for a trial run.

Each figure runs elect and the reference tool side by side in one run, \
alternating them run by run, against servers started for the run on \
loopback. A row's verdict, \"met\" or \"missed\", is against the target \
beside it.
";

/// What a figure measured in this run, for its section.
pub struct Measured<'a> {
    pub figure: &'static Figure,
    pub run: &'a Run,
    pub rows: Vec<&'a Row>,
    pub notes: Vec<&'a str>,
    /// Markdown after the notes: the fleet figures' growth and plot.
    pub more: String,
}

/// The run: its machine and what elect was measured against.
pub struct Run {
    pub machine: Machine,
    /// `ELECT_BENCH_AGAINST`: the earlier build that was the reference.
    pub against: Option<String>,
}

fn start(name: &str) -> String {
    format!("<!-- figure: {name} -->")
}

fn end(name: &str) -> String {
    format!("<!-- end: {name} -->")
}

/// The section of `name` in `page`, markers included, if it has a whole one.
fn section<'p>(page: &'p str, name: &str) -> Option<&'p str> {
    let (start, end) = (start(name), end(name));
    let from = page.find(&start)?;
    let to = from + page[from..].find(&end)? + end.len();
    Some(&page[from..to])
}

/// A section around `body`, which ends with a newline: a blank line
/// before the end marker, so that no table or list runs into it.
fn wrap(name: &str, body: &str) -> String {
    format!("{}\n{body}\n{}", start(name), end(name))
}

/// The section of a figure no run has measured.
fn unmeasured(figure: &Figure) -> String {
    wrap(
        figure.name,
        &format!(
            "## {}\n\n{}\n\nNot measured yet: `cargo bench -- {}`.\n",
            figure.name, figure.measures, figure.name
        ),
    )
}

/// A cell of a Markdown table: a `|` would end it, a newline the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The machine and mode of `run`, in a sentence.
fn run_line(run: &Run) -> String {
    let m = &run.machine;
    let memory = m.memory_kb.map_or("unknown".into(), |kb| {
        format!("{:.1} GiB", kb as f64 / (1024.0 * 1024.0))
    });
    let against = run.against.as_ref().map_or(String::new(), |path| {
        format!(" The reference tool was the elect at `{path}`, an earlier build.")
    });
    format!(
        "Measured {} (UTC), mode {}; nproc {}, {}, memory {memory}, kernel {}; \
         {}, {}.{against}\n",
        m.date, m.mode, m.nproc, m.cpu, m.kernel, m.etcd, m.etcdctl
    )
}

/// The section of a figure this run measured.
pub fn measured(m: &Measured) -> String {
    // How, folded: the rows need it to be read, but not at a glance.
    let mut body = format!(
        "## {}\n\n{}\n\n<details><summary>How</summary>\n\n{}\n\n</details>\n\n{}",
        m.figure.name,
        m.figure.measures,
        m.figure.how,
        run_line(m.run)
    );
    if m.rows.is_empty() {
        body.push_str("\nNo rows: see the notes.\n");
    } else {
        body.push_str(
            "\n| figure | elect | reference | ratio | target | verdict |\n\
             |---|---:|---:|---:|---|---|\n",
        );
        for r in &m.rows {
            let verdict = match r.verdict {
                Verdict::Pass => "met",
                Verdict::Miss => "missed",
                Verdict::Info => "",
            };
            body.push_str(&format!(
                "| {} | {} | {} | {} | {} | {verdict} |\n",
                cell(&r.figure),
                cell(&r.elect),
                cell(&r.reference),
                cell(&r.ratio),
                cell(&r.target),
            ));
        }
    }
    if !m.notes.is_empty() {
        body.push('\n');
        for note in &m.notes {
            body.push_str(&format!("- {}\n", note.replace('\n', " ")));
        }
    }
    if !m.more.is_empty() {
        body.push('\n');
        body.push_str(&m.more);
        if !m.more.ends_with('\n') {
            body.push('\n');
        }
    }
    wrap(m.figure.name, &body)
}

/// The page: the head, then each figure's section: the one in `fresh` if
/// this run measured it, else the one `old` has, else one saying it was
/// never measured. `fresh` holds whole sections, as [`measured`] makes.
pub fn merge(old: &str, fresh: &[(&str, String)]) -> String {
    let mut page = HEAD.to_string();
    for figure in &FIGURES {
        let kept = fresh
            .iter()
            .find(|(name, _)| *name == figure.name)
            .map(|(_, s)| s.clone())
            .or_else(|| section(old, figure.name).map(str::to_string))
            .unwrap_or_else(|| unmeasured(figure));
        page.push('\n');
        page.push_str(&kept);
        page.push('\n');
    }
    page
}

/// Merge `fresh` into the page at `path`, which need not exist yet, and
/// write it whole or not at all: through a file beside it, renamed over it.
pub fn write(path: &Path, fresh: &[(&str, String)]) -> std::io::Result<()> {
    let old = match std::fs::read_to_string(path) {
        Ok(old) => old,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        // Unreadable: writing over it would lose its other sections.
        Err(e) => return Err(e),
    };
    let page = merge(&old, fresh);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::write(&temp, page)
        .and_then(|()| std::fs::File::open(&temp)?.sync_all())
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Each check by its own name.
macro_rules! checks {
    ($($check:ident),* $(,)?) => { [$((stringify!($check), $check as fn())),*] };
}

/// The checks of [`merge`], by name: `cargo test --benches` runs them
/// (the bench has its own `main`, so no `#[test]` would run).
pub const CHECKS: [(&str, fn()); 4] = checks![
    a_missing_page_gets_every_section,
    sections_not_run_are_kept_byte_for_byte,
    a_run_of_nothing_changes_nothing,
    rows_become_a_markdown_table,
];

fn run() -> Run {
    Run {
        machine: Machine {
            nproc: 2,
            cpu: "Test CPU".into(),
            memory_kb: Some(2 * 1024 * 1024),
            kernel: "6.1.0".into(),
            etcd: "etcd Version: 3.4.23".into(),
            etcdctl: "etcdctl version: 3.4.23".into(),
            date: "2026-12-06T07:00:00Z".into(),
            mode: "quick (ELECT_BENCH_QUICK=1)".into(),
        },
        against: None,
    }
}

fn row(figure: &str, verdict: Verdict) -> Row {
    Row {
        figure: figure.into(),
        elect: "1.0 ms | 2.0 ms".into(),
        reference: "etcdctl lock: 4.0 ms".into(),
        ratio: "0.25x".into(),
        target: "<= 0.30x".into(),
        verdict,
    }
}

fn fresh_section(name: &str, run: &Run, rows: &[Row], note: &str) -> (&'static str, String) {
    let figure = FIGURES.iter().find(|f| f.name == name).unwrap();
    let section = measured(&Measured {
        figure,
        run,
        rows: rows.iter().collect(),
        notes: vec![note],
        more: String::new(),
    });
    (figure.name, section)
}

fn a_missing_page_gets_every_section() {
    let dir = std::env::temp_dir().join(format!("elect-page-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("docs/benchmarks.md");
    let run = run();
    let cycle = fresh_section("cycle", &run, &[row("cycle", Verdict::Pass)], "a note");
    write(&path, &[cycle]).unwrap();
    let page = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(page.starts_with(HEAD));
    // Every section, each after the one before it.
    let mut at = 0;
    for figure in &FIGURES {
        let rest = &page[at..];
        let s = section(rest, figure.name).unwrap_or_else(|| panic!("{}", figure.name));
        at += rest.find(&start(figure.name)).unwrap() + s.len();
        let never = format!("Not measured yet: `cargo bench -- {}`.", figure.name);
        assert_eq!(s.contains(&never), figure.name != "cycle", "{s}");
    }
    let cycle = section(&page, "cycle").unwrap();
    assert!(
        cycle.contains("| cycle |") && cycle.contains("- a note\n"),
        "{cycle}"
    );
}

fn sections_not_run_are_kept_byte_for_byte() {
    // An earlier run's page, one section with bytes no render makes.
    let earlier = run();
    let fresh: Vec<_> = FIGURES
        .iter()
        .map(|f| fresh_section(f.name, &earlier, &[row(f.name, Verdict::Miss)], "old"))
        .collect();
    let odd = wrap("idle", "## idle\r\n\n  trailing  \n\u{e9}\t| x |\n");
    let all = merge("", &fresh);
    let old = all.replace(section(&all, "idle").unwrap(), &odd);
    let mut later = run();
    later.machine.date = "2026-12-07T08:00:00Z".into();
    let new = merge(
        &old,
        &[
            fresh_section("cycle", &later, &[row("cycle", Verdict::Pass)], "new"),
            fresh_section("k8s", &later, &[], "no server"),
        ],
    );
    for figure in &FIGURES {
        let (was, is) = (section(&old, figure.name), section(&new, figure.name));
        match figure.name {
            "cycle" | "k8s" => {
                let is = is.unwrap();
                assert!(
                    is.contains("2026-12-07T08:00:00Z") && !is.contains("- old"),
                    "{is}"
                )
            }
            _ => assert_eq!(is, was, "{}", figure.name),
        }
    }
    assert_eq!(section(&new, "idle"), Some(odd.as_str()));
    assert!(section(&new, "k8s").unwrap().contains("No rows"));
}

fn a_run_of_nothing_changes_nothing() {
    let once = merge("", &[fresh_section("revoke", &run(), &[], "n")]);
    assert_eq!(merge(&once, &[]), once);
    // An unfinished section (no end marker) is not kept: it is made anew.
    let cut = once.replace(&end("handover"), "");
    assert!(merge(&cut, &[]).contains(&end("handover")));
}

fn rows_become_a_markdown_table() {
    let run = run();
    let rows = [
        row("met one", Verdict::Pass),
        row("missed one", Verdict::Miss),
        row("info", Verdict::Info),
    ];
    let (_, s) = fresh_section("handover", &run, &rows, "a\nnote");
    assert!(
        s.contains(
            "| met one | 1.0 ms \\| 2.0 ms | etcdctl lock: 4.0 ms | 0.25x | <= 0.30x | met |\n"
        ),
        "{s}"
    );
    assert!(
        s.contains("| missed one |") && s.contains("| <= 0.30x | missed |\n"),
        "{s}"
    );
    assert!(s.contains("| <= 0.30x |  |\n"), "{s}");
    assert!(s.contains("- a note\n"), "{s}");
    assert!(
        s.contains("nproc 2, Test CPU, memory 2.0 GiB, kernel 6.1.0"),
        "{s}"
    );
}
