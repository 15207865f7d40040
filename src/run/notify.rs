//! systemd's notify protocol, when `NOTIFY_SOCKET` is set (`Type=notify`):
//! a datagram to that socket (a path, or `@` for an abstract name) for
//! each change, no libsystemd.
//!
//! - `READY=1` once elect is in the lock's queue (or holds it): a standby
//!   is a service that started well, and a unit that waited for the lock
//!   would never finish starting on any host but the holder's (systemd
//!   would fail it after `TimeoutStartSec=`);
//! - `STATUS=` at each change, the line `systemctl status` shows
//!   ([`Standing::status_line`]);
//! - `WATCHDOG=1` every half of `WATCHDOG_USEC` from `READY=1` on, only
//!   while renewals are confirmed (what `/livez` says): with
//!   `WatchdogSec=`, systemd restarts
//!   an elect whose renewals failed past the deadline or whose loop is
//!   wedged;
//! - `STOPPING=1` once elect is on its way out.
//!
//! The command does not see `NOTIFY_SOCKET`, `WATCHDOG_USEC` or
//! `WATCHDOG_PID`: systemd would take its messages as elect's (with
//! `NotifyAccess=all`, or under a reaper), so a command that speaks the
//! protocol itself could say READY or STOPPING for elect, or feed the
//! watchdog while elect's renewals fail.

use std::cell::Cell;
use std::convert::Infallible;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use super::standing::{Phase, Standing, Step};
use crate::clock::{Instant, sleep_until};
use crate::log;

/// What systemd sets for elect alone: kept from the command.
pub const VARIABLES: &[&str] = &["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// A line to systemd's notify socket.
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    /// Half of `WATCHDOG_USEC`, if the watchdog is on for elect.
    ping_every: Option<Duration>,
    ready: Cell<bool>,
    stopping: Cell<bool>,
}

impl Notifier {
    /// From the environment systemd gave, if it asks for notifications.
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let to = match path.as_encoded_bytes().strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)
            }
            None => SocketAddr::from_pathname(&path),
        };
        let said = |e: std::io::Error| {
            log::warn(format_args!(
                "NOTIFY_SOCKET {}: {e}; not notifying systemd",
                path.to_string_lossy()
            ));
        };
        let to = to.map_err(said).ok()?;
        let socket = UnixDatagram::unbound().map_err(said).ok()?;
        // A full queue loses a line rather than hold elect up.
        socket.set_nonblocking(true).map_err(said).ok()?;
        // systemd names the process it watches: this one, or the reaper
        // in front of it (`--subreaper`, PID 1), which feeds no watchdog.
        let mine = std::env::var("WATCHDOG_PID").ok().is_none_or(|pid| {
            let pid = pid.trim();
            pid == std::process::id().to_string()
                || (crate::supervisor::reaper::reaped()
                    && pid == nix::unistd::getppid().to_string())
        });
        let ping_every = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|us| us.trim().parse::<u64>().ok())
            .filter(|us| *us > 0 && mine)
            .map(|us| Duration::from_micros(us) / 2);
        Some(Notifier {
            socket,
            to,
            ping_every,
            ready: Cell::new(false),
            stopping: Cell::new(false),
        })
    }

    fn send(&self, message: &str) {
        if let Err(e) = self.socket.send_to_addr(message.as_bytes(), &self.to) {
            log::verbose(format_args!("could not notify systemd: {e}"));
        }
    }

    /// What changed since the last message, as one message.
    fn news(&self, standing: &Standing, said: &mut String) -> String {
        let mut message = String::new();
        let phase = standing.phase();
        if !self.ready.get() && matches!(phase, Phase::Waiting { .. } | Phase::Holding { .. }) {
            self.ready.set(true);
            message.push_str("READY=1\n");
        }
        if phase == Phase::Stopping && !self.stopping.replace(true) {
            message.push_str("STOPPING=1\n");
        }
        let status = standing.status_line();
        if status != *said {
            message.push_str(&format!("STATUS={status}\n"));
            *said = status;
        }
        message
    }

    /// Tell systemd each change of `standing`, and feed its watchdog, for
    /// as long as the run lasts.
    pub async fn run(&self, standing: &Standing, said: &mut String) -> Infallible {
        let mut ping_at = self.ping_every.map(|every| Instant::now() + every);
        loop {
            let message = self.news(standing, said);
            if !message.is_empty() {
                self.send(&message);
            }
            tokio::select! {
                () = standing.changed.notified() => {}
                () = sleep_until(ping_at.unwrap_or(crate::lease::NEVER)), if ping_at.is_some() => {
                    // No lease is confirmed before elect is queued.
                    if self.ready.get() && !self.stopping.get() && standing.unwell().is_none() {
                        self.send("WATCHDOG=1");
                    }
                    ping_at = ping_at.zip(self.ping_every).map(|(at, every)| at + every);
                }
            }
        }
    }

    /// elect is on its way out: the last message.
    pub fn finish(&self, standing: &Standing, said: &mut String) {
        standing.observe(Step::Stopping);
        let message = self.news(standing, said);
        if !message.is_empty() {
            self.send(&message);
        }
    }
}
