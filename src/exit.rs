//! Exit codes: the single list that `--help`, docs/reference.md and the man page
//! are checked against.
//!
//! The codes follow sysexits(3) where one fits, and the shell's conventions
//! for commands that cannot be run, so that cron wrappers and shell scripts
//! can tell "someone else is running it" from "it broke".

/// Why elect ends, when it does not simply pass on the child's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// The command line was malformed (EX_USAGE).
    Usage = 64,
    /// The store could not be reached or refused us before the lock was held (EX_UNAVAILABLE).
    Unavailable = 69,
    /// elect itself failed (EX_SOFTWARE).
    Software = 70,
    /// The operating system failed elect (EX_OSERR): the guard process
    /// died (elect killed the command's group itself), or the open-file
    /// limit, or the system's table of open files, left elect too few
    /// descriptors.
    OsError = 71,
    /// The lock was not acquired within `--wait` (EX_TEMPFAIL; `--busy-exit-code`).
    Busy = 75,
    /// The lease was lost and elect stopped the child (EX_PROTOCOL; `--lost-exit-code`).
    Lost = 76,
    /// A configuration problem: unreadable file, bad store URL (EX_CONFIG).
    Config = 78,
    /// COMMAND exists but cannot be executed.
    CannotExecute = 126,
    /// COMMAND was not found.
    NotFound = 127,
}

