//! The generated documentation: man pages and shell completions, made from
//! the clap definitions in [`crate::cli`] and the exit codes in
//! [`crate::exit`], and committed. The test below fails when a committed
//! file no longer matches; `scripts/gen-docs` rewrites them. Other tests
//! hold the guide (`docs/reference.md`) to the same definitions: its
//! exit-code tables and its environment table; and every page's links to
//! the headings and files they name.

use std::path::PathBuf;

use clap::{Arg, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};

use crate::cli::{BOOLEANS, Cli, environment};
use crate::exit::{COMMON, INSPECTION, TABLE, codes};

/// The reference's exit-code table of `elect run`.
pub fn markdown_table() -> String {
    let mut out = String::from("| situation | code |\n|---|---|\n");
    for (situation, code) in TABLE {
        out.push_str(&format!("| {situation} | {code} |\n"));
    }
    out
}

/// The reference's exit-code table of the other commands.
pub fn inspection_table() -> String {
    let mut out = String::from("| command | code | situation |\n|---|---|---|\n");
    for (situation, code) in crate::exit::ELECT {
        out.push_str(&format!("| `elect` | {code} | {situation} |\n"));
    }
    for (command, own) in INSPECTION {
        for (situation, code) in *own {
            out.push_str(&format!("| `elect {command}` | {code} | {situation} |\n"));
        }
    }
    for (situation, code) in COMMON {
        out.push_str(&format!("| each of them | {code} | {situation} |\n"));
    }
    out
}

/// The options shown for a command (its own and, once built, elect's
/// global ones), without help and version.
fn options(cmd: &clap::Command) -> Vec<Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .cloned()
        .collect()
}

/// One option as the synopsis shows it: `[--ttl DUR]`, `-l|--lock NAME`,
/// `-- COMMAND [ARG...]`.
fn synopsis_item(arg: &Arg) -> Vec<Inline> {
    let mut out = Vec::new();
    if arg.is_positional() {
        out.push(bold("--"));
        out.push(roman(" "));
        out.push(italic("COMMAND"));
        out.push(roman(" [ARG...]"));
        return out;
    }
    let optional = !arg.is_required_set();
    if optional {
        out.push(roman("["));
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(roman("|"));
        }
        out.push(bold(name.clone()));
    }
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values())
        || matches!(
            arg.get_action(),
            clap::ArgAction::Set | clap::ArgAction::Append
        );
    if takes_value {
        let value = arg
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
        if arg.is_require_equals_set() {
            out.push(roman("[="));
            out.push(italic(value));
            out.push(roman("]"));
        } else {
            out.push(roman(" "));
            out.push(italic(value));
        }
    }
    if optional {
        out.push(roman("]"));
    }
    out
}

fn synopsis(roff: &mut Roff, name: &str, cmd: &clap::Command) {
    roff.control("SH", ["SYNOPSIS"]);
    let mut line = vec![bold(name.replace('-', " "))];
    let args = options(cmd);
    // Required options first, then the rest, then the command.
    let ordered = args
        .iter()
        .filter(|a| a.is_required_set() && !a.is_positional())
        .chain(args.iter().filter(|a| !a.is_required_set()))
        .chain(args.iter().filter(|a| a.is_positional()));
    for arg in ordered {
        line.push(roman(" "));
        line.extend(synopsis_item(arg));
    }
    if cmd.get_name() == "elect" {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
        line.push(roman(" ["));
        line.push(italic("OPTIONS"));
        line.push(roman("]"));
    }
    roff.text(line);
}

