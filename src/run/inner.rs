//! What an elect inside the command (`elect check`, `elect checkpoint`)
//! needs to reach the store the way this one does. The connection flags
//! given on this command line become their variables for the command
//! (paths made absolute: the command may change directory), and the user
//! and password, from wherever this elect found them (a flag, a variable,
//! the URL, a store tool's variable, a prompt), become `ELECT_USER` and an
//! `ELECT_PASSWORD_FILE` that only the command's processes can open: a
//! memory file they inherit, `/dev/fd/N`. The password itself is never in
//! the command's environment or arguments.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use crate::store::{Location, Settings};

/// The variables for the command, and the memory file that
/// `ELECT_PASSWORD_FILE` names, open (and inheritable) while elect runs.
pub struct ForTheCommand {
    pub set_env: Vec<(String, String)>,
    _password: Option<OwnedFd>,
}

/// What the command gets to reach `location`, given `settings`.
pub fn for_the_command(settings: &Settings, location: &Location) -> std::io::Result<ForTheCommand> {
    let mut set_env = Vec::new();
    for (variable, path) in [
        ("ELECT_CACERT", &settings.cacert),
        ("ELECT_CERT", &settings.cert),
        ("ELECT_KEY_FILE", &settings.key),
    ] {
        if let Some(path) = path {
            set_env.push((variable.to_string(), absolute(path)?));
        }
    }
    if let Some(user) = location.user() {
        set_env.push(("ELECT_USER".into(), user.to_string()));
    }
    let password = match location.password() {
        Some(secret) => {
            let name = CString::new("elect-password").expect("no NUL");
            // Without MFD_CLOEXEC: the guard and the command inherit it.
            let fd = memfd_create(name.as_c_str(), MFdFlags::MFD_ALLOW_SEALING)?;
            std::fs::File::from(fd.try_clone()?).write_all(secret.expose().as_bytes())?;
            // Read-only from now on, for every process that has it.
            fcntl(
                &fd,
                FcntlArg::F_ADD_SEALS(
                    SealFlag::F_SEAL_WRITE
                        | SealFlag::F_SEAL_SHRINK
                        | SealFlag::F_SEAL_GROW
                        | SealFlag::F_SEAL_SEAL,
                ),
            )?;
            set_env.push((
                "ELECT_PASSWORD_FILE".into(),
                format!("/dev/fd/{}", fd.as_raw_fd()),
            ));
            Some(fd)
        }
        None => None,
    };
    Ok(ForTheCommand {
        set_env,
        _password: password,
    })
}

fn absolute(path: &Path) -> std::io::Result<String> {
    Ok(std::path::absolute(path)?.display().to_string())
}
