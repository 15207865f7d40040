//! One poller for every wait on something nothing announces: a store's
//! keys, a queue's length, a leader, a server's readiness.

use std::thread;
use std::time::{Duration, Instant};

/// How often a condition is looked at.
const EVERY: Duration = Duration::from_millis(20);

/// Look with `look` until it answers `Ok`, for at most `within`; past that,
/// panic naming `what` and the last answer (`Err(what was seen)`).
pub fn eventually<T>(
    what: &str,
    within: Duration,
    mut look: impl FnMut() -> Result<T, String>,
) -> T {
    let give_up = Instant::now() + within;
    loop {
        match look() {
            Ok(found) => return found,
            Err(seen) if Instant::now() >= give_up => {
                panic!("{what}: not within {within:?}: {seen}")
            }
            Err(_) => thread::sleep(EVERY),
        }
    }
}

/// [`eventually`] for a yes-or-no condition.
pub fn until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    eventually(what, within, || match condition() {
        true => Ok(()),
        false => Err("still not".into()),
    })
}
