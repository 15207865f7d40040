//! The value parsers of the command line: durations, booleans, signals,
//! each with the message that says what to write instead.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::BOOLEANS;
use super::run::Wait;

/// Why a value on the command line (or in its variable) is refused: each
/// message says what to write instead; clap names the flag before it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("a duration cannot be negative")]
    Negative,
    /// A bare number: seconds are the likely meaning of a small one.
    #[error("give a unit, e.g. {0}s")]
    NoUnitSmall(String),
    #[error("give a unit, e.g. {0}ms or {0}s")]
    NoUnit(String),
    #[error("a duration too long to count")]
    Overflow,
    #[error("not a duration; write a number and a unit: 1500ms, 15s, 2m, 1h 30m")]
    NotADuration,
    #[error("a duration longer than a year is surely a typo")]
    OverAYear,
    #[error("too short; the shortest --connect-timeout is 1ms")]
    ConnectTimeoutTooShort,
    #[error("too short; the shortest TTL is 1s")]
    TtlTooShort,
    #[error("too long; the longest TTL is 24h")]
    TtlTooLong,
    #[error("to not wait at all, write 0 or use -n; else forever, or a duration: 30s, 5m")]
    WaitNever,
    #[error(
        "not a duration; write forever, 0 (do not wait), or a number and a unit: 30s, 5m, 1h 30m"
    )]
    WaitNotADuration,
    #[error("not a yes or no; write {}", BOOLEANS)]
    NotABool,
    #[error("no signal numbered {0}")]
    NoSignalNumbered(i32),
    #[error("no signal of that name; write a name such as {} or a number", SIGNAL_NAMES.join(", "))]
    NoSignalNamed,
}

/// Durations as humans write them: `1500ms`, `15s`, `2m`, `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(ValueError::Negative);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // The reading a flag takes: seconds for small numbers (a --ttl in
        // milliseconds would be under its 1 s minimum), else milliseconds.
        return Err(match text.parse::<u64>() {
            Ok(n) if n < 100 => ValueError::NoUnitSmall(text.into()),
            _ => ValueError::NoUnit(text.into()),
        });
    }
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => ValueError::Overflow,
        _ => ValueError::NotADuration,
    })?;
    if duration > Duration::from_secs(365 * 24 * 3600) {
        return Err(ValueError::OverAYear);
    }
    Ok(duration)
}

/// The bound on reaching a store: 1ms at least. Less (0s, 1ns) is no
/// bound a store could meet, on any store: a usage error, not a store
/// that seems unavailable.
pub(super) fn parse_connect_timeout(text: &str) -> Result<Duration, ValueError> {
    let bound = parse_duration(text)?;
    if bound < Duration::from_millis(1) {
        return Err(ValueError::ConnectTimeoutTooShort);
    }
    Ok(bound)
}

/// A lease's time-to-live: 1s to 24h.
pub(super) fn parse_ttl(text: &str) -> Result<Duration, ValueError> {
    let ttl = parse_duration(text)?;
    let (min, max) = (Duration::from_secs(1), Duration::from_secs(24 * 3600));
    if ttl < min {
        return Err(ValueError::TtlTooShort);
    }
    if ttl > max {
        return Err(ValueError::TtlTooLong);
    }
    Ok(ttl)
}

pub(super) fn parse_wait(text: &str) -> Result<Wait, ValueError> {
    match text.trim() {
        "forever" | "inf" | "infinite" => Ok(Wait::Forever),
        "0" => Ok(Wait::For(Duration::ZERO)),
        "never" | "no" | "none" => Err(ValueError::WaitNever),
        other => parse_duration(other).map(Wait::For).map_err(|e| match e {
            ValueError::NotADuration => ValueError::WaitNotADuration,
            e => e,
        }),
    }
}

/// Yes or no, as environment variables spell it.
pub fn parse_bool(text: &str) -> Result<bool, ValueError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" | "on" => Ok(true),
        "0" | "false" | "no" | "n" | "off" | "" => Ok(false),
        _ => Err(ValueError::NotABool),
    }
}

/// Signal names offered to shell completion; any other name or number works too.
pub const SIGNAL_NAMES: &[&str] = &["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM", "KILL"];

/// [`parse_signal`], with the usual names as possible values for completion.
#[derive(Clone, Copy, Debug)]
pub struct SignalParser;

impl clap::builder::TypedValueParser for SignalParser {
    type Value = Signal;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Signal, clap::Error> {
        let parse: fn(&str) -> Result<Signal, ValueError> = parse_signal;
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            SIGNAL_NAMES
                .iter()
                .map(|n| clap::builder::PossibleValue::new(*n)),
        ))
    }
}

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(text: &str) -> Result<Signal, ValueError> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| ValueError::NoSignalNumbered(n));
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map_err(|_| ValueError::NoSignalNamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("-1s").is_err());
        assert!(
            parse_duration("15")
                .unwrap_err()
                .to_string()
                .contains("unit")
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("9999999999h").is_err());
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert!(parse_wait("never").unwrap_err().to_string().contains("-n"));
        assert!(
            parse_wait("soon")
                .unwrap_err()
                .to_string()
                .contains("forever")
        );
    }

    #[test]
    fn booleans() {
        for yes in ["1", "true", "TRUE", "yes", "on", "y"] {
            assert_eq!(parse_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "false", "No", "off", "n", ""] {
            assert_eq!(parse_bool(no), Ok(false), "{no}");
        }
        assert!(
            parse_bool("maybe")
                .unwrap_err()
                .to_string()
                .contains("true")
        );
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("TERM"), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Ok(Signal::SIGKILL));
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("99").is_err());
    }
}
