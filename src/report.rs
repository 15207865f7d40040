//! What a run tells the world besides its exit code, for cron jobs that
//! nothing else watches: a metrics file for node_exporter's textfile
//! collector (`--metrics-file`), and a hook run once the lock is released
//! (`--on-end`). Neither can change how the run ends: each failure is one
//! warning line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::history::{Tenure, Verdict};
use crate::log;
use crate::store::Token;

/// Where a run tells how it ended beyond the store: what elect does at its
/// end, and its guard's releaser if elect died.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reports {
    /// `--metrics-file`.
    pub metrics_file: Option<PathBuf>,
    /// `--on-end`.
    pub on_end: Option<String>,
}

impl Reports {
    pub fn any(&self) -> bool {
        self.metrics_file.is_some() || self.on_end.is_some()
    }

    /// When the command starts.
    pub fn started(&self, tenure: &Tenure) {
        if let Some(path) = &self.metrics_file {
            write_metrics(path, tenure, None);
        }
    }

    /// The metrics file and the hook, once the lock is released.
    pub async fn ended(&self, tenure: &Tenure) {
        if let Some(path) = &self.metrics_file {
            write_metrics(path, tenure, tenure.done_ended);
        }
        if let Some(command) = &self.on_end {
            on_end(command, tenure).await;
        }
    }
}

/// How long `--on-end` may run before its process group is killed.
pub const HOOK_WITHIN: Duration = Duration::from_secs(10);

/// The metric names, each with its help (docs/cron.md lists them).
pub const METRICS: &[(&str, &str, &str)] = &[
    (
        "elect_lock_held",
        "gauge",
        "1 while this host holds the lock, else 0.",
    ),
    (
        "elect_lock_token",
        "gauge",
        "The fencing token of this host's last tenure (0 if it never held the lock).",
    ),
    (
        "elect_start_timestamp_seconds",
        "gauge",
        "When this host's last command started, in Unix time (0 if it did not start).",
    ),
    (
        "elect_end_timestamp_seconds",
        "gauge",
        "When this host's last run ended, in Unix time (0 while it runs).",
    ),
    (
        "elect_duration_seconds",
        "gauge",
        "How long this host's last command ran.",
    ),
    (
        "elect_exit_code",
        "gauge",
        "The exit code of this host's last command (-1 if there is none).",
    ),
    (
        "elect_last_success_timestamp_seconds",
        "gauge",
        "When the last run that succeeded ended, as far as this host knows (its own, or the one that made its run unnecessary), in Unix time.",
    ),
    (
        "elect_outcome",
        "gauge",
        "1 for how this host's last run ended, 0 for the others.",
    ),
];

/// Every outcome the `elect_outcome` gauge is written for.
const OUTCOMES: &[Verdict] = &[
    Verdict::Running,
    Verdict::Succeeded,
    Verdict::Failed,
    Verdict::Killed,
    Verdict::Lost,
    Verdict::Broken,
    Verdict::DoneBefore,
    Verdict::Busy,
    Verdict::Error,
    Verdict::ElectDied,
];

fn seconds(at: Option<SystemTime>) -> f64 {
    at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How long the command ran, if it started.
pub fn ran_for(tenure: &Tenure) -> Duration {
    match (tenure.started_at(), tenure.ended_at()) {
        (Some(start), Some(end)) => end.duration_since(start).unwrap_or_default(),
        (Some(start), None) => SystemTime::now().duration_since(start).unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// The metrics of `tenure` in the text format; `last_success`: when the
/// last success this host knows of ended.
pub fn metrics(tenure: &Tenure, last_success: Option<SystemTime>) -> String {
    let label = |extra: &str| {
        let lock = escape(&tenure.lock);
        match extra {
            "" => format!("{{lock=\"{lock}\"}}"),
            extra => format!("{{lock=\"{lock}\",{extra}}}"),
        }
    };
    let held = tenure.outcome == Verdict::Running;
    let mut out = String::new();
    for (name, kind, help) in METRICS {
        let head = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        let value = match *name {
            "elect_lock_held" => u8::from(held).to_string(),
            "elect_lock_token" => tenure.token.map_or(0, Token::get).to_string(),
            "elect_start_timestamp_seconds" => {
                format!("{:.3}", seconds(tenure.started_at()))
            }
            "elect_end_timestamp_seconds" => {
                format!("{:.3}", seconds(tenure.ended_at()))
            }
            "elect_duration_seconds" => format!("{:.3}", ran_for(tenure).as_secs_f64()),
            "elect_exit_code" => tenure.exit_code.unwrap_or(-1).to_string(),
            "elect_last_success_timestamp_seconds" => match last_success {
                Some(at) => format!("{:.3}", seconds(Some(at))),
                None => continue,
            },
            "elect_outcome" => {
                out.push_str(&head);
                for outcome in OUTCOMES {
                    let on = u8::from(*outcome == tenure.outcome);
                    out.push_str(&format!(
                        "{name}{} {on}\n",
                        label(&format!("outcome=\"{}\"", outcome.name()))
                    ));
                }
                continue;
            }
            _ => unreachable!("every metric has a value"),
        };
        out.push_str(&head);
        out.push_str(&format!("{name}{} {value}\n", label("")));
    }
    out
}

/// A label value as the text format quotes it.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The last success recorded in an earlier metrics file at `path`.
fn earlier_success(path: &Path) -> Option<SystemTime> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("elect_last_success_timestamp_seconds{"))?;
    let value: f64 = line.rsplit(' ').next()?.parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(value.max(0.0)))
}

