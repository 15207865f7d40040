//! The boundaries ARCHITECTURE.md draws, kept by a test that reads the
//! source: a wrong import or a stray exit fails `cargo test`, not a review.
//! Comments and test modules are not looked at.

use std::path::{Path, PathBuf};

/// The stores, each a folder of `src/store/`.
const STORES: &[&str] = &["etcd", "postgres", "mysql", "zk", "k8s", "file"];

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

/// Every `.rs` file under `src/`, by its path from `src/`, with the lines
/// of its code: comments, a trailing `#[cfg(test)]` module and `tests.rs`
/// files left out.
fn sources() -> Vec<(String, Vec<(usize, String)>)> {
    fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") {
                into.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        // This file names what it looks for; unit tests in files of
        // their own are test code.
        .filter(|path| !path.ends_with("layers.rs") && !path.ends_with("tests.rs"))
        .map(|path| {
            let name = path.strip_prefix(&src).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text
                .lines()
                .enumerate()
                .take_while(|(_, l)| *l != "#[cfg(test)]")
                .filter(|(_, l)| !l.trim_start().starts_with("//"))
                .map(|(n, l)| (n + 1, l.to_string()))
                .collect();
            (name, code)
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

#[test]
fn the_store_layer_reaches_for_nothing_above_it() {
    let mut wrong = Vec::new();
    for (file, code) in sources() {
        let Some(store_file) = file.strip_prefix("store/") else {
            continue;
        };
        let own = store_file.split_once('/').map(|(folder, _)| folder);
        for (n, line) in &code {
            for module in ABOVE_THE_STORES {
                if line.contains(&format!("crate::{module}::"))
                    || line.contains(&format!("crate::{module}}}"))
                    || line.contains(&format!("crate::{{{module}"))
                {
                    wrong.push(format!("src/{file}:{n}: {}", line.trim()));
                }
            }
            // One store knows no other.
            for other in STORES.iter().filter(|s| Some(**s) != own) {
                if own.is_some()
                    && (line.contains(&format!("store::{other}::"))
                        || line.contains(&format!("super::super::{other}::")))
                {
                    wrong.push(format!("src/{file}:{n}: {}", line.trim()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_the_registry_names_a_store() {
    let mut wrong = Vec::new();
    for (file, code) in sources() {
        let in_a_store = STORES
            .iter()
            .any(|s| file.starts_with(&format!("store/{s}/")));
        if in_a_store || file == "store/mod.rs" || file == "fuzz.rs" {
            continue;
        }
        for (n, line) in &code {
            if STORES
                .iter()
                .any(|s| line.contains(&format!("store::{s}::")))
            {
                wrong.push(format!("src/{file}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_run_and_the_top_reach_into_run() {
    let wrong: Vec<String> = sources()
        .into_iter()
        .filter(|(file, _)| !file.starts_with("run/") && file != "lib.rs")
        .flat_map(|(file, code)| {
            code.into_iter()
                .filter(|(_, l)| l.contains("crate::run"))
                .map(move |(n, l)| format!("src/{file}:{n}: {}", l.trim()))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_a_process_s_entry_ends_it() {
    let mut wrong = Vec::new();
    for (file, code) in sources() {
        for (i, (n, line)) in code.iter().enumerate() {
            let exits = ["process::exit(", "_exit(", "exit_forked("];
            if !exits.iter().any(|e| line.contains(e)) {
                continue;
            }
            let inside = enclosing_fn(&code, i).unwrap_or_default();
            let allowed = EXITS
                .iter()
                .any(|(f, fns)| *f == file && fns.contains(&inside.as_str()));
            if !allowed {
                wrong.push(format!("src/{file}:{n} (fn {inside}): {}", line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
