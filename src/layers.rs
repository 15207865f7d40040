//! The boundaries ARCHITECTURE.md draws, kept at build time: `build.rs`
//! reads `src/` with this file and fails the build on a wrong import or a
//! stray exit, so that neither waits for a test run or a review. Comments
//! and test modules are not looked at. Its own tests, below, check the
//! checker on sources made for them.

use std::path::{Path, PathBuf};

/// The stores, each a folder of `src/store/`: those `KINDS` registers in
/// `store/mod.rs` (`&etcd::KIND,`), so that a new store is named there alone.
fn stores(sources: &[Source]) -> Vec<String> {
    let registry = sources.iter().find(|(file, _)| file == "store/mod.rs");
    registry
        .into_iter()
        .flat_map(|(_, code)| code)
        .filter_map(|(_, line)| {
            let name = line.trim().strip_prefix('&')?.strip_suffix("::KIND,")?;
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect()
}

/// What the store layer never reaches for: it says what happened, and the
/// layers above decide deadlines, exit codes and what a run does.
const ABOVE_THE_STORES: &[&str] = &[
    "lease",
    "exit",
    "run",
    "supervisor",
    "inspect",
    "cli",
    "history",
    "release",
    "report",
    "reach",
    "usage",
];

/// Where the process may end, by file and function: each process's entry
/// point (elect's exit table, the guard's and the reaper's mains) and the
/// children forked ahead of the command, which `_exit` so as not to run
/// their copy of elect's destructors.
const EXITS: &[(&str, &[&str])] = &[
    ("exit.rs", &["exit"]),
    ("supervisor/guard.rs", &["main", "forked"]),
    ("supervisor/reaper.rs", &["main", "die_as", "fail"]),
    ("supervisor/mod.rs", &["exit_forked"]),
    ("supervisor/launch.rs", &["fork"]),
    ("supervisor/sentinel.rs", &["fork"]),
];

/// A source file by its path from `src/`, with the lines of its code.
type Source = (String, Vec<(usize, String)>);

/// A rule: the lines of the sources that break it.
type Rule = fn(&[Source]) -> Vec<String>;

/// Every `.rs` file under `src`, by its path from there, with the lines of
/// its code: comments, a trailing `#[cfg(test)]` module and `tests.rs`
/// files left out.
pub fn read(src: &Path) -> std::io::Result<Vec<Source>> {
    fn walk(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()?;
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, into)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                into.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(src, &mut files)?;
    let mut sources = Vec::new();
    // This file names what it looks for; unit tests in files of their
    // own are test code.
    for path in files
        .into_iter()
        .filter(|path| !path.ends_with("layers.rs") && !path.ends_with("tests.rs"))
    {
        let name = path
            .strip_prefix(src)
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&path)?;
        sources.push((name, code(&text)));
    }
    Ok(sources)
}

/// The lines of `text` that are code, numbered from 1.
fn code(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .take_while(|(_, l)| *l != "#[cfg(test)]")
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(n, l)| (n + 1, l.to_string()))
        .collect()
}

/// Every line of `sources` that crosses a boundary, with the rule it
/// breaks; none if the layers hold.
pub fn violations(sources: &[Source]) -> Vec<String> {
    let rules: [(&str, Rule); 4] = [
        ("the store layer reaches for nothing above it", store_layer),
        (
            "one store knows no other; only store/mod.rs names a store",
            registry,
        ),
        ("only run/ and lib.rs reach into run/", into_run),
        ("only a process's entry point ends it", exits),
    ];
    rules
        .iter()
        .flat_map(|(rule, check)| {
            check(sources)
                .into_iter()
                .map(move |w| format!("{w}  [{rule}]"))
        })
        .collect()
}

/// The function a line lies in: the last `fn NAME` above it.
fn enclosing_fn(code: &[(usize, String)], at: usize) -> Option<String> {
    code[..=at].iter().rev().find_map(|(_, line)| {
        let (_, after) = line.split_once("fn ")?;
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty()).then_some(name)
    })
}

