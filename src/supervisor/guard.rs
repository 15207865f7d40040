//! The guard: a small synchronous process between elect and the command.
//!
//! elect forks the guard at its start, before it has a second thread (a
//! later turn of `--rejoin` execs elect again as the guard instead), and
//! the guard forks the command's process at once, which execs the command
//! when the lock is ours ([`super::launch`]). The guard exists for three
//! reasons:
//!
//! - If elect dies, even by SIGKILL, the guard sees its end of the socket
//!   close and kills the command's whole process group, grandchildren
//!   included. A parent-death signal alone reaches only the direct child;
//!   should the guard die with elect, its sentinel ([`super::sentinel`]),
//!   whose pid is the command's group id, kills the group.
//! - It enforces the lease deadline on its own, with a `CLOCK_BOOTTIME`
//!   timer: if elect is stopped, starved or stuck, the command still gets
//!   its signal at the deadline minus the grace and SIGKILL at the deadline.
//!   So that one job-control stop cannot freeze both, the guard leads a
//!   process group of its own: a SIGSTOP or SIGTSTP to elect's group (a
//!   shell's `kill -STOP %1`, Ctrl-Z) leaves the guard awake, and one to the
//!   guard's group leaves elect awake, which then kills the command's group
//!   at the deadline itself.
//! - It is single-threaded and owns the only wait on the command, so no
//!   runtime can steal the command's status, and the command's pid cannot be
//!   reused while the guard may still signal its group.
//!
//! What the guard does next is decided in one place, [`machine`]: a pure
//! function of where the command's life is, what was just observed and the
//! time. [`watch`] is the loop around it: wait for the next event (a
//! message from elect, the command's SIGCHLD, the timer set for the next
//! instant the state needs), step the machine, perform its actions with
//! their system calls. This file is the process around the watch: its
//! arguments, its entry points, its name.
//!
//! Around an interactive command it manages the terminal ([`terminal`]):
//! when stdin is a terminal and elect runs in its foreground, the command's
//! group gets the foreground (so it reads the terminal, and Ctrl-C reaches
//! it once); when the command is stopped (Ctrl-Z) the guard takes the
//! terminal back and stops elect's group, so the shell gets its prompt
//! back; when elect is continued (`fg`) it gives the terminal back to the
//! command and continues it; if the deadline passes meanwhile it kills the
//! stopped command without resuming it. When the command ends it gives the
//! terminal back with its modes as they were.
//!
//! The limit: a command that leaves its process group (setsid, double fork
//! into a new group) escapes.

mod machine;
mod orders;
mod terminal;
mod watch;

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::launch::Launch;
use super::protocol::Orders;
use super::sentinel::Sentinel;
use orders::wait_for_the_lock;
use watch::Guard;

/// The hidden first argument that turns elect into its guard.
pub const ARG: &str = "__lease-guard";

/// The guard's name, as `ps`, `top`, `pkill` and `killall` see it (and
/// its command line, as `ps` shows it and `pkill -f` matches it). Not
/// elect's: `pkill -9 elect`, which matches any name containing `elect`,
/// must leave the guard to kill the command's group and release the lock.
pub const NAME: &std::ffi::CStr = c"lease-guard";

/// The hidden first argument of the copy that ends the session of an elect
/// that died: `__elect-release ORDER_FD ELECT_PID`.
pub const RELEASE_ARG: &str = "__elect-release";

/// `__lease-guard FD SIGNAL GRACE_NS NOFILE -- COMMAND...`, where NOFILE
/// is the soft open-file limit elect was started with, for the command,
/// if elect raised its own (else `-`: see [`crate::descriptors`]).
pub fn args(socket: RawFd, signal: Signal, grace: Duration) -> Vec<OsString> {
    let given = crate::descriptors::given().map_or_else(|| "-".to_string(), |n| n.to_string());
    [
        ARG.to_string(),
        socket.to_string(),
        (signal as i32).to_string(),
        grace.as_nanos().to_string(),
        given,
        "--".to_string(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// The socket, the orders, and the open-file limit elect was given.
fn parse(args: &[OsString]) -> Option<(RawFd, Orders, Option<u64>)> {
    let text = |i: usize| args.get(i)?.to_str();
    if text(0)? != ARG || text(5)? != "--" || args.len() < 7 {
        return None;
    }
    let orders = Orders {
        signal: Signal::try_from(text(2)?.parse::<i32>().ok()?).ok()?,
        grace: Duration::from_nanos(text(3)?.parse().ok()?),
        command: args[6..].to_vec(),
        set_env: Vec::new(),
        remove_env: Vec::new(),
    };
    let given = match text(4)? {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    Some((text(1)?.parse().ok()?, orders, given))
}

/// Run as the guard started by exec; `args` start with [`ARG`]. Never returns.
pub fn main(args: &[OsString]) -> ! {
    // Started as /proc/self/exe; be recognisable in ps and top.
    set_name(NAME);
    let Some((socket, orders, given)) = parse(args) else {
        eprintln!("elect: {ARG} is for elect's own use");
        std::process::exit(crate::exit::Code::Software.value().into());
    };
    // For the command, which gets the limit elect was started with.
    crate::descriptors::set_given(given);
    retitle();
    let socket = UnixStream::from(crate::descriptors::handed(socket));
    std::process::exit(serve(socket, orders))
}

/// Run as the guard in the child of elect's fork. Never returns: not even
/// a panic may unwind into the copy of elect's `main` above this frame.
pub fn forked(socket: OwnedFd, orders: Orders) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // A group of its own, as an exec'd guard's.
        if let Err(e) = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
            eprintln!("elect: guard: setpgid: {e}");
            return crate::exit::Code::Software.value().into();
        }
        set_name(NAME);
        retitle();
        serve(UnixStream::from(socket), orders)
    }))
    .unwrap_or_else(|_| crate::exit::Code::Software.value().into());
    std::process::exit(code)
}

