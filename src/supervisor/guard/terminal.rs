//! The terminal of an interactive command, which the guard passes between
//! the command's group and elect's job.
//!
//! When stdin is a terminal and elect runs in its foreground, the command's
//! group gets the foreground, so that it reads the terminal and Ctrl-C
//! reaches it once. When the command is stopped with it (Ctrl-Z) the
//! terminal goes back to elect's job with the modes it had, so that the
//! shell gets its prompt back; at `fg` the command gets it again with its
//! own modes; when the command ends, the job gets it back as it was.
//! Failures are left as they are: the terminal is a convenience, and the
//! watch goes on without it.

use nix::sys::termios::{SetArg, Termios, tcgetattr, tcsetattr};
use nix::unistd::{Pid, tcgetpgrp, tcsetpgrp};

/// The terminal an interactive command runs on.
pub(super) struct Terminal {
    /// Its modes before the command started, restored when it stops or ends.
    ours: Termios,
    /// The command's modes when it was stopped, restored when it resumes.
    theirs: Option<Termios>,
}

impl Terminal {
    /// The terminal, if the command is interactive: stdin is a terminal
    /// whose foreground is elect's job (`elect ... &` in a shell is not, and
    /// never takes the terminal).
    pub(super) fn of_an_interactive_command(job: Pid) -> Option<Terminal> {
        let stdin = std::io::stdin();
        let interactive =
            nix::unistd::isatty(&stdin).unwrap_or(false) && tcgetpgrp(&stdin).ok() == Some(job);
        match interactive {
            true => tcgetattr(&stdin)
                .ok()
                .map(|ours| Terminal { ours, theirs: None }),
            false => None,
        }
    }

    /// `group` is the terminal's foreground.
    pub(super) fn is_held_by(&self, group: Pid) -> bool {
        tcgetpgrp(std::io::stdin()).ok() == Some(group)
    }

    /// The command stopped with the terminal: keep its modes for its
    /// return, put ours back, and give the foreground to elect's job.
    pub(super) fn take(&mut self, job: Pid) {
        let stdin = std::io::stdin();
        self.theirs = tcgetattr(&stdin).ok();
        let _ = tcsetattr(&stdin, SetArg::TCSADRAIN, &self.ours);
        let _ = tcsetpgrp(&stdin, job);
    }

    /// If elect's job has the terminal (`fg`, not `bg`), give it to the
    /// command's group with the command's modes; true if that worked.
    pub(super) fn give(&self, job: Pid, group: Pid) -> bool {
        if !self.is_held_by(job) {
            return false;
        }
        let stdin = std::io::stdin();
        if let Some(modes) = &self.theirs {
            let _ = tcsetattr(&stdin, SetArg::TCSADRAIN, modes);
        }
        tcsetpgrp(&stdin, group).is_ok()
    }

    /// The command is over: if its group has the terminal, give it back to
    /// elect's job with the modes it had before the command.
    pub(super) fn restore(&self, job: Pid, group: Pid) {
        if self.is_held_by(group) {
            let stdin = std::io::stdin();
            let _ = tcsetpgrp(&stdin, job);
            let _ = tcsetattr(&stdin, SetArg::TCSADRAIN, &self.ours);
        }
    }
}
