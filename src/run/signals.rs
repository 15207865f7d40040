//! The signals elect acts on while it runs: installed before anything else,
//! so that a Ctrl-C while connecting or waiting is never lost.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::log;

/// Stop elect as SIGTSTP would have, had it not been caught; return when
/// continued.
pub fn stop_self() {
    // Only elect: the rest of its job got the signal from whoever sent it.
    crate::kill::send(
        crate::kill::Target::Process(nix::unistd::Pid::this()),
        Signal::SIGSTOP,
    );
}

/// The signals elect handles. Installed before anything else, so a Ctrl-C
/// while connecting or waiting is never lost.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    winch: tokio::signal::unix::Signal,
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            winch: signal(SignalKind::window_change())?,
            tstp: signal(SignalKind::from_raw(libc::SIGTSTP))?,
            cont: signal(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }

    /// The next signal to act on: to pass on to the command, or SIGTSTP
    /// and SIGCONT of job control.
    pub async fn any(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.usr1.recv() => Signal::SIGUSR1,
            _ = self.usr2.recv() => Signal::SIGUSR2,
            _ = self.winch.recv() => Signal::SIGWINCH,
            _ = self.tstp.recv() => Signal::SIGTSTP,
            _ = self.cont.recv() => Signal::SIGCONT,
        }
    }

    pub fn is_terminating(sig: Signal) -> bool {
        matches!(
            sig,
            Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
        )
    }

    /// The next signal that means "stop" while there is no command to pass it to.
    pub async fn terminating(&mut self) -> Signal {
        loop {
            let sig = self.any().await;
            if sig == Signal::SIGTSTP {
                stop_self();
            }
            if matches!(
                sig,
                Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
            ) {
                log::verbose(format_args!(
                    "{sig} received; stopping before the lock is ours"
                ));
                return sig;
            }
        }
    }
}