/// Write `tenure`'s metrics to `path` whole or not at all (a temporary
/// file beside it, renamed over it: the collector never reads half a file).
/// `done`: when the run that made this one unnecessary ended.
pub fn write_metrics(path: &Path, tenure: &Tenure, done: Option<SystemTime>) {
    let last_success = match tenure.outcome {
        Verdict::Succeeded => tenure.ended_at(),
        _ => done,
    }
    .or_else(|| earlier_success(path));
    let text = metrics(tenure, last_success);
    // Not `*.prom`: the collector reads only those.
    let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        log::warn(format_args!(
            "could not write the metrics file {}: {e}",
            path.display()
        ));
    }
}

/// Run `--on-end`'s `command` with the tenure in its environment, within
/// [`HOOK_WITHIN`].
pub async fn on_end(command: &str, tenure: &Tenure) {
    let mut hook = tokio::process::Command::new("/bin/sh");
    hook.arg("-c")
        .arg(command)
        .env("ELECT_LOCK", &tenure.lock)
        .env("ELECT_OUTCOME", tenure.outcome.name())
        .env(
            "ELECT_EXIT_CODE",
            tenure.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        )
        .env(
            "ELECT_TOKEN",
            tenure.token.map(|t| t.to_string()).unwrap_or_default(),
        )
        .env("ELECT_DURATION_MS", ran_for(tenure).as_millis().to_string())
        .stdin(std::process::Stdio::null())
        // Its own group: killed whole when it takes too long.
        .process_group(0)
        .kill_on_drop(true);
    match tenure.shard {
        Some(k) => hook.env("ELECT_SHARD", k.to_string()),
        None => hook.env_remove("ELECT_SHARD"),
    };
    let mut child = match hook.spawn() {
        Ok(child) => child,
        Err(e) => {
            log::warn(format_args!("could not run --on-end: {e}"));
            return;
        }
    };
    let group = child.id().and_then(|id| i32::try_from(id).ok());
    match tokio::time::timeout(HOOK_WITHIN, child.wait()).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => log::warn(format_args!("--on-end {}", describe_status(status))),
        Ok(Err(e)) => log::warn(format_args!("--on-end: {e}")),
        Err(_) => {
            if let Some(group) = group {
                crate::kill::send(
                    crate::kill::Target::Group(nix::unistd::Pid::from_raw(group)),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.wait().await;
            log::warn(format_args!(
                "--on-end did not end within {}: killed",
                crate::clock::show(HOOK_WITHIN)
            ));
        }
    }
}

/// How a process ended, in words: "was killed by SIGKILL", "exited with 3".
pub fn describe_status(status: std::process::ExitStatus) -> String {
    crate::supervisor::Ending::of(status).map_or_else(|| "ended".into(), |e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_but_unrecorded_has_its_gauge() {
        let mut t = Tenure {
            lock: "a\"b".into(),
            shard: None,
            token: Some(Token::new(5)),
            identity: "i".into(),
            host: "h".into(),
            pid: 1,
            queued: "2026-12-01T00:00:00.000Z".into(),
            started: Some("2026-12-01T00:00:01.000Z".into()),
            ended: Some("2026-12-01T00:00:03.500Z".into()),
            outcome: Verdict::Failed,
            exit_code: Some(3),
            signal: None,
            why: None,
            slot: None,
            done_ended: None,
        };
        let text = metrics(&t, None);
        assert!(
            text.contains("elect_exit_code{lock=\"a\\\"b\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("elect_duration_seconds{lock=\"a\\\"b\"} 2.500\n"));
        assert!(text.contains("outcome=\"failed\"} 1\n"));
        assert!(!text.contains("elect_last_success"));
        t.outcome = Verdict::Succeeded;
        assert_eq!(metrics(&t, None).matches(" 1\n").count(), 1);
    }
}
