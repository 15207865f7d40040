//! The open-file limit (`ulimit -n`, systemd's `LimitNOFILE=`): elect,
//! its runtime, its guard and a store's client need a few dozen
//! descriptors, and some of the libraries beneath them abort the process
//! when one cannot be had (tokio's signal handling, the ZooKeeper client's
//! reactor, the random numbers of the PostgreSQL client's logins). So the limit is looked at before anything opens one: a soft
//! limit that is too low is raised, as far as the hard limit lets it, and
//! where it cannot be, elect says so in one line and exits 71 (EX_OSERR)
//! before it has touched the store. The command gets back the limit elect
//! was started with.
//!
//! A descriptor that cannot be had later (EMFILE: the limit, or ENFILE:
//! the system's table) is the same local failure wherever it shows, told
//! at once and never tried again: not the store's doing, and no wait would
//! cure it.
//!
//! Also the two ways a descriptor is taken in that Rust cannot check: by
//! its number ([`handed`]) and onto tokio's reactor ([`readiness`]).

use std::error::Error;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::resource::{Resource, getrlimit, rlim_t, setrlimit};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::exit::{Code, Failure};

/// The soft limit elect needs when started with stdin, stdout and stderr
/// open: one more for each other descriptor it inherits, and for each
/// connection `--listen` may have open at once. Measured, a run of `true`
/// needs 17 on etcd, 18 on `file:`, 19 on PostgreSQL and MySQL and 21 on
/// ZooKeeper (its own descriptors and the three); the rest is for what
/// options add (`--on-end`, TLS files, a host name's look-up, the probe of
/// an address that does not answer).
pub const NEEDED: rlim_t = 32;

/// At or above this soft limit, elect does not count free descriptors
/// (a start pays for one `getrlimit`), and a soft limit it raises is
/// raised to this, where the hard limit allows: room to spare, and no more
/// than the usual default.
const PLENTY: rlim_t = 1024;

/// The soft limit elect was started with, if it raised it; else
/// [`NOT_RAISED`].
static GIVEN: AtomicU64 = AtomicU64::new(NOT_RAISED);
const NOT_RAISED: u64 = u64::MAX;

/// Make sure elect has the descriptors it needs, and `more` (those of
/// `--listen`): raise the soft limit if that is enough, else the one line
/// that says what to raise.
pub fn ensure(more: rlim_t) -> Result<(), Failure> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| {
        Failure::new(
            Code::OsError,
            format!("cannot read the open-file limit: {e}"),
        )
    })?;
    if soft >= PLENTY {
        return Ok(());
    }
    // The descriptor numbers elect takes itself: all but stdin, stdout
    // and stderr.
    let wanted = NEEDED - 3 + more;
    let needed = least_limit(wanted);
    if soft >= needed {
        return Ok(());
    }
    let open = needed - wanted;
    if hard >= needed {
        let raised = hard.min(PLENTY.max(needed));
        match setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
            Ok(()) => {
                GIVEN.store(soft, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) => {
                return Err(Failure::new(
                    Code::OsError,
                    format!(
                        "{}; elect cannot raise it to {raised}: {e}",
                        too_low(soft, hard, needed, open)
                    ),
                ));
            }
        }
    }
    Err(Failure::new(
        Code::OsError,
        format!("{}; {RAISE}", too_low(soft, hard, needed, open)),
    ))
}

/// What to do about a limit that is too low.
const RAISE: &str = "raise it (ulimit -n, systemd LimitNOFILE=)";

fn too_low(soft: rlim_t, hard: rlim_t, needed: rlim_t, open: rlim_t) -> String {
    let hard = match hard > soft {
        true => format!(" (at most {hard}: ulimit -Hn)"),
        false => String::new(),
    };
    let open = match open > 3 {
        true => format!(" ({open} descriptors are open already)"),
        false => String::new(),
    };
    format!(
        "the open-file limit (ulimit -n) of {soft}{hard} is too low for elect: it needs at \
         least {needed}{open}"
    )
}

/// Take descriptor `fd`, which the process that exec'd this one left open
/// for it and named on its command line: elect's socket for a guard started
/// by exec, the guard's order for the releaser. Only those two entry
/// points call it, once each, before anything else in the process could
/// have taken the number.
pub fn handed(fd: RawFd) -> OwnedFd {
    // SAFETY: the number is open (left so across the exec, for this
    // process alone) and nothing else in this process owns it: it is taken
    // once, at the start.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The least soft limit below which `wanted` descriptor numbers are free:
/// `wanted` more than the descriptors open below it.
fn least_limit(wanted: rlim_t) -> rlim_t {
    let mut free = 0;
    let mut fd: rlim_t = 0;
    // No process has more than the kernel's most (fs.nr_open, at most 2^30).
    while free < wanted && fd < 1 << 30 {
        // A look at the number's link, which takes no descriptor: the limit
        // may have none to spare. Not there: the number is free.
        let link = std::fs::symlink_metadata(format!("/proc/self/fd/{fd}"));
        if link.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            free += 1;
        }
        fd += 1;
    }
    fd
}

/// `fd`, which this process owns, on tokio's reactor: readable when it is
/// (a pidfd when its process ends, a timerfd when it rings). The one
/// registration for both, which tokio makes unsafe.
pub fn readiness(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is open, and is the same descriptor for as long as
    // the AsyncFd owns it: what registration asks.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(std::io::Error::from)
}

