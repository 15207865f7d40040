//! `elect __elect-release FD PID STATUS`: what the guard becomes when elect
//! died while its command ran, once nothing of the command's group can run
//! any more. It ends elect's session, so that the next holder need not wait
//! for the lease to expire (a crashed elect costs a handover, not a TTL),
//! and then records in the lock's history how the tenure ended, which
//! elect no longer can.
//!
//! The order (the store, its secrets, the session, the tenure) comes in a
//! memory file that the guard wrote, never on the command line or in the
//! environment; STATUS is how the command ended (`exit:N`, `signal:N`).

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::RawFd;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::exit::{Failure, Outcome};
use crate::history::{self, Tenure, Verdict};
use crate::report::Reports;
use crate::store::Location;

/// How long to keep trying to reach the store; after that the lease
/// expires on its own, as it would have without this.
const PATIENCE: Duration = Duration::from_secs(5);

/// What the guard keeps for the releaser.
#[derive(Serialize, Deserialize)]
struct Order {
    /// [`Location::release_order`]'s, as text.
    store: String,
    /// The tenure as it stood when the command started.
    tenure: Tenure,
    /// How many of the lock's tenures to keep (0: no history).
    keep: usize,
    reports: Reports,
}

/// The order that ends session `id` of `location` from the guard, and
/// tells how `tenure` ended as elect would have: into a history that keeps
/// `keep`, and to `reports`. `None` if the store gives no order.
pub fn order(
    location: &Location,
    id: &str,
    tenure: &Tenure,
    keep: usize,
    reports: &Reports,
) -> Option<Vec<u8>> {
    let order = Order {
        store: String::from_utf8(location.release_order(id)?).ok()?,
        tenure: tenure.clone(),
        keep,
        reports: reports.clone(),
    };
    serde_json::to_vec(&order).ok()
}

/// How the command ended, as the guard passes it: `exit:N`, `signal:N`.
pub fn status_arg(exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (exit_code, signal) {
        (Some(code), _) => format!("exit:{code}"),
        (None, Some(sig)) => format!("signal:{sig}"),
        (None, None) => "unknown".into(),
    }
}

fn parse_status(text: &str) -> (Option<i32>, Option<i32>) {
    match text.split_once(':') {
        Some(("exit", n)) => (n.parse().ok(), None),
        Some(("signal", n)) => (None, n.parse().ok()),
        _ => (None, None),
    }
}

/// Why the release order could not be had from the guard's descriptor.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("{0}")]
    Parse(#[from] serde_json::Error),
}

/// Run as the releaser; `args` are what follows the hidden argument. Never returns.
pub fn main(args: &[OsString]) -> ! {
    let text = |i: usize| args.get(i).and_then(|a| a.to_str());
    let (Some(fd), Some(pid)) = (
        text(0).and_then(|t| t.parse::<RawFd>().ok()),
        text(1).and_then(|t| t.parse::<u32>().ok()),
    ) else {
        Outcome::from(Failure::software("__elect-release is for elect's own use")).finish();
    };
    let (exit_code, signal) = text(2).map_or((None, None), parse_status);
    let mut file = std::fs::File::from(crate::descriptors::handed(fd));
    let mut bytes = Vec::new();
    let order = file
        .read_to_end(&mut bytes)
        .map_err(OrderError::from)
        .and_then(|_| Ok(serde_json::from_slice::<Order>(&bytes)?));
    let order = match order {
        Ok(order) => order,
        Err(e) => Outcome::from(Failure::software(format!(
            "cannot read the release order: {e}"
        )))
        .finish(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => Outcome::from(Failure::software(format!(
            "elect (pid {pid}) died while its command ran; its guard killed the command's \
             process group, but could not release the lease, which will expire: {e}"
        )))
        .finish(),
    };
    runtime.block_on(async {
        let store = match Location::release(order.store.as_bytes(), PATIENCE).await {
            Ok(store) => store,
            Err(e) => Outcome::from(Failure::software(format!(
                "elect (pid {pid}) died while its command ran; its guard killed the command's \
                 process group, but could not release the lease, which will expire: {e}"
            )))
            .finish(),
        };
        crate::log::error(format_args!(
            "elect (pid {pid}) died while its command ran; its guard killed the \
             command's process group and then released the lease"
        ));
        // After the release: the next holder need not wait for this.
        let mut tenure = order.tenure;
        tenure.ended = Some(history::timestamp(SystemTime::now()));
        tenure.outcome = Verdict::ElectDied;
        tenure.exit_code = exit_code;
        tenure.signal = signal;
        tenure.why = Some("its guard stopped the command and released the lease".into());
        history::note_or_warn(&*store, &tenure, order.keep, false).await;
        order.reports.ended(&tenure).await;
    });
    Outcome::Exit(0).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_back() {
        assert_eq!(parse_status(&status_arg(Some(3), None)), (Some(3), None));
        assert_eq!(parse_status(&status_arg(None, Some(9))), (None, Some(9)));
        assert_eq!(parse_status(&status_arg(None, None)), (None, None));
    }
}
