//! Where the time of a cycle goes: with `-v`, each step of `elect run` as
//! one line, `step +1.234ms NAME`, on the boot clock from the start of
//! `main`. The benchmarks read these lines to show the median of each step
//! beside the floor of what the step must cost.

use std::sync::OnceLock;

use crate::clock::Instant;
use crate::log;

static START: OnceLock<Instant> = OnceLock::new();

/// The origin: the first thing `main` does.
pub fn start() {
    let _ = START.set(Instant::now());
}

/// One step done, now.
pub fn step(what: &str) {
    if let Some(start) = START.get() {
        let at = Instant::now().since(*start);
        log::verbose(format_args!("step +{:.3}ms {what}", at.as_secs_f64() * 1e3));
    }
}