/// Give the soft limit elect was started with back to this process, which
/// is about to exec what is not elect (the command) or a copy that looks
/// for itself (the reaper's). Only an atomic load, `getrlimit` and
/// `setrlimit`: safe between fork and exec.
pub fn restore() -> std::io::Result<()> {
    let Some(soft) = given() else {
        return Ok(());
    };
    // nix's wrappers only call getrlimit(2) and setrlimit(2) on a struct of
    // their own stack: nothing allocates.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, soft.min(hard), hard)?;
    Ok(())
}

/// The soft limit elect was started with, if [`ensure`] raised it.
pub fn given() -> Option<u64> {
    let soft = GIVEN.load(Ordering::Relaxed);
    (soft != NOT_RAISED).then_some(soft)
}

/// Note the soft limit elect was started with, as a guard started by exec
/// is told it.
pub fn set_given(soft: Option<u64>) {
    GIVEN.store(soft.unwrap_or(NOT_RAISED), Ordering::Relaxed);
}

/// Whether `errno` says a descriptor could not be had: EMFILE (this
/// process's limit) or ENFILE (the system's).
pub fn ran_out(errno: i32) -> bool {
    errno == libc::EMFILE || errno == libc::ENFILE
}

/// The errno of an I/O error, if it says a descriptor could not be had.
pub fn of_io(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().filter(|&errno| ran_out(errno))
}

/// The errno of the first error in `error` or its sources (also inside an
/// I/O error that wraps another) that says a descriptor could not be had;
/// failing that, the words of one ("Too many open files"), for clients
/// that keep only the text of the I/O error they met.
pub fn in_chain(error: &(dyn Error + 'static)) -> Option<i32> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(errno) = of_io(io) {
                return Some(errno);
            }
            if let Some(errno) = io.get_ref().and_then(|inner| in_chain(inner)) {
                return Some(errno);
            }
        }
        if let Some(&errno) = e.downcast_ref::<nix::errno::Errno>()
            && ran_out(errno as i32)
        {
            return Some(errno as i32);
        }
        if let Some(errno) = in_text(&e.to_string()) {
            return Some(errno);
        }
        next = e.source();
    }
    None
}

/// The errno whose words `text` contains, if it says a descriptor could
/// not be had.
pub fn in_text(text: &str) -> Option<i32> {
    // ENFILE's words first: glibc's hold EMFILE's ("Too many open files
    // in system").
    [libc::ENFILE, libc::EMFILE].into_iter().find(|&errno| {
        let words = std::io::Error::from_raw_os_error(errno).to_string();
        // "Too many open files (os error 24)": the words before the number.
        let words = words.split(" (os error").next().unwrap_or(&words);
        text.contains(words)
    })
}

/// The one line for a descriptor that could not be had, by its errno
/// (EMFILE or ENFILE).
pub fn message(errno: i32) -> String {
    if errno == libc::ENFILE {
        return "the system's table of open files is full (ENFILE): elect cannot open a \
                descriptor; close files elsewhere, or raise fs.file-max"
            .into();
    }
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => format!(" of {soft}"),
        Err(_) => String::new(),
    };
    format!(
        "the open-file limit (ulimit -n){soft} is too low for elect: it ran out of descriptors; {RAISE}"
    )
}

/// [`message`], as elect's exit (71).
pub fn failure(errno: i32) -> Failure {
    Failure::new(Code::OsError, message(errno))
}

/// `e`'s failure if it says a descriptor could not be had; else `other`.
pub fn or(e: &std::io::Error, other: impl FnOnce() -> Failure) -> Failure {
    match of_io(e) {
        Some(errno) => failure(errno),
        None => other(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_that_could_not_be_had_is_found_under_other_errors() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(of_io(&emfile), Some(libc::EMFILE));
        // Wrapped, as clients wrap a failed connect.
        let wrapped = std::io::Error::other(std::io::Error::from_raw_os_error(libc::ENFILE));
        assert_eq!(in_chain(&wrapped), Some(libc::ENFILE));
        // Only its words left.
        let words = std::io::Error::other(format!("cannot connect: {emfile}"));
        assert_eq!(in_chain(&words), Some(libc::EMFILE));
        assert_eq!(in_chain(&nix::errno::Errno::EMFILE), Some(libc::EMFILE));
        let system = std::io::Error::from_raw_os_error(libc::ENFILE).to_string();
        assert_eq!(in_text(&system), Some(libc::ENFILE));
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(in_chain(&refused), None);
        assert_eq!(of_io(&refused), None);
    }

    #[test]
    fn the_line_names_the_limit_and_what_to_raise() {
        let said = message(libc::EMFILE);
        assert!(
            said.starts_with("the open-file limit (ulimit -n) of "),
            "{said}"
        );
        assert!(
            said.ends_with("raise it (ulimit -n, systemd LimitNOFILE=)"),
            "{said}"
        );
        assert!(message(libc::ENFILE).contains("fs.file-max"));
        assert_eq!(failure(libc::EMFILE).code, Code::OsError);
        assert_eq!(
            too_low(8, 8, 32, 3),
            "the open-file limit (ulimit -n) of 8 is too low for elect: it needs at least 32"
        );
        assert_eq!(
            too_low(20, 24, 40, 11),
            "the open-file limit (ulimit -n) of 20 (at most 24: ulimit -Hn) is too low for \
             elect: it needs at least 40 (11 descriptors are open already)"
        );
    }

    #[test]
    fn the_least_limit_counts_the_descriptors_open_below_it() {
        let before = least_limit(10);
        assert!(before >= 10);
        // One more open below it takes one more number.
        let file = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd() as rlim_t;
        let with = least_limit(10);
        match fd < before {
            true => assert_eq!(with, before + 1),
            false => assert_eq!(with, before),
        }
    }
}
