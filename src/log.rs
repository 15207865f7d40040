//! elect's own lines on stderr.
//!
//! Cron mails whatever a job prints, so a run where nothing went wrong
//! prints nothing of elect's own. Errors and a lease loss are one line each;
//! `-q` drops even the busy notice; `-v` adds the lifecycle. In text, every
//! line carries a timestamp (a cron mail or a container log is read later)
//! except a usage or configuration error, found before anything started. `--log-format json` makes every line a JSON object.

use std::borrow::Cow;
use std::fmt::Arguments;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::SystemTime;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Quiet = 0,
    Normal = 1,
    Verbose = 2,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Normal as u8);
static JSON: AtomicBool = AtomicBool::new(false);
/// What every JSON line carries once it is known: `lock`, `identity`,
/// `shard`, `token`.
static CONTEXT: Mutex<Vec<(&'static str, serde_json::Value)>> = Mutex::new(Vec::new());

/// From now on, every JSON line carries `field`: `value`.
pub fn context(field: &'static str, value: impl Into<serde_json::Value>) {
    let value = value.into();
    let mut context = CONTEXT.lock().unwrap_or_else(|e| e.into_inner());
    match context.iter_mut().find(|(f, _)| *f == field) {
        Some((_, v)) => *v = value,
        None => context.push((field, value)),
    }
}

pub fn set(level: Level, json: bool) {
    LEVEL.store(level as u8, Ordering::Relaxed);
    JSON.store(json, Ordering::Relaxed);
}

/// Whether stderr gets JSON lines.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Print one line, as text or as a JSON object for log shippers: with
/// the context's fields, and `event` and `exit_code` when given.
fn emit_with(
    level: &str,
    args: Arguments<'_>,
    stamp: bool,
    event: Option<&str>,
    exit_code: Option<u8>,
) {
    let now = SystemTime::now();
    let message = args.to_string();
    let message = escaped(&message);
    let mut line = if JSON.load(Ordering::Relaxed) {
        let mut object = serde_json::json!({
            "time": humantime::format_rfc3339_millis(now).to_string(),
            "level": level,
            "message": message,
        });
        let context = CONTEXT.lock().unwrap_or_else(|e| e.into_inner());
        for (field, value) in context.iter() {
            object[*field] = value.clone();
        }
        if let Some(event) = event {
            object["event"] = event.into();
        }
        if let Some(code) = exit_code {
            object["exit_code"] = code.into();
        }
        object.to_string()
    } else if stamp {
        format!("elect: {} {message}", humantime::format_rfc3339_millis(now))
    } else {
        format!("elect: {message}")
    };
    line.push('\n');
    // One write(2) per line: many processes share one stderr (cron,
    // systemd, containers), and a line written in pieces gets torn. A pipe
    // keeps writes of up to PIPE_BUF (4096) bytes whole.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `text` with each control character escaped (`\n`, `\u{1b}`), as
/// lock names are shown: what a user gave (a store URL, a path) and what a
/// store or a library said reach the terminal as one line of text, never
/// as a line break or a terminal's control sequence.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c.is_control() {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn emit(level: &str, args: Arguments<'_>, stamp: bool) {
    emit_with(level, args, stamp, None, None);
}

/// A step of a holder's life, named `event` in JSON (`acquired`,
/// `started`, `ended`, `lost`, `released`, `busy`), at `level` (`Quiet`:
/// an error, always printed).
pub fn event(level: Level, event: &str, args: Arguments<'_>) {
    if enabled(level) {
        let name = match level {
            Level::Verbose => "info",
            Level::Normal => "notice",
            Level::Quiet => "error",
        };
        emit_with(name, args, true, Some(event), None);
    }
}

/// How elect ends, when it says why: an error with its exit code.
pub fn exit_error(code: u8, usage: bool, args: Arguments<'_>) {
    emit_with("error", args, !usage, Some("exit"), Some(code));
}

/// Whether stderr shows `notice`s: the live waiting line follows the same rule.
pub fn notices_shown() -> bool {
    enabled(Level::Normal) && !JSON.load(Ordering::Relaxed)
}

/// Whether an event of `level` is written at all (as text or JSON): a look
/// made only to say something is skipped when it would not be.
pub fn shows(level: Level) -> bool {
    enabled(level)
}

fn enabled(level: Level) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level as u8
}

/// Something went wrong: always printed.
pub fn error(args: Arguments<'_>) {
    emit("error", args, true);
}

/// Something failed that leaves the run's outcome as it is (a record the
/// store did not take): always printed.
pub fn warn(args: Arguments<'_>) {
    emit("warning", args, true);
}

/// The command line or the configuration is wrong, found before anything
/// started: always printed, without a timestamp in text.
pub fn usage_error(args: Arguments<'_>) {
    emit("error", args, false);
}

/// Worth a line in a cron mail, unless `-q`.
pub fn notice(args: Arguments<'_>) {
    if enabled(Level::Normal) {
        emit("notice", args, true);
    }
}

/// The lifecycle, with `-v`.
pub fn verbose(args: Arguments<'_>) {
    if enabled(Level::Verbose) {
        emit("info", args, true);
    }
}
