//! The command, checked before anything touches the store: bad input
//! leaves no trace there.

use std::ffi::OsStr;
use std::path::Path;

use nix::unistd::AccessFlags;

use crate::exit::{Code, Failure};

/// Find COMMAND as exec would, to fail before touching the store.
pub fn check_command(command: &OsStr) -> Result<(), Failure> {
    let name = command.to_string_lossy();
    if command.is_empty() {
        return Err(Failure::new(Code::Usage, "the command is empty"));
    }
    let executable = |p: &Path| nix::unistd::access(p, AccessFlags::X_OK).is_ok();
    if name.contains('/') {
        let path = Path::new(command);
        return match path.metadata() {
            Err(_) => Err(Failure::new(
                Code::NotFound,
                format!("cannot run {name}: no such file"),
            )),
            Ok(m) if m.is_dir() => Err(Failure::new(
                Code::CannotExecute,
                format!("cannot run {name}: it is a directory"),
            )),
            Ok(_) if !executable(path) => Err(Failure::new(
                Code::CannotExecute,
                format!("cannot run {name}: not executable"),
            )),
            Ok(_) => Ok(()),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unusable = false;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            dir
        };
        let candidate = dir.join(command);
        match candidate.metadata() {
            Ok(m) if m.is_file() && executable(&candidate) => return Ok(()),
            Ok(_) => found_unusable = true,
            Err(_) => {}
        }
    }
    if found_unusable {
        Err(Failure::new(
            Code::CannotExecute,
            format!("cannot run {name}: not executable"),
        ))
    } else {
        Err(Failure::new(
            Code::NotFound,
            format!("cannot run {name}: command not found"),
        ))
    }
}

/// Why exec failed, as the shell would say it: 127 not found, 126 cannot execute.
pub fn exec_failure(command: &OsStr, errno: i32) -> Failure {
    // The command's process could not be had at all.
    if crate::descriptors::ran_out(errno) {
        return crate::descriptors::failure(errno);
    }
    let name = command.to_string_lossy();
    let error = std::io::Error::from_raw_os_error(errno);
    let code = if errno == libc::ENOENT {
        Code::NotFound
    } else {
        Code::CannotExecute
    };
    Failure::new(code, format!("cannot run {name}: {error}"))
}
