//! Signal dispositions that run no code of elect's: the default action, or
//! ignoring. Every change of one goes through [`set`], the one place that
//! calls sigaction(2) for them; a handler of elect's own is installed
//! elsewhere (the flock wake-up's).

use nix::errno::Errno;

/// What a signal is to do: neither runs a handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// SIG_DFL.
    Default,
    /// SIG_IGN.
    Ignore,
}

impl Disposition {
    fn handler(self) -> libc::sighandler_t {
        match self {
            Disposition::Default => libc::SIG_DFL,
            Disposition::Ignore => libc::SIG_IGN,
        }
    }
}

/// Whether [`set`] makes the raw system call, whose `struct sigaction` is
/// known here on these architectures: glibc's wrappers refuse the two
/// real-time signals it reserves (32 and 33), which an ignoring parent may
/// still have passed on. Elsewhere [`set`] goes through glibc, and refuses
/// them (EINVAL).
pub const RAW: bool = cfg!(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
));

/// Set `sig`'s disposition: rt_sigaction(2) itself where [`RAW`], glibc's
/// signal() elsewhere. Async-signal-safe.
pub fn set(sig: libc::c_int, to: Disposition) -> nix::Result<()> {
    // SAFETY: SIG_DFL and SIG_IGN install no handler code. The raw call
    // reads a struct laid out as the kernel's on these architectures, which
    // lives here, and is given a null old-action pointer; signal() takes no
    // pointer at all.
    let failed = unsafe {
        #[cfg(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ))]
        let failed = {
            /// The kernel's `struct sigaction` on these architectures.
            #[repr(C)]
            struct KernelSigaction {
                handler: libc::c_ulong,
                flags: libc::c_ulong,
                restorer: libc::c_ulong,
                mask: u64,
            }
            let action = KernelSigaction {
                handler: to.handler() as libc::c_ulong,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &action as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<u64>(),
            ) != 0
        };
        #[cfg(not(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        )))]
        let failed = libc::signal(sig, to.handler()) == libc::SIG_ERR;
        failed
    };
    match failed {
        true => Err(Errno::last()),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_ignored_and_back_to_its_default_and_a_bad_one_refused() {
        // SIGURG: ignored by default, so neither state can hurt the test
        // binary, whichever thread the signal would go to.
        let sig = libc::SIGURG;
        set(sig, Disposition::Ignore).unwrap();
        set(sig, Disposition::Default).unwrap();
        assert_eq!(set(0, Disposition::Default), Err(Errno::EINVAL));
        assert_eq!(set(libc::SIGKILL, Disposition::Ignore), Err(Errno::EINVAL));
    }
}
