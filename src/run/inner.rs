//! What an elect inside the command (`elect check`, `elect checkpoint`)
//! needs to reach the store the way this one does: `ELECT_STORE` names the
//! store, and `ELECT_STORE_CREDENTIALS` how this elect reached it: the user
//! and the certificates (paths made absolute: the command may change
//! directory), from wherever this elect found them, and the password as a
//! file only the command's processes can open: a sealed memory file they
//! inherit, `/dev/fd/N`. The password itself is never in the command's
//! environment or arguments. An elect inside uses them only for that very
//! store ([`crate::store::Settings::inherit`]): one that runs against
//! another store is not handed a user it cannot take.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use crate::store::{Credentials, Location, Settings};

/// The variables for the command, and the memory file that the
/// credentials' password file names, open (and inheritable) while elect
/// runs.
pub struct ForTheCommand {
    pub set_env: Vec<(String, String)>,
    _password: Option<OwnedFd>,
}

/// What the command gets to reach `location`, given `settings`.
pub fn for_the_command(settings: &Settings, location: &Location) -> std::io::Result<ForTheCommand> {
    let absolute = |path: &Option<PathBuf>| -> std::io::Result<Option<PathBuf>> {
        path.as_deref().map(std::path::absolute).transpose()
    };
    let mut credentials = Credentials {
        user: location.user().map(str::to_string),
        password_file: None,
        cacert: absolute(&settings.cacert)?,
        cert: absolute(&settings.cert)?,
        key: absolute(&settings.key)?,
    };
    let password = match location.password() {
        Some(secret) => {
            let fd = sealed_file("elect-password", secret.expose().as_bytes())?;
            credentials.password_file = Some(Path::new("/dev/fd").join(fd.as_raw_fd().to_string()));
            Some(fd)
        }
        None => None,
    };
    let set_env = match credentials == Credentials::default() {
        true => Vec::new(),
        false => vec![(Credentials::VARIABLE.to_string(), credentials.to_env())],
    };
    Ok(ForTheCommand {
        set_env,
        _password: password,
    })
}

/// A memory file holding `bytes`, read-only for every process that has it,
/// and inherited across exec (no MFD_CLOEXEC): the guard and the command
/// get it.
fn sealed_file(name: &str, bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let name = CString::new(name).map_err(std::io::Error::other)?;
    let fd = memfd_create(name.as_c_str(), MFdFlags::MFD_ALLOW_SEALING)?;
    std::fs::File::from(fd.try_clone()?).write_all(bytes)?;
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_SEAL,
        ),
    )?;
    Ok(fd)
}
