//! elect's own lines on stderr.
//!
//! Cron mails whatever a job prints, so a run where nothing went wrong
//! prints nothing of elect's own. Errors and a lease loss are one line each;
//! `-q` drops even the busy notice; `-v` adds the lifecycle with timestamps.

use std::fmt::Arguments;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::SystemTime;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Quiet = 0,
    Normal = 1,
    Verbose = 2,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Normal as u8);

pub fn set(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

fn enabled(level: Level) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level as u8
}

/// Something went wrong: always printed.
pub fn error(args: Arguments<'_>) {
    eprintln!("elect: {args}");
}

/// Worth a line in a cron mail, unless `-q`.
pub fn notice(args: Arguments<'_>) {
    if enabled(Level::Normal) {
        eprintln!("elect: {args}");
    }
}

/// The lifecycle, with `-v`.
pub fn verbose(args: Arguments<'_>) {
    if enabled(Level::Verbose) {
        let now = humantime::format_rfc3339_millis(SystemTime::now());
        eprintln!("elect: {now} {args}");
    }
}