/// Wait for the lock, then run the command under watch; the exit code.
fn serve(socket: UnixStream, orders: Orders) -> i32 {
    // Neither the command nor its process waiting to become it may hold
    // our end of the socket: elect learns of our death by its closing.
    if let Err(e) = set_cloexec(socket.as_fd()) {
        eprintln!("elect: guard: {e}");
        return crate::exit::Code::Software.value().into();
    }
    // elect, by the pid it had: once it dies, our parent is another.
    let elect = nix::unistd::getppid();
    // Started while elect waits for the lock: fork the command's process
    // now, and wait for the word to go. It comes first, so that the first
    // child of the guard is it (the sentinel bears the guard's name until
    // it takes its own); then the sentinel, whose pid is the group's id.
    let launch = Launch::fork(&orders);
    let sentinel = Sentinel::fork();
    let launch = match &sentinel {
        Ok(group) => launch.and_then(|launch| launch.join(group)),
        Err(e) => Err(std::io::Error::from(*e)),
    };
    let Some(lock) = wait_for_the_lock(&socket) else {
        // elect gave up waiting (or died): nothing to start.
        return 0;
    };
    match Guard::start(socket, orders, lock, launch, sentinel, elect) {
        Ok(Some(mut guard)) => guard.run(),
        // elect was told the command did not start.
        Ok(None) => 0,
        Err(e) => {
            eprintln!("elect: guard: {e}");
            crate::exit::Code::Software.value().into()
        }
    }
}

/// What `ps` shows as the guard's command line: [`NAME`], written over its
/// argument strings (a forked guard's copy of elect's, an exec'd guard's
/// own), so that the guard is told apart from elect, `pkill -f elect`
/// passes it by, and it shows nothing elect's arguments carried (a password
/// in a store URL). Best effort.
fn retitle() {
    // The 48th and 49th fields of /proc/self/stat: where the kernel keeps
    // the argument strings it shows as /proc/self/cmdline.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return;
    };
    // Fields from the third (state) on; arg_start is field 48.
    let mut fields = after_name.split_whitespace().skip(45);
    let (Some(Ok(start)), Some(Ok(end))) = (
        fields.next().map(str::parse::<usize>),
        fields.next().map(str::parse::<usize>),
    ) else {
        return;
    };
    let Some(len) = end.checked_sub(start).filter(|&n| n > 0) else {
        return;
    };
    let title = NAME.to_bytes_with_nul();
    // SAFETY: [start, end) is this process's own argument area, mapped and
    // writable (it lies in the initial stack; after a fork, our private
    // copy); std copied the arguments out at the start, and nothing reads
    // the area again.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    let n = title.len().min(len);
    area[..n].copy_from_slice(&title[..n]);
    area[n..].fill(0);
    area[len - 1] = 0;
}

/// The name `ps` and `top` show for this process (best effort).
pub fn set_name(name: &std::ffi::CStr) {
    let _ = nix::sys::prctl::set_name(name);
}

fn set_cloexec(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    fcntl(fd, F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_round_trip() {
        let mut a = args(7, Signal::SIGINT, Duration::from_millis(1500));
        a.push("sh".into());
        a.push("-c".into());
        let (socket, o, given) = parse(&a).unwrap();
        assert_eq!(
            (socket, o.signal, o.grace, given),
            (7, Signal::SIGINT, Duration::from_millis(1500), None)
        );
        assert_eq!(o.command, vec![OsString::from("sh"), OsString::from("-c")]);
        assert!(parse(&a[..6]).is_none(), "a command is required");
        a[4] = "8".into();
        assert_eq!(parse(&a).unwrap().2, Some(8));
    }
}
