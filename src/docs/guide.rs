//! The guide, the README and the other pages a user reads, checked against
//! the definitions: the reference's exit-code, option and environment
//! tables, each store's description, and every link.

use std::path::PathBuf;

use super::{definitions, inspection_table, markdown_table, sub};
use crate::cli::environment;

#[cfg(test)]
pub fn page(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every page a user reads: the README, CONTRIBUTING.md, ARCHITECTURE.md
/// and the guide in `docs/`, by path.
#[cfg(test)]
fn pages() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = vec![
        "README.md".to_string(),
        "CONTRIBUTING.md".to_string(),
        "ARCHITECTURE.md".to_string(),
    ];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let relative = path.strip_prefix(&root).unwrap();
                found.push(relative.display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
fn reference() -> String {
    page("docs/reference.md")
}

/// What the guide says of every store, made from the stores' own
/// descriptions, with the page that says it: the `--store` row of the
/// options table, the `ELECT_KEY` and `ELECT_LEASE_ID` rows of what the
/// command sees, and the schemes the completions offer.
#[cfg(test)]
fn store_lines() -> Vec<(&'static str, String)> {
    let abouts: Vec<&crate::store::About> = crate::store::kinds().map(|k| &k.about).collect();
    let in_turn = |items: Vec<String>, and: &str| match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{}{and}{last}", rest.join(", ")),
        _ => items.join(""),
    };
    let forms = abouts.iter().map(|a| a.reference.to_string()).collect();
    let per_store = |what: fn(&crate::store::About) -> &'static str| {
        let each: Vec<String> = abouts
            .iter()
            .map(|a| format!("{}: {}", a.title, what(a)))
            .collect();
        each.join("; ")
    };
    let schemes = abouts
        .iter()
        .flat_map(|a| a.schemes.iter().map(|s| format!("`{s}`")))
        .collect();
    vec![
        (
            "docs/reference.md",
            format!(
                "| `--store URL` | `ELECT_STORE`{}, else `{}` | {} |",
                abouts
                    .iter()
                    .filter_map(|a| a.store_variable)
                    .map(|v| format!(", else `{v}`"))
                    .collect::<String>(),
                crate::store::DEFAULT_STORE,
                in_turn(forms, ", or ")
            ),
        ),
        (
            "docs/reference.md",
            format!("| `ELECT_KEY` | {} |", per_store(|a| a.key)),
        ),
        (
            "docs/reference.md",
            format!("| `ELECT_LEASE_ID` | {} |", per_store(|a| a.lease_id)),
        ),
        (
            "docs/install.md",
            format!("{} after `--store`", in_turn(schemes, " and ")),
        ),
    ]
}

#[test]
fn the_guide_describes_every_store_as_the_store_does() {
    for (path, line) in store_lines() {
        // The pages wrap their prose: compare them unwrapped.
        let text = page(path).replace('\n', " ");
        assert!(text.contains(&line), "{path} must contain:\n{line}");
    }
}

#[test]
fn the_reference_has_the_exit_code_tables() {
    let reference = reference();
    for table in [markdown_table(), inspection_table()] {
        assert!(
            reference.contains(&table),
            "docs/reference.md must contain:\n{table}"
        );
    }
}

/// Every option of `elect run` has a row in the reference's options table.
#[test]
fn the_reference_lists_every_option_of_run() {
    let reference = reference();
    let start = reference
        .find("| option | default | meaning |")
        .expect("docs/reference.md has no options table");
    let rows: Vec<String> = reference[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.replace("\\|", "/").split('|').nth(1).unwrap().to_string())
        .collect();
    for arg in sub("run").get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let flag = format!("`--{long}");
        let also = format!(", `--{long}");
        assert!(
            rows.iter().any(|r| r.contains(&flag) || r.contains(&also)),
            "docs/reference.md's options table has no row for --{long}"
        );
    }
}

/// The README's first screen names the four codes an operator meets,
/// each with what `elect run` exits for it.
#[test]
fn the_readme_exit_codes_are_elects() {
    use crate::exit::Code;
    let readme = page("README.md");
    let start = readme
        .find("| exit | means |")
        .expect("README.md has no exit-code box (| exit | means |)");
    let rows: Vec<u8> = readme[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap().trim().parse().unwrap())
        .collect();
    let codes = [Code::Busy, Code::Lost, Code::Unavailable, Code::Config];
    assert_eq!(rows, codes.map(Code::value), "README.md's exit-code box");
    let first_screen: String = readme.lines().take(50).collect::<Vec<_>>().join("\n");
    for shown in [
        "--once-per",
        "| 75 |",
        "docs/reference.md",
        "apt-get install",
    ] {
        assert!(
            first_screen.contains(shown),
            "README.md's first 50 lines lack {shown:?}"
        );
    }
    for store in [
        "etcd",
        "PostgreSQL",
        "MySQL",
        "MariaDB",
        "ZooKeeper",
        "Kubernetes",
        "file:",
    ] {
        assert!(
            first_screen.contains(store),
            "README.md's first 50 lines do not name {store}"
        );
    }
}

