//! The generated documentation: man pages and shell completions, made from
//! the clap definitions in [`crate::cli`] and the exit codes in
//! [`crate::exit`], and committed. The test below fails when a committed
//! file no longer matches; `scripts/gen-docs` rewrites them. Other tests
//! here hold the help and the man pages' examples to the definitions;
//! [`guide`]'s hold the guide (`docs/reference.md`) to them: its exit-code
//! tables and its environment table; and every page's links to the
//! headings and files they name.

mod guide;

pub use guide::page;

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
