//! Where the time of a cycle goes: with `-v` and `ELECT_TIMELINE=1`, each
//! step of `elect run` as one line, `step +1.234ms NAME`, on the boot clock
//! from the start of `main`. The benchmarks read these lines to show the
//! median of each step beside the floor of what the step must cost; a
//! person reading `-v` wants the lifecycle, not the timings.

use std::sync::OnceLock;

use crate::clock::Instant;
use crate::log;

static START: OnceLock<Instant> = OnceLock::new();

/// The variable that asks for the step lines.
pub const VARIABLE: &str = "ELECT_TIMELINE";

/// The origin: the first thing `main` does, when the steps are asked for.
pub fn start() {
    if std::env::var_os(VARIABLE).is_some_and(|v| v == "1") {
        let _ = START.set(Instant::now());
    }
}

/// One step done, now.
pub fn step(what: &str) {
    if let Some(start) = START.get() {
        let at = Instant::now().since(*start);
        log::verbose(format_args!("step +{:.3}ms {what}", at.as_secs_f64() * 1e3));
    }
}