/// The README is a front page; the guide in docs/ has the rest.
#[test]
fn the_readme_is_a_front_page_that_links_every_page_of_the_guide() {
    let readme = page("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 400, "README.md has {lines} lines; at most 400");
    for path in pages().iter().filter(|p| p.starts_with("docs/")) {
        assert!(
            readme.contains(&format!("]({path}")),
            "README.md links nowhere to {path}"
        );
    }
}

/// Every variable bound to a flag, with the flag: `ELECT_TTL` → `--ttl`.
#[cfg(test)]
fn bindings() -> std::collections::BTreeMap<String, String> {
    let cli = definitions();
    let mut all = std::collections::BTreeMap::new();
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        for arg in cmd.get_arguments() {
            if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
                let flag = format!("--{long}");
                let known = all.insert(env.to_string_lossy().into_owned(), flag.clone());
                assert!(
                    known.is_none_or(|k| k == flag),
                    "{env:?} is bound to two flags"
                );
            }
        }
    }
    all
}

/// The reference's environment table, as (variable, flag or "").
#[cfg(test)]
fn reference_environment() -> Vec<(String, String)> {
    let reference = reference();
    let start = reference
        .find("| variable | flag | meaning |")
        .expect("docs/reference.md has no environment table (| variable | flag | meaning |)");
    reference[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let strip = |c: &str| c.trim_matches('`').to_string();
            (strip(cells[1]), strip(cells[2]))
        })
        .collect()
}

#[test]
fn the_reference_environment_table_matches_the_flags() {
    let bound = bindings();
    let table = reference_environment();
    for (variable, flag) in &bound {
        assert!(
            table.iter().any(|(v, f)| v == variable && f == flag),
            "docs/reference.md's environment table lacks | `{variable}` | `{flag}` |"
        );
    }
    let environment = environment();
    let others: Vec<&str> = environment
        .iter()
        .flat_map(|(names, _)| names.split(", "))
        .collect();
    for (variable, flag) in &table {
        match bound.get(variable) {
            Some(real) => assert_eq!(real, flag, "{variable}"),
            None => assert!(
                flag.is_empty() && others.contains(&variable.as_str()),
                "docs/reference.md names {variable} (flag {flag:?}), which elect does not read"
            ),
        }
    }
    for expected in [
        "ELECT_IDENTITY",
        "ELECT_TTL",
        "ELECT_GRACE",
        "ELECT_WAIT",
        "ELECT_SIGNAL",
        "ELECT_LOG_FORMAT",
        "ELECT_BUSY_EXIT_CODE",
        "ELECT_LOST_EXIT_CODE",
        "ELECT_REJOIN",
        "ELECT_CONNECT_TIMEOUT",
        "ELECT_QUIET",
        "ELECT_VERBOSE",
    ] {
        assert!(
            bound.contains_key(expected),
            "{expected} is bound to no flag"
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens,
/// other punctuation dropped.
#[cfg(test)]
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a page's headings make, outside code blocks.
#[cfg(test)]
fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#').trim()));
        }
    }
    found
}

/// `path` with its `.` and `..` taken out.
#[cfg(test)]
fn normal(path: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            part => out.push(part),
        }
    }
    out
}

/// Every link of every page lands: on a file of the repository, and on a
/// heading of that page where it names one.
#[test]
fn every_link_of_every_page_lands() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for path in pages() {
        let text = page(&path);
        let dir = std::path::Path::new(&path).parent().unwrap().to_path_buf();
        for link in text.split("](").skip(1) {
            let target = &link[..link.find(')').unwrap_or(link.len())];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let landed = match file {
                "" => PathBuf::from(&path),
                file => normal(&dir.join(file)),
            };
            assert!(
                root.join(&landed).exists(),
                "{path} links to {target}: no such file"
            );
            if !heading.is_empty() {
                let there = page(&landed.display().to_string());
                assert!(
                    anchors(&there).iter().any(|a| a == heading),
                    "{path} links to {target}, which no heading of {} makes",
                    landed.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} links found");
}

/// cron's PATH is /usr/bin:/bin, systemd before 239 takes only a full path
/// in ExecStart (and none looks in a home directory), and an image has only
/// what its Dockerfile put there: in every page's crontabs, units and
/// images elect is called by its full path.
#[test]
fn the_guide_calls_elect_by_its_path_where_no_path_of_the_users_applies() {
    let mut checked = 0;
    for path in pages() {
        let text = page(&path);
        let mut block = "";
        for line in text.lines() {
            if let Some(kind) = line.strip_prefix("```") {
                block = if block.is_empty() { kind } else { "" };
                continue;
            }
            let applies = matches!(block, "cron" | "ini")
                || line.trim_start().starts_with("#   ") && line.contains("* * *")
                || line.contains("ENTRYPOINT [")
                || line.trim_start().starts_with("command: [");
            if !applies {
                continue;
            }
            // A crontab line for several hosts runs its job once a period
            // only with --once-per or --slot (as the man pages' do).
            if block == "cron" && line.contains("/elect run ") {
                let one_host = line.contains("--store file ");
                assert!(
                    one_host || line.contains("--once-per ") || line.contains("--slot "),
                    "{path}: a crontab line for several hosts without --once-per runs the job on each: {line}"
                );
            }
            for word in line.split([' ', '"', '=', '[']) {
                if word == "elect" {
                    panic!("{path} calls elect by name where PATH may lack it: {line}");
                }
                if word.ends_with("/elect") {
                    assert!(word.starts_with('/'), "{line}");
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked >= 6,
        "only {checked} calls of elect found in crontabs, units and images"
    );
}