/// Each page's EXAMPLES, by command: what an example shows, then its lines.
/// The elect command lines in them are parsed against the definitions in
/// a test below. They call elect where the Debian package puts it,
/// /usr/bin, which is on cron's and systemd's PATH; in an image, where its
/// Dockerfile copies the static binary.
const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "elect",
        &[
            (
                "Run a nightly job once a night, on whichever of several hosts takes the lock first: a host that finds it held gives up at once (exit 75), one that finds it done within 20 hours exits 0 without running it:",
                "elect run --store etcd://etcd-1:2379 --no-wait --once-per 20h --lock nightly-report -- /opt/report/run.sh",
            ),
            (
                "Who holds it, since when, with which token:",
                "elect status --store etcd://etcd-1:2379 --lock nightly-report",
            ),
            (
                "Every lock in the store with its holder:",
                "elect list --store etcd://etcd-1:2379",
            ),
        ],
    ),
    (
        "run",
        &[
            (
                "A crontab line on each of several hosts against a shared etcd: the job runs once a night, on whichever host gets the lock first. --once-per 20h makes a host that comes after the night's run has ended exit 0 without running it (without it, that host would find the lock free and run the job again); -n makes a host that finds it held give up at once (exit 75) and -q keeps them quiet, so cron mails only when something went wrong. cron's PATH is /usr/bin:/bin, where the Debian package puts elect; installed elsewhere, give its full path.",
                "ELECT_STORE=etcd://etcd-1:2379,etcd-2:2379,etcd-3:2379\n\
                 15 2 * * * /usr/bin/elect run -n -q --once-per 20h --lock nightly-report -- /opt/report/run.sh",
            ),
            (
                "On one host, a job that must not overlap itself, on the single-host store:",
                "*/5 * * * * /usr/bin/elect run -n -q --store file --lock sync-mirror -- /usr/local/bin/sync-mirror",
            ),
            (
                "A systemd service that runs on one machine of several. KillMode=mixed sends systemd's SIGTERM to elect alone, which passes it to its command's group; keep --grace shorter than TimeoutStopSec:",
                "[Service]\n\
                 Environment=ELECT_STORE=etcd://etcd-1:2379,etcd-2:2379,etcd-3:2379\n\
                 ExecStart=/usr/bin/elect run --lock billing-worker --ttl 15s --grace 5s -- /opt/billing/worker\n\
                 KillMode=mixed\n\
                 TimeoutStopSec=20s\n\
                 Restart=always",
            ),
            (
                "A container's entrypoint, for the one replica that may write: the others stand by (--wait forever, the default) until the holder goes away. As PID 1, elect also reaps the orphans of its command. Keep --grace shorter than the runtime's stop timeout.",
                "COPY elect /usr/local/bin/elect\n\
                 ENV ELECT_STORE=etcd://etcd-client.etcd.svc:2379\n\
                 ENTRYPOINT [\"/usr/local/bin/elect\", \"run\", \"--lock\", \"writer\", \"--grace\", \"5s\", \"--\", \"/app/server\"]",
            ),
            (
                "Inside the command: stop between steps once the lock is no longer held, and fence each write with the token:",
                "elect run --lock import -- sh -c 'for f in /srv/in/*; do elect check || exit 1; ./load \"$f\" \"$ELECT_TOKEN\"; done'",
            ),
        ],
    ),
    (
        "status",
        &[(
            "Whether the lock is held, as an exit code for a script (0 held, 1 free):",
            "elect status --store etcd://etcd-1:2379 --lock nightly-report >/dev/null && echo held",
        )],
    ),
    (
        "list",
        &[(
            "The locks under one prefix, as JSON:",
            "elect list --store etcd://etcd-1:2379 --prefix jobs/ --json",
        )],
    ),
    (
        "break",
        &[(
            "Ask a holder that is stuck to let go, without the prompt:",
            "elect break --store etcd://etcd-1:2379 --lock nightly-report --yes",
        )],
    ),
    (
        "history",
        &[(
            "Who ran the nightly job in the last day, on which host, and how it ended:",
            "elect history --store etcd://etcd-1:2379 --lock nightly-report --since 24h",
        )],
    ),
    (
        "checkpoint",
        &[(
            "Resume from the last holder's position, and commit each new one while still the holder:",
            "elect run --lock import -- sh -c 'offset=${ELECT_CHECKPOINT:-0}; ./import --from \"$offset\" | while read -r offset; do elect checkpoint put \"$offset\" || exit 1; done'",
        )],
    ),
];

fn examples(roff: &mut Roff, command: &str) {
    let Some((_, examples)) = EXAMPLES.iter().find(|(c, _)| *c == command) else {
        return;
    };
    roff.control("SH", ["EXAMPLES"]);
    for (what, lines) in *examples {
        roff.control("PP", []);
        roff.text([roman(*what)]);
        roff.control("PP", []);
        roff.control("RS", ["4"]);
        roff.control("nf", []);
        for line in lines.lines() {
            roff.text([roman(line)]);
        }
        roff.control("fi", []);
        roff.control("RE", []);
    }
}

/// Whether an ENVIRONMENT entry belongs on a command's page: what elect
/// sets for COMMAND only on elect(1) and elect-run(1).
fn shown_on(command: &str, meaning: &str) -> bool {
    matches!(command, "elect" | "run") || meaning.starts_with("Read:")
}

