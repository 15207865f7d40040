//! Reading the command line: clap parses it; this module says what went
//! wrong in one line that tells what to type instead, and knows before
//! parsing whether those lines are to be JSON.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::cli::Cli;
use crate::exit::{Failure, Outcome};

/// The variable that sets `--log-format`.
const LOG_FORMAT_VARIABLE: &str = "ELECT_LOG_FORMAT";

/// Whether elect's lines are to be JSON, from the raw arguments and the
/// environment: known before clap has parsed, so that a usage error is
/// JSON too.
pub fn json_requested(args: &[OsString]) -> bool {
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    let mut from_args = None;
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        if word == "--log-format" {
            from_args = words.next().map(|v| v.into_owned());
        } else if let Some(value) = word.strip_prefix("--log-format=") {
            from_args = Some(value.to_string());
        }
    }
    match from_args {
        Some(format) => format == "json",
        None => std::env::var(LOG_FORMAT_VARIABLE).is_ok_and(|v| v == "json"),
    }
}

/// The command definition, with variables that are set but empty treated
/// as unset (each subcommand's own flags when it is built).
fn command() -> clap::Command {
    crate::cli::without_empty_env(Cli::command())
}

/// Parse the command line, or say in one line what is wrong with it.
pub fn parse(args: &[OsString]) -> Result<Cli, Outcome> {
    // Built again, whole, for an error only: a copy costs more than the
    // parse, and the parse builds only the subcommand given.
    let whole = || {
        let mut cmd = command();
        cmd.build();
        cmd
    };
    if let Some(message) = single_dash_long(args, whole) {
        return Err(usage(&message));
    }
    let matches = match command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => return Err(failed(&e, args, &whole())),
    };
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| failed(&e, args, &whole()))?;
    settle(&mut cli, &matches)?;
    Ok(cli)
}

/// Where a flag's value came from.
fn source(matches: &ArgMatches, id: &str) -> Option<ValueSource> {
    matches.value_source(id)
}

/// Flags that contradict each other: an error when both are on the command
/// line; otherwise the command line wins over the environment.
fn settle(cli: &mut Cli, matches: &ArgMatches) -> Result<(), Outcome> {
    let on_line = |m: &ArgMatches, id: &str| source(m, id) == Some(ValueSource::CommandLine);
    if cli.quiet && cli.verbose {
        match (on_line(matches, "quiet"), on_line(matches, "verbose")) {
            (true, true) => {
                return Err(usage(
                    "-q and -v cannot be used together (see elect --help)",
                ));
            }
            (true, false) => cli.verbose = false,
            (false, true) => cli.quiet = false,
            (false, false) => {
                return Err(usage(
                    "ELECT_QUIET and ELECT_VERBOSE are both on; turn one off (see elect --help)",
                ));
            }
        }
    }
    if let Some(run) = matches.subcommand_matches("run")
        && run.get_flag("no_wait")
        && on_line(run, "wait")
    {
        return Err(usage(
            "--wait and --no-wait (-n) cannot be used together; give one (see elect run --help)",
        ));
    }
    if let Some((name, sub)) = matches.subcommand() {
        blank_store(name, sub)?;
    }
    Ok(())
}

/// A store named as nothing: `--store ''`, or `ELECT_STORE` set to nothing
/// or blanks (which, unlike other variables, does not count as unset). It
/// would mean the default store, most likely not the one meant (a variable
/// left unset in a unit file or a script): a lock taken there excludes no
/// one.
fn blank_store(name: &str, sub: &ArgMatches) -> Result<(), Outcome> {
    const VARIABLE: &str = "ELECT_STORE";
    let Ok(given) = sub.try_get_one::<String>("store") else {
        return Ok(());
    };
    let shown = |value: &str| format!("'{}'", crate::log::escaped(value));
    let (how, value) = match (given, source(sub, "store")) {
        (Some(value), Some(ValueSource::CommandLine)) => ("--store", value.clone()),
        (Some(value), _) => (VARIABLE, value.clone()),
        // Set but empty: the flag forgot the variable.
        (None, _) => match std::env::var_os(VARIABLE) {
            Some(value) => (VARIABLE, value.to_string_lossy().into_owned()),
            None => return Ok(()),
        },
    };
    if !value.trim().is_empty() {
        return Ok(());
    }
    let typed = match how {
        "--store" => format!("--store {}", shown(&value)),
        _ => format!("{VARIABLE}={}", shown(&value)),
    };
    Err(usage(&format!(
        "{typed} names no store: give a store URL, one of {}; or give neither --store nor \
         {VARIABLE} for {} (see elect {name} --help)",
        crate::store::forms().join(", "),
        crate::store::DEFAULT_STORE
    )))
}