fn store_layer(sources: &[Source]) -> Vec<String> {
    let stores = stores(sources);
    let mut wrong = Vec::new();
    for (file, code) in sources {
        let Some(store_file) = file.strip_prefix("store/") else {
            continue;
        };
        let own = store_file.split_once('/').map(|(folder, _)| folder);
        for (n, line) in code {
            for module in ABOVE_THE_STORES {
                if line.contains(&format!("crate::{module}::"))
                    || line.contains(&format!("crate::{module}}}"))
                    || line.contains(&format!("crate::{{{module}"))
                {
                    wrong.push(format!("src/{file}:{n}: {}", line.trim()));
                }
            }
            // One store knows no other.
            for other in stores.iter().filter(|s| Some(s.as_str()) != own) {
                if own.is_some()
                    && (line.contains(&format!("store::{other}::"))
                        || line.contains(&format!("super::super::{other}::")))
                {
                    wrong.push(format!("src/{file}:{n}: {}", line.trim()));
                }
            }
        }
    }
    wrong
}

fn registry(sources: &[Source]) -> Vec<String> {
    let stores = stores(sources);
    let mut wrong = Vec::new();
    for (file, code) in sources {
        let in_a_store = stores
            .iter()
            .any(|s| file.starts_with(&format!("store/{s}/")));
        if in_a_store || file == "store/mod.rs" || file == "fuzz.rs" {
            continue;
        }
        for (n, line) in code {
            if stores
                .iter()
                .any(|s| line.contains(&format!("store::{s}::")))
            {
                wrong.push(format!("src/{file}:{n}: {}", line.trim()));
            }
        }
    }
    wrong
}

fn into_run(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .filter(|(file, _)| !file.starts_with("run/") && file != "lib.rs")
        .flat_map(|(file, code)| {
            code.iter()
                .filter(|(_, l)| l.contains("crate::run"))
                .map(move |(n, l)| format!("src/{file}:{n}: {}", l.trim()))
        })
        .collect()
}

fn exits(sources: &[Source]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, code) in sources {
        for (i, (n, line)) in code.iter().enumerate() {
            let exits = ["process::exit(", "_exit(", "exit_forked("];
            if !exits.iter().any(|e| line.contains(e)) {
                continue;
            }
            let inside = enclosing_fn(code, i).unwrap_or_default();
            let allowed = EXITS
                .iter()
                .any(|(f, fns)| *f == file && fns.contains(&inside.as_str()));
            if !allowed {
                wrong.push(format!("src/{file}:{n} (fn {inside}): {}", line.trim()));
            }
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(file: &str, text: &str) -> Source {
        (file.to_string(), code(text))
    }

    #[test]
    fn elect_s_own_source_keeps_its_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let sources = read(&src).unwrap();
        assert_eq!(
            stores(&sources),
            ["etcd", "postgres", "mysql", "zk", "k8s", "file"]
        );
        let wrong = violations(&sources);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn each_kind_of_crossing_is_caught() {
        let crossings = [
            source("store/zk/session.rs", "use crate::lease::Timing;"),
            source("store/retry.rs", "use crate::{exit, log};"),
            source("store/etcd/lock.rs", "use crate::store::zk::Node;"),
            source(
                "inspect/status.rs",
                "let x = crate::store::file::FileStore::open();",
            ),
            source("release.rs", "use crate::run::report;"),
            source("store/mod.rs", "fn open() {\n    std::process::exit(1);\n}"),
        ];
        let registry = || {
            source(
                "store/mod.rs",
                "const KINDS: &[&Kind] = &[\n    &etcd::KIND,\n    &zk::KIND,\n    &file::KIND,\n];",
            )
        };
        for crossing in crossings {
            let wrong = violations(&[registry(), crossing.clone()]);
            assert_eq!(wrong.len(), 1, "{crossing:?}: {wrong:?}");
        }
        let fine = [
            registry(),
            source(
                "store/zk/session.rs",
                "// crate::lease::Timing, once\nuse crate::clock::Instant;",
            ),
            source("store/mod.rs", "use crate::store::zk::ZooKeeper;"),
            source("run/turn.rs", "use crate::run::job::Job;"),
            source(
                "exit.rs",
                "fn exit(code: u8) -> ! {\n    std::process::exit(code.into())\n}",
            ),
        ];
        assert!(violations(&fine).is_empty(), "{:?}", violations(&fine));
    }
}