impl Code {
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// The exit-code table of `elect run`, as rows of (situation, code).
pub const TABLE: &[(&str, &str)] = &[
    ("child exited", "the child's code"),
    (
        "child killed by a signal (not by elect)",
        "the same signal, re-raised on elect (as PID 1: 128+N)",
    ),
    (
        "lock not acquired within `--wait`",
        "75, or `--busy-exit-code`",
    ),
    (
        "lease lost, child stopped by elect",
        "76, or `--lost-exit-code`",
    ),
    (
        "store unreachable or refused before the lock was held (at once when nothing listens, the host name does not exist, the TLS handshake is refused or another kind of server answers; else, as at the store's connection limit, after `--connect-timeout`), or gone back to an older state while waiting (one `--ttl` after it was seen)",
        "69",
    ),
    ("usage error", "64"),
    (
        "configuration error (unreadable file, bad store URL, credentials the store refuses or a permission its user lacks, a store server that takes no writes, a `--listen` address that cannot be bound: a port in use, an address not this host's)",
        "78",
    ),
    ("command not found / not executable", "127 / 126"),
    ("elect's own failure", "70"),
    (
        "the guard process died (elect killed the command's group, then let the lock go)",
        "71",
    ),
    (
        "the open-file limit (`ulimit -n`, systemd `LimitNOFILE=`) is too low for elect, even raised as far as its hard limit allows, or the system's table of open files is full (at once)",
        "71",
    ),
];

/// The answers of `status`, `check` and `break`, besides the common codes.
pub const YES: u8 = 0;
pub const NO: u8 = 1;
/// `elect break`: the question on the terminal was not answered yes.
pub const DECLINED: u8 = 2;

/// `elect` itself, without a command.
pub const ELECT: &[(&str, &str)] = &[
    ("`--help`, `--version`", "0"),
    (
        "no command given (the commands are listed on stderr), or another usage error",
        "64",
    ),
];
/// `elect status`.
pub const STATUS: &[(&str, &str)] = &[("the lock is held", "0"), ("the lock is free", "1")];
/// `elect list`.
pub const LIST: &[(&str, &str)] = &[("the locks were listed, also when there are none", "0")];
/// `elect check`.
pub const CHECK: &[(&str, &str)] = &[
    ("the caller holds the lock with its token", "0"),
    ("it does not (stderr says why)", "1"),
];
/// `elect break`.
pub const BREAK: &[(&str, &str)] = &[
    ("the holder let go, or its lease was ended", "0"),
    ("the lock was free, or its holder is not `--token`", "1"),
    ("not confirmed at the terminal's prompt", "2"),
];
/// `elect checkpoint`.
pub const CHECKPOINT: &[(&str, &str)] = &[
    ("get: the checkpoint was printed; put: it was stored", "0"),
    ("get: there is no checkpoint", "1"),
    (
        "put: the caller no longer holds the lock with its token (stderr names the holder now); nothing was stored",
        "76",
    ),
];
/// `elect history`.
pub const HISTORY: &[(&str, &str)] = &[
    ("the history was printed", "0"),
    (
        "the lock has no history (never run, or run with --history 0)",
        "1",
    ),
];
/// The codes `status`, `list`, `check`, `break`, `checkpoint` and `history` share.
pub const COMMON: &[(&str, &str)] = &[
    ("usage error", "64"),
    (
        "store unreachable or refused (at once when nothing listens, the host name does not exist, the TLS handshake is refused or another kind of server answers; else, as at the store's connection limit, after `--connect-timeout`)",
        "69",
    ),
    (
        "configuration error (unreadable file, bad store URL, a `file:` store directory that does not exist, credentials the store refuses or a permission its user lacks, a store server that takes no writes)",
        "78",
    ),
    ("elect's own failure", "70"),
    (
        "the open-file limit (`ulimit -n`, systemd `LimitNOFILE=`) is too low for elect, even raised as far as its hard limit allows, or the system's table of open files is full (at once)",
        "71",
    ),
];

/// Each inspection command with its own codes; [`COMMON`] apply to all.
pub const INSPECTION: &[(&str, &[(&str, &str)])] = &[
    ("status", STATUS),
    ("list", LIST),
    ("check", CHECK),
    ("break", BREAK),
    ("checkpoint", CHECKPOINT),
    ("history", HISTORY),
];

/// All the codes of a command, by its name.
pub fn codes(command: &str) -> Vec<(&'static str, &'static str)> {
    match command {
        "run" => TABLE.to_vec(),
        "elect" => ELECT.to_vec(),
        _ => {
            let own = INSPECTION
                .iter()
                .find(|(name, _)| *name == command)
                .map_or(&[][..], |(_, own)| *own);
            own.iter().chain(COMMON).copied().collect()
        }
    }
}

/// Under the narrowest width at which `--help` wraps (clap's 100 columns).
const HELP_WIDTH: usize = 90;

/// A command's codes as plain text, for `--help`.
pub fn help_text(command: &str) -> String {
    let mut out = String::from("Exit codes:\n");
    for (situation, code) in codes(command) {
        let plain = situation.replace('`', "");
        // Wrapped here, under the text's own column: the help's own wrap
        // would start the next line at the margin.
        let mut line = format!("  {:<5}", short(code));
        for word in plain.split_whitespace() {
            if line.len() + 1 + word.len() > HELP_WIDTH && !line.trim().is_empty() {
                out.push_str(&line);
                out.push('\n');
                line = " ".repeat(8);
            } else {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    if command == "elect" {
        out.push_str("  Each command's own: elect COMMAND --help\n");
    }
    out
}

fn short(code: &str) -> String {
    match code {
        c if c.starts_with("the child") => "N".into(),
        c if c.starts_with("the same signal") => "sig".into(),
        c => c.split(',').next().unwrap_or(c).replace(' ', ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code, listed by a match without a wildcard: a new code does
    /// not compile until it is added here, and then must be in the table.
    fn every_code() -> Vec<Code> {
        let all = [
            Code::Usage,
            Code::Unavailable,
            Code::Software,
            Code::OsError,
            Code::Busy,
            Code::Lost,
            Code::Config,
            Code::CannotExecute,
            Code::NotFound,
        ];
        for code in all {
            match code {
                Code::Usage
                | Code::Unavailable
                | Code::Software
                | Code::OsError
                | Code::Busy
                | Code::Lost
                | Code::Config
                | Code::CannotExecute
                | Code::NotFound => {}
            }
        }
        all.to_vec()
    }

    fn mentions(rows: &[(&str, &str)], code: u8) -> bool {
        rows.iter().any(|(_, c)| {
            c.split(|ch: char| !ch.is_ascii_digit())
                .any(|n| n == code.to_string())
        })
    }

    #[test]
    fn table_mentions_every_code() {
        assert_eq!(every_code().len(), 9);
        for code in every_code() {
            assert!(
                mentions(TABLE, code.value()),
                "{code:?} missing from the table"
            );
        }
    }

    #[test]
    fn inspection_tables_mention_their_answers() {
        for (command, code) in [
            ("status", YES),
            ("status", NO),
            ("list", YES),
            ("check", YES),
            ("check", NO),
            ("break", YES),
            ("break", NO),
            ("break", DECLINED),
        ] {
            assert!(mentions(&codes(command), code), "{command} {code}");
        }
        for code in [
            Code::Usage,
            Code::Unavailable,
            Code::Config,
            Code::Software,
            Code::OsError,
        ] {
            assert!(mentions(COMMON, code.value()), "{code:?}");
        }
        assert!(mentions(ELECT, Code::Usage.value()));
    }
}

/// Why elect gives up: the exit code, and the one line that says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

impl Failure {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// elect's own failure (exit 70).
    pub fn software(message: impl Into<String>) -> Self {
        Failure::new(Code::Software, message)
    }

    /// A usage error (exit 64): a message, or a typed error that says
    /// what was wrong with the input ([`crate::store::NameError`]).
    pub fn usage(why: impl std::fmt::Display) -> Self {
        Failure::new(Code::Usage, why.to_string())
    }

    /// The same failure, its message prefixed with what it concerns.
    pub fn about(self, what: impl std::fmt::Display) -> Self {
        Failure {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }
}

impl From<Failure> for Outcome {
    fn from(failure: Failure) -> Self {
        Outcome::Fail(failure)
    }
}

/// How elect ends: one place maps every result of a run to this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit with this code.
    Exit(u8),
    /// Die by this signal, as the child did, so that a calling shell loop
    /// sees the same thing it would have seen without elect.
    Raise(i32),
    /// Say why in one line, and exit with its code.
    Fail(Failure),
}

impl Outcome {
    /// End the process accordingly: the one place a failure is reported.
    pub fn finish(self) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        match self {
            Outcome::Exit(code) => std::process::exit(code.into()),
            Outcome::Fail(failure) => {
                let usage = matches!(failure.code, Code::Usage | Code::Config);
                let code = failure.code.value();
                crate::log::exit_error(code, usage, format_args!("{}", failure.message));
                std::process::exit(code.into())
            }
            Outcome::Raise(n) => {
                // As PID 1 default dispositions do nothing: use 128+N.
                if std::process::id() != 1 {
                    // The child dumped core, if anything; elect need not.
                    let _ = nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_CORE,
                        0,
                        0,
                    );
                    if signal_hook::low_level::emulate_default_handler(n).is_err()
                        && crate::disposition::set(n, crate::disposition::Disposition::Default)
                            .is_ok()
                    {
                        // A real-time signal, which signal_hook does not
                        // know: by default it ends the process too.
                        let _ = signal_hook::low_level::raise(n);
                    }
                }
                std::process::exit(128 + n)
            }
        }
    }
}

/// What a store's error makes of elect's exit: a store says what went
/// wrong, never how elect ends.
impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::ErrorKind;
        let code = match e.kind {
            ErrorKind::Config | ErrorKind::Denied => Code::Config,
            ErrorKind::Unavailable
            | ErrorKind::Crowded { .. }
            | ErrorKind::Gone
            | ErrorKind::Rewound => Code::Unavailable,
            ErrorKind::Local => Code::OsError,
        };
        Failure::new(code, e.message)
    }
}