/// A long option typed with one dash (`-lock x`, as other tools take
/// them): clap reads it as a short option with a value glued on (`-l ock`),
/// which may even parse, naming the wrong lock. Before `--`, a word of one
/// dash whose name is a long option of the command means that option. The
/// whole command (`whole`) is built only for a word that could be one:
/// every start would pay for it otherwise.
fn single_dash_long(args: &[OsString], whole: impl Fn() -> clap::Command) -> Option<String> {
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|w| w != "--")
        .collect();
    // The option's name and its value, of each word of one dash.
    let candidates: Vec<(&str, &str, Option<&str>)> = words
        .iter()
        .filter_map(|word| {
            let rest = word.strip_prefix('-').filter(|r| !r.starts_with('-'))?;
            let (option, value) = match rest.split_once('=') {
                Some((option, value)) => (option, Some(value)),
                None => (rest, None),
            };
            (option.len() >= 2).then_some((word.as_str(), option, value))
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let cmd = whole();
    let sub = subcommand(args, &cmd);
    let longs: Vec<&str> = sub
        .into_iter()
        .chain(std::iter::once(&cmd))
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_long())
        .collect();
    let (word, option, value) = candidates
        .into_iter()
        .find(|(_, option, _)| longs.contains(option))?;
    let name = match sub {
        Some(s) => format!("elect {}", s.get_name()),
        None => "elect".to_string(),
    };
    let meant = match value {
        Some(value) => format!("--{option}={value}"),
        None => format!("--{option}"),
    };
    Some(format!(
        "'{word}' has one dash; did you mean {meant}? (a long option takes two; see \
         {name} --help)"
    ))
}

/// The one of `known` that `word` was most likely meant to be, if one is
/// close: judged as clap's did-you-mean judges an option or a command
/// (`strsim::jaro` above 0.7), so that elect suggests alike wherever it does.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .filter(|k| *k != word)
        .map(|k| (strsim::jaro(word, k), k))
        .filter(|(close, _)| *close > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

fn usage(message: &str) -> Outcome {
    Failure::usage(message).into()
}

/// What to do with clap's error: help and version are printed and exit 0;
/// a missing command lists the commands; the rest is one line, exit 64.
fn failed(e: &clap::Error, args: &[OsString], cmd: &clap::Command) -> Outcome {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            Outcome::Exit(0)
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            if subcommand(args, cmd).is_none() =>
        {
            commands(cmd);
            Outcome::Exit(crate::exit::Code::Usage.value())
        }
        _ => Failure::usage(explain(e, args, cmd)).into(),
    }
}

/// Bare `elect`: the commands, each with its one line, on stderr.
fn commands(cmd: &clap::Command) {
    let subs: Vec<(&str, String)> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            (s.get_name(), about.trim_end_matches('.').to_string())
        })
        .collect();
    if crate::log::json() {
        let names: Vec<&str> = subs.iter().map(|(n, _)| *n).collect();
        crate::log::usage_error(format_args!(
            "give a command: {} (see elect --help)",
            names.join(", ")
        ));
        return;
    }
    let mut text = String::from("elect: give a command:\n");
    let width = subs.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    for (name, about) in &subs {
        text.push_str(&format!("  {name:<width$}  {about}\n"));
    }
    text.push_str("See elect --help, and elect COMMAND --help for each.\n");
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The subcommand named on the command line, if any.
fn subcommand<'c>(args: &[OsString], cmd: &'c clap::Command) -> Option<&'c clap::Command> {
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        if word == "--" {
            return None;
        }
        if word == "--log-format" {
            words.next();
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        return cmd.find_subcommand(word.as_ref());
    }
    None
}