fn man_page(name: &str, cmd: clap::Command) -> Vec<u8> {
    let command = cmd.get_name().to_string();
    let leaked: &'static str = name.to_string().leak();
    let man = Man::new(cmd.clone().name(leaked))
        .date("")
        .source(format!("elect {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    let mut roff = Roff::new();
    synopsis(&mut roff, name, &cmd);
    roff.to_writer(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    let mut roff = Roff::new();
    if command == "elect" {
        roff.control("SH", ["COMMANDS"]);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            roff.control("TP", []);
            roff.text([bold(format!("elect-{}(1)", sub.get_name()))]);
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            roff.text([roman(about)]);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (situation, code) in codes(&command) {
        roff.control("TP", []);
        roff.text([bold(code.replace('`', ""))]);
        roff.text([roman(situation.replace('`', ""))]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(format!(
        "Each option's variable is named with it above; a variable set to the empty \
         string counts as unset. Yes-or-no variables take {BOOLEANS}."
    ))]);
    for (variable, meaning) in environment()
        .into_iter()
        .filter(|(_, m)| shown_on(&command, m))
    {
        roff.control("TP", []);
        roff.text([bold(variable)]);
        roff.text([roman(meaning)]);
    }
    examples(&mut roff, &command);
    roff.control("SH", ["SEE ALSO"]);
    let see: Vec<String> = match command.as_str() {
        "elect" => cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| format!("elect-{}(1)", s.get_name()))
            .collect(),
        _ => vec!["elect(1)".to_string()],
    };
    roff.text([roman(see.join(", "))]);
    roff.to_writer(&mut out).unwrap();
    out
}

/// The definitions as the documentation sees them: without clap's `help`
/// subcommand, which has no page of its own.
fn definitions() -> clap::Command {
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    cli
}

/// Every generated file, by path relative to the repository.
fn generated() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let cli = definitions();
    files.push(("man/elect.1".into(), man_page("elect", cli.clone())));
    for sub in cli.get_subcommands() {
        let name = format!("elect-{}", sub.get_name());
        files.push((format!("man/{name}.1").into(), man_page(&name, sub.clone())));
    }
    for (shell, file) in [
        (Shell::Bash, "elect.bash"),
        (Shell::Zsh, "_elect"),
        (Shell::Fish, "elect.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "elect", &mut out);
        let script = String::from_utf8(out).unwrap();
        let script = crate::completions::extend(shell, &script);
        files.push((format!("completions/{file}").into(), script.into_bytes()));
    }
    files
}

#[test]
fn generated_files_match_the_definitions() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("ELECT_BLESS").is_some();
    let mut stale = Vec::new();
    for (path, content) in generated() {
        let full = root.join(&path);
        if bless {
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, &content).unwrap();
        } else if std::fs::read(&full).ok().as_deref() != Some(content.as_slice()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}; run scripts/gen-docs"
    );
}

/// A page of the documentation, by its path in the repository
/// (`README.md`, `docs/reference.md`).
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
                "| `--store URL` | `ELECT_STORE`, else `ETCDCTL_ENDPOINTS`, else `{}` | {} |",
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

#[test]
fn each_man_page_has_its_own_exit_codes_and_no_dangling_reference() {
    for (path, content) in generated() {
        let page = String::from_utf8(content).unwrap();
        assert!(!page.contains("elect\\-help"), "{}", path.display());
        assert!(!page.contains("SUBCOMMANDS"), "{}", path.display());
    }
    let status = String::from_utf8(man_page("elect-status", sub("status"))).unwrap();
    let exit =
        &status[status.find("EXIT STATUS").unwrap()..status.find(".SH ENVIRONMENT").unwrap()];
    for code in ["0", "1", "64", "69", "70", "78"] {
        assert!(exit.contains(&format!("\\fB{code}\\fR")), "{code}: {exit}");
    }
    assert!(!exit.contains("75"), "run's codes on status's page: {exit}");
    let run = String::from_utf8(man_page("elect-run", sub("run"))).unwrap();
    for option in [
        "\\-\\-quiet",
        "\\-\\-verbose",
        "\\-\\-log\\-format",
        "ELECT_TTL",
    ] {
        assert!(run.contains(option), "{option} missing from elect-run(1)");
    }
}

#[cfg(test)]
fn sub(name: &str) -> clap::Command {
    definitions().find_subcommand(name).unwrap().clone()
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

#[test]
fn help_shows_each_variable_without_its_value() {
    let mut cli = definitions();
    let help = cli
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(help.contains("[env: ELECT_TTL]"), "{help}");
    for shown in help.split("[env: ").skip(1) {
        let binding = &shown[..shown.find(']').unwrap()];
        assert!(!binding.contains('='), "a value or a stray '=': {binding}");
    }
}

/// The elect command lines of an example: the words from each `elect` (or
/// a path ending in `/elect`) up to a shell operator, or up to the command
/// after `--`; a Dockerfile's JSON ENTRYPOINT as its array (and its COPY
/// of the binary, none). Each with whether it runs inside a command that
/// elect started (after `sh -c`), whose environment elect sets.
#[cfg(test)]
fn example_invocations(lines: &str) -> Vec<(Vec<String>, bool)> {
    let mut found = Vec::new();
    for line in lines.lines().filter(|l| !l.starts_with("COPY ")) {
        if let Some(json) = line.strip_prefix("ENTRYPOINT ") {
            found.push((serde_json::from_str(json).unwrap(), false));
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let inner_from = words.iter().position(|w| *w == "-c").unwrap_or(usize::MAX);
        for (at, word) in words.iter().enumerate() {
            let word = word.trim_start_matches('\'');
            if word != "elect" && !word.ends_with("/elect") {
                continue;
            }
            let mut argv = vec!["elect".to_string()];
            let mut rest = words[at + 1..].iter();
            while let Some(&w) = rest.next() {
                if matches!(w, "|" | "||" | "&&" | ";") || w.starts_with('>') {
                    break;
                }
                argv.push(w.trim_end_matches(';').to_string());
                if w == "--" {
                    argv.extend(rest.next().map(|c| c.to_string()));
                    break;
                }
                if w.ends_with(';') {
                    break;
                }
            }
            found.push((argv, at > inner_from));
        }
    }
    found
}

/// `argv` with what elect sets for its command (ELECT_LOCK, ELECT_KEY,
/// ELECT_TOKEN, ELECT_STORE) given as the flags those variables stand for.
#[cfg(test)]
fn as_inside_the_command(mut argv: Vec<String>) -> Vec<String> {
    let environment = environment();
    let set: Vec<&str> = environment
        .iter()
        .filter(|(_, meaning)| meaning.starts_with("Set for COMMAND"))
        .flat_map(|(names, _)| names.split(", "))
        .collect();
    let cli = definitions();
    let sub = cli.find_subcommand(&argv[1]).unwrap();
    for arg in sub.get_arguments() {
        if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long())
            && set.iter().any(|s| env == *s)
        {
            argv.extend([format!("--{long}"), "1".to_string()]);
        }
    }
    argv
}

#[test]
fn every_example_parses_and_run_shows_cron_systemd_and_a_container() {
    let mut parsed = 0;
    for (command, examples) in EXAMPLES {
        assert!(
            *command == "elect" || definitions().find_subcommand(command).is_some(),
            "examples for no command: {command}"
        );
        for (_, lines) in *examples {
            let invocations = example_invocations(lines);
            assert!(
                !invocations.is_empty(),
                "no elect command line in {lines:?}"
            );
            for (argv, inside) in invocations {
                let argv = if inside {
                    as_inside_the_command(argv)
                } else {
                    argv
                };
                if let Err(e) = Cli::command().try_get_matches_from(&argv) {
                    panic!("{argv:?} does not parse: {e}");
                }
                parsed += 1;
            }
        }
    }
    assert!(
        parsed >= 10,
        "only {parsed} command lines found in the examples"
    );
    let run = String::from_utf8(man_page("elect-run", sub("run"))).unwrap();
    let examples = &run[run
        .find(".SH EXAMPLES")
        .expect("elect-run(1) has no EXAMPLES")..];
    for shown in [
        "15 2 * * * /usr/bin/elect",
        "ExecStart=/usr/bin/elect",
        "ENTRYPOINT",
    ] {
        assert!(
            examples.contains(shown),
            "elect-run(1)'s EXAMPLES lack {shown:?}"
        );
    }
    // cron's PATH is /usr/bin:/bin: a crontab line calls elect by a path
    // that the package installs. A line meant for several hosts' crontabs
    // runs the job once only with --once-per: without it a host whose cron
    // starts after the first host's run ended takes the free lock and runs
    // the job again.
    for (_, examples) in EXAMPLES {
        for (_, lines) in *examples {
            for line in lines.lines().filter(|l| l.contains("* * ")) {
                assert!(line.contains(" /usr/bin/elect "), "{line}");
                let one_host = line.contains("--store file ");
                assert!(
                    one_host || line.contains("--once-per ") || line.contains("--slot "),
                    "a crontab line for several hosts without --once-per runs the job on each: {line}"
                );
            }
        }
    }
    // Every example that runs a nightly job on one of several hosts says how
    // it stays once a night.
    for (_, examples) in EXAMPLES {
        for (what, lines) in *examples {
            if what.contains("nightly") && lines.contains("elect run") {
                assert!(lines.contains("--once-per "), "{what}: {lines}");
            }
        }
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

/// The flags every store reads differently say what each store makes of
/// them, every store named.
#[test]
fn the_help_of_cacert_and_user_names_every_store() {
    let run = sub("run");
    for flag in ["cacert", "user"] {
        let arg = run
            .get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .unwrap();
        let help = arg.get_help().unwrap().to_string();
        for kind in crate::store::kinds() {
            assert!(help.contains(kind.about.title), "--{flag}: {help}");
        }
    }
}
