//! `elect __elect-release FD PID`: what the guard becomes when elect died
//! while its command ran, once nothing of the command's group can run any
//! more. It ends elect's session, so that the next holder need not wait for
//! the lease to expire: a crashed elect costs a handover, not a TTL.
//!
//! The order (the store, its secrets, the session) comes in a memory file
//! that the guard wrote, never on the command line or in the environment.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::exit::{Failure, Outcome};
use crate::store::Location;

/// How long to keep trying to reach the store; after that the lease
/// expires on its own, as it would have without this.
const PATIENCE: Duration = Duration::from_secs(5);

/// Run as the releaser; `args` are what follows the hidden argument. Never returns.
pub fn main(args: &[OsString]) -> ! {
    let text = |i: usize| args.get(i).and_then(|a| a.to_str());
    let (Some(fd), Some(pid)) = (
        text(0).and_then(|t| t.parse::<RawFd>().ok()),
        text(1).and_then(|t| t.parse::<u32>().ok()),
    ) else {
        Outcome::from(Failure::software("__elect-release is for elect's own use")).finish();
    };
    // SAFETY: the guard handed us this descriptor, open, and nothing else owns it.
    let mut order = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut bytes = Vec::new();
    if let Err(e) = order.read_to_end(&mut bytes) {
        Outcome::from(Failure::software(format!(
            "cannot read the release order: {e}"
        )))
        .finish();
    }
    let released = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(Location::release(&bytes, PATIENCE))
                .map_err(|e| e.to_string())
        });
    match released {
        Ok(()) => {
            crate::log::error(format_args!(
                "elect (pid {pid}) died while its command ran; its guard killed the \
                 command's process group and then released the lease"
            ));
            Outcome::Exit(0).finish()
        }
        Err(e) => Outcome::from(Failure::software(format!(
            "elect (pid {pid}) died while its command ran; its guard killed the command's \
             process group, but could not release the lease, which will expire: {e}"
        )))
        .finish(),
    }
}