fn text(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) => Some(v.join(", ")),
        ContextValue::StyledStr(s) => Some(s.to_string()),
        ContextValue::StyledStrs(v) => Some(
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ContextValue::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `--ttl <DUR>` → `--ttl`; `--rejoin[=<WHEN>]` → `--rejoin`.
fn flag_of(display: &str) -> &str {
    display
        .split([' ', '=', '['])
        .next()
        .unwrap_or(display)
        .trim_matches(['<', '>', '.'])
}

/// How the user gave a flag's value: `--ttl 25h`, or `ELECT_TTL=25h` when
/// the value came from the environment.
fn given(
    flag: &str,
    value: &str,
    args: &[OsString],
    sub: Option<&clap::Command>,
    cmd: &clap::Command,
) -> String {
    let long = flag.trim_start_matches('-');
    let arg = sub
        .into_iter()
        .chain([cmd])
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long));
    let on_line = |a: &clap::Arg| {
        args.iter()
            .skip(1)
            .map(|w| w.to_string_lossy())
            .take_while(|w| w != "--")
            .any(|w| {
                w == flag
                    || w.starts_with(&format!("{flag}="))
                    || a.get_short().is_some_and(|s| {
                        w.starts_with('-') && !w.starts_with("--") && w.contains(s)
                    })
            })
    };
    // As it must be typed: `--rejoin=bogus` for a value that needs '='.
    let typed = match arg {
        Some(a) if a.is_require_equals_set() => format!("{flag}={value}"),
        _ => format!("{flag} {value}"),
    };
    match arg {
        Some(a) if !on_line(a) => match a.get_env() {
            Some(env) if std::env::var_os(env).is_some() => {
                format!("{}={value}", env.to_string_lossy())
            }
            _ => typed,
        },
        _ => typed,
    }
}

/// clap's error as one line that says what to type instead.
fn explain(e: &clap::Error, args: &[OsString], cmd: &clap::Command) -> String {
    let sub = subcommand(args, cmd);
    let name = match sub {
        Some(s) => format!("elect {}", s.get_name()),
        None => "elect".to_string(),
    };
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let has_dashes = words.iter().skip(1).any(|w| w == "--");
    let invalid = text(e, ContextKind::InvalidArg).unwrap_or_default();
    let message = match e.kind() {
        ErrorKind::UnknownArgument if invalid.starts_with('-') => {
            // What an etcdctl user types first.
            let flag = invalid.split('=').next().unwrap_or_default();
            match text(e, ContextKind::SuggestedArg) {
                _ if flag == "--endpoints" => format!(
                    "unknown option '{flag}'; elect takes etcd's endpoints as a store URL: \
                     --store etcd://HOST:PORT[,HOST:PORT...]"
                ),
                Some(meant) => format!("unknown option '{invalid}'; did you mean '{meant}'?"),
                None => format!("{name} has no option '{invalid}'"),
            }
        }
        ErrorKind::UnknownArgument if sub.is_some_and(|s| s.get_name() == "run") => {
            let at = words
                .iter()
                .skip(1)
                .position(|w| *w == invalid)
                .map(|i| i + 1);
            let before = at.and_then(|i| words.get(i - 1)).map(String::as_str);
            if before == Some("--rejoin") && matches!(invalid.as_str(), "lost" | "always") {
                format!("--rejoin takes its value after '=': --rejoin={invalid}")
            } else if !has_dashes {
                let shown = match at {
                    Some(i) => format!("{} -- {}", words[..i].join(" "), words[i..].join(" ")),
                    None => "elect run --lock NAME [OPTIONS] -- COMMAND [ARG...]".into(),
                };
                let shown = shown.replacen(&words[0], "elect", 1);
                format!("put -- before the command: {shown}")
            } else {
                format!(
                    "'{invalid}' is not an option of elect run; options go before --, the command after it"
                )
            }
        }
        ErrorKind::UnknownArgument => match sub.map(|s| s.get_name()) {
            Some(s @ ("status" | "break")) => {
                format!(
                    "unexpected '{invalid}'; name the lock with --lock: elect {s} --lock {invalid}"
                )
            }
            _ => format!("unexpected '{invalid}' for {name}"),
        },
        ErrorKind::InvalidSubcommand => {
            let invalid = text(e, ContextKind::InvalidSubcommand).unwrap_or_default();
            let known: Vec<&str> = cmd
                .get_subcommands()
                .map(|s| s.get_name())
                .filter(|n| *n != "help")
                .collect();
            match text(e, ContextKind::SuggestedSubcommand) {
                Some(meant) => format!("unknown command '{invalid}'; did you mean '{meant}'?"),
                None => format!(
                    "unknown command '{invalid}'; the commands are {}",
                    known.join(", ")
                ),
            }
        }
        ErrorKind::InvalidValue => {
            let value = text(e, ContextKind::InvalidValue).unwrap_or_default();
            let flag = flag_of(&invalid);
            let shown = given(flag, &value, args, sub, cmd);
            match text(e, ContextKind::ValidValue).filter(|v| !v.trim().is_empty()) {
                Some(valid) if value.is_empty() => format!("{flag} needs a value: {valid}"),
                Some(valid) => format!("{shown}: write one of {valid}"),
                None => format!("{flag} needs a value"),
            }
        }
        ErrorKind::ValueValidation => {
            let value = text(e, ContextKind::InvalidValue).unwrap_or_default();
            let flag = flag_of(&invalid);
            let why = std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "not valid".into());
            format!("{}: {why}", given(flag, &value, args, sub, cmd))
        }
        ErrorKind::MissingRequiredArgument => {
            let missing: Vec<String> = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(v)) => v.clone(),
                _ => vec![invalid.clone()],
            };
            let command_missing = missing.iter().any(|m| m.contains("COMMAND"));
            match sub.map(|s| s.get_name()) {
                Some("check")
                    if std::env::var_os("ELECT_KEY").is_none()
                        || std::env::var_os("ELECT_TOKEN").is_none() =>
                {
                    "elect check is for COMMAND under elect run, which sets ELECT_LOCK, ELECT_KEY \
                     and ELECT_TOKEN for it: run it from there (or give --lock, --holder-key and \
                     --token)"
                        .to_string()
                }
                Some("run") if command_missing && missing.len() == 1 => {
                    "no command to run: put it after --, as in elect run --lock NAME -- COMMAND [ARG...]"
                        .to_string()
                }
                Some("run") if command_missing => {
                    "elect run needs --lock NAME and a command after --: elect run --lock NAME -- COMMAND [ARG...]"
                        .to_string()
                }
                _ => format!("{name} needs {}", missing.join(" and ")),
            }
        }
        ErrorKind::ArgumentConflict => match text(e, ContextKind::PriorArg) {
            Some(prior) => format!(
                "{} and {} cannot be used together",
                flag_of(&invalid),
                flag_of(&prior)
            ),
            None => first_line(e),
        },
        ErrorKind::NoEquals => format!(
            "{} takes its value after '=': {}=VALUE",
            flag_of(&invalid),
            flag_of(&invalid)
        ),
        _ => first_line(e),
    };
    format!("{message} (see {name} --help)")
}

