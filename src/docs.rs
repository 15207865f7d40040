//! The generated documentation: man pages and shell completions, made from
//! the clap definitions in [`crate::cli`] and the exit codes in
//! [`crate::exit`], and committed. The test below fails when a committed
//! file no longer matches; `scripts/gen-docs` rewrites them. Other tests
//! hold the README to the same definitions: its exit-code tables and its
//! environment table.

use std::path::PathBuf;

use clap::{Arg, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};

use crate::cli::{BOOLEANS, Cli, ENVIRONMENT};
use crate::exit::{COMMON, INSPECTION, TABLE, codes};

/// The README's exit-code table of `elect run`.
pub fn markdown_table() -> String {
    let mut out = String::from("| situation | code |\n|---|---|\n");
    for (situation, code) in TABLE {
        out.push_str(&format!("| {situation} | {code} |\n"));
    }
    out
}

/// The README's exit-code table of the other commands.
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
    for (variable, meaning) in ENVIRONMENT.iter().filter(|(_, m)| shown_on(&command, m)) {
        roff.control("TP", []);
        roff.text([bold(*variable)]);
        roff.text([roman(*meaning)]);
    }
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

#[cfg(test)]
fn readme() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

#[test]
fn the_readme_has_the_exit_code_tables() {
    let readme = readme();
    for table in [markdown_table(), inspection_table()] {
        assert!(readme.contains(&table), "README.md must contain:\n{table}");
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

/// The README's environment table, as (variable, flag or "").
#[cfg(test)]
fn readme_environment() -> Vec<(String, String)> {
    let readme = readme();
    let start = readme
        .find("| variable | flag | meaning |")
        .expect("README.md has no environment table (| variable | flag | meaning |)");
    readme[start..]
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
fn the_readme_environment_table_matches_the_flags() {
    let bound = bindings();
    let table = readme_environment();
    for (variable, flag) in &bound {
        assert!(
            table.iter().any(|(v, f)| v == variable && f == flag),
            "README.md's environment table lacks | `{variable}` | `{flag}` |"
        );
    }
    let others: Vec<&str> = ENVIRONMENT
        .iter()
        .flat_map(|(names, _)| names.split(", "))
        .collect();
    for (variable, flag) in &table {
        match bound.get(variable) {
            Some(real) => assert_eq!(real, flag, "{variable}"),
            None => assert!(
                flag.is_empty() && others.contains(&variable.as_str()),
                "README.md names {variable} (flag {flag:?}), which elect does not read"
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