/// clap's own rendering, down to its first lines.
fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or_default();
    let mut text = first.strip_prefix("error: ").unwrap_or(first).to_string();
    for more in lines.take_while(|l| !l.trim().is_empty()) {
        text.push(' ');
        text.push_str(more.trim());
    }
    text
}

/// A usage error says where to look, whoever found it: the tail that the
/// parser's own errors end with, on those found after parsing.
pub fn tail(outcome: Outcome, command: &str) -> Outcome {
    match outcome {
        Outcome::Fail(mut failure)
            if failure.code == crate::exit::Code::Usage && !failure.message.contains("(see ") =>
        {
            failure.message = format!("{} (see elect {command} --help)", failure.message);
            Outcome::Fail(failure)
        }
        other => other,
    }
}

/// Why a `--listen` value is no address to listen on: what it lacks, and
/// what would do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}; e.g. --listen 9090 (127.0.0.1 only) or --listen 0.0.0.0:9090 (every interface)", .0)]
pub struct ListenError(String);

/// `--listen HOST:PORT`, `:PORT` or `PORT`: loopback unless a host is named.
/// A refusal says why and what would do; the value itself is named by the
/// caller (`--listen foo: `, or `ELECT_LISTEN=foo: `).
pub fn listen_address(text: &str) -> Result<SocketAddr, ListenError> {
    let bad = |why: &str| ListenError(why.to_string());
    let port = |p: &str| match p {
        "" => Err(bad("no port")),
        _ => p
            .parse::<u16>()
            .map_err(|_| bad(&format!("'{p}' is not a port"))),
    };
    let loopback = |p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p);
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(p) = text.strip_prefix(':') {
        return Ok(loopback(port(p)?));
    }
    if let Ok(p) = text.parse::<u16>() {
        return Ok(loopback(p));
    }
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return Err(bad(&format!("'{text}' has no port")));
    }
    match text.rsplit_once(':') {
        None => Err(bad("not a port or HOST:PORT")),
        Some(("localhost", p)) => Ok(loopback(port(p)?)),
        Some((host, p)) if host.parse::<IpAddr>().is_err() && !host.starts_with('[') => {
            port(p)?;
            Err(bad(&format!("'{host}' is not an IP address")))
        }
        Some((_, p)) => {
            port(p)?;
            Err(bad(
                "not HOST:PORT (an IPv6 address in brackets: [::1]:9090)",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_loopback_and_another_host_is_named() {
        let lo = |p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p);
        assert_eq!(listen_address("9090"), Ok(lo(9090)));
        assert_eq!(listen_address(":9090"), Ok(lo(9090)));
        assert_eq!(listen_address("localhost:9090"), Ok(lo(9090)));
        assert_eq!(
            listen_address("0.0.0.0:80").unwrap().to_string(),
            "0.0.0.0:80"
        );
        assert_eq!(listen_address("[::1]:80").unwrap().to_string(), "[::1]:80");
        for bad in ["", ":", "x", "host:1", "1.2.3.4:99999", ":-1", "1.2.3.4"] {
            assert!(listen_address(bad).is_err(), "{bad}");
        }
    }

    fn args(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    /// The one line a command line gets, and that it is a usage error.
    fn said(line: &str) -> String {
        match parse(&args(line)) {
            Err(Outcome::Fail(f)) => {
                assert_eq!(f.code, crate::exit::Code::Usage, "{line}");
                assert!(!f.message.contains('\n'), "{line}: {}", f.message);
                f.message
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn the_closest_name_is_suggested_only_when_close() {
        let known = ["nightly-report", "weekly-backup", "nightly-reports-eu"];
        assert_eq!(closest("nightly-reprot", known), Some("nightly-report"));
        assert_eq!(closest("backup", known), None);
        assert_eq!(closest("nightly-report", ["nightly-report"]), None);
    }

    /// A --listen value that is no address: one line that names it once.
    #[test]
    fn a_listen_value_that_is_no_address_is_named_once() {
        let e_g = "e.g. --listen 9090 (127.0.0.1 only) or --listen 0.0.0.0:9090 (every \
                   interface) (see elect run --help)";
        for (value, why) in [
            ("foo", "not a port or HOST:PORT"),
            ("70000", "not a port or HOST:PORT"),
            (":99999", "'99999' is not a port"),
            ("host:80", "'host' is not an IP address"),
            ("1.2.3.4", "'1.2.3.4' has no port"),
            ("[::1]", "'[::1]' has no port"),
            ("1.2.3.4:x", "'x' is not a port"),
        ] {
            let line = format!("elect run --lock x --listen {value} -- true");
            assert_eq!(said(&line), format!("--listen {value}: {why}; {e_g}"));
        }
    }

    #[test]
    fn usage_errors_say_what_to_type() {
        for (line, expected) in [
            (
                "elect run --lock x echo hi",
                "put -- before the command: elect run --lock x -- echo hi",
            ),
            ("elect run --lcok x -- true", "did you mean '--lock'?"),
            ("elect run --lock x --wait never -- true", "--wait never: "),
            (
                "elect run --lock x --rejoin always -- true",
                "--rejoin takes its value after '=': --rejoin=always",
            ),
            (
                "elect run --lock x --rejoin=sometimes -- true",
                "--rejoin=sometimes: write one of lost, always",
            ),
            ("elect run --lock x", "put it after --"),
            ("elect stauts --lock x", "did you mean 'status'?"),
            ("elect status x", "elect status --lock x"),
            (
                "elect --log-format xml list",
                "--log-format xml: write one of text, json",
            ),
            (
                "elect run --lock x --ttl 15 -- true",
                "--ttl 15: give a unit",
            ),
            (
                "elect run --lock x -q -v -- true",
                "cannot be used together",
            ),
            (
                "elect run --lock x --wait 1s -n -- true",
                "cannot be used together",
            ),
        ] {
            let message = said(line);
            assert!(message.contains(expected), "{line}: {message}");
            assert!(message.ends_with("--help)"), "{line}: {message}");
        }
    }

    /// Every option of every command, given a value it cannot take or none
    /// at all: where the parser refuses, one line that ends by saying
    /// where to look.
    #[test]
    fn every_refused_option_says_where_to_look_in_one_line() {
        let mut cli = Cli::command();
        cli.build();
        let mut refused = 0;
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = sub.get_name();
            for arg in sub
                .get_arguments()
                .filter(|a| a.get_action().takes_values())
            {
                let Some(long) = arg.get_long() else { continue };
                for bad in ["", "=", "!not@valid#", "-1", "99999999999999999999"] {
                    let line = match bad {
                        "" => format!("elect {name} --lock x --{long}"),
                        "=" => format!("elect {name} --lock x --{long}="),
                        _ => format!("elect {name} --lock x --{long} {bad} -- true"),
                    };
                    if let Err(Outcome::Fail(f)) = parse(&args(&line)) {
                        refused += 1;
                        assert!(!f.message.contains('\n'), "{line}: {}", f.message);
                        assert!(f.message.ends_with("--help)"), "{line}: {}", f.message);
                    }
                }
            }
        }
        assert!(refused > 50, "only {refused} refused");
    }

    #[test]
    fn the_log_format_is_known_before_parsing() {
        assert!(json_requested(&args("elect --log-format json run")));
        assert!(json_requested(&args("elect run --log-format=json --lcok")));
        assert!(!json_requested(&args(
            "elect --log-format text run -- x --log-format json"
        )));
    }
}
