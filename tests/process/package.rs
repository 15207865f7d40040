//! The Debian package as a user gets it: `scripts/package` builds it, dpkg
//! installs it into a scratch root with a database of its own, and there
//! `man` finds the pages, the completions lie where bash, zsh and fish look,
//! and the binary names its version and commit. Then dpkg removes it and
//! nothing is left.
//!
//! It packages this build's elect (the debug binary, which scripts/package
//! strips as it does the release one) rather than building a release binary
//! of its own: every other step is the one a user's `scripts/package` takes,
//! and a release build would cost the suite minutes.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::TempDir;
use support::tools::tool;

/// Every path the package installs, directories too, as `dpkg -L` lists them.
const FILES: &[&str] = &[
    "/.",
    "/usr",
    "/usr/bin",
    "/usr/bin/elect",
    "/usr/share",
    "/usr/share/bash-completion",
    "/usr/share/bash-completion/completions",
    "/usr/share/bash-completion/completions/elect",
    "/usr/share/doc",
    "/usr/share/doc/elect",
    "/usr/share/doc/elect/changelog.gz",
    "/usr/share/doc/elect/copyright",
    "/usr/share/fish",
    "/usr/share/fish/vendor_completions.d",
    "/usr/share/fish/vendor_completions.d/elect.fish",
    "/usr/share/lintian",
    "/usr/share/lintian/overrides",
    "/usr/share/lintian/overrides/elect",
    "/usr/share/man",
    "/usr/share/man/man1",
    "/usr/share/man/man1/elect-break.1.gz",
    "/usr/share/man/man1/elect-check.1.gz",
    "/usr/share/man/man1/elect-checkpoint.1.gz",
    "/usr/share/man/man1/elect-history.1.gz",
    "/usr/share/man/man1/elect-list.1.gz",
    "/usr/share/man/man1/elect-run.1.gz",
    "/usr/share/man/man1/elect-status.1.gz",
    "/usr/share/man/man1/elect.1.gz",
    "/usr/share/zsh",
    "/usr/share/zsh/vendor-completions",
    "/usr/share/zsh/vendor-completions/_elect",
];

/// `command`, killed after `seconds`; its output, which must show success.
fn run(what: &str, command: &mut Command, seconds: u32) -> String {
    let program = command.get_program().to_owned();
    let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
    let mut bounded = Command::new("timeout");
    bounded
        .args(["--kill-after=5", &seconds.to_string()])
        .arg(&program)
        .args(&args);
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => bounded.env(key, value),
            None => bounded.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        bounded.current_dir(dir);
    }
    let out: Output = bounded.output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed ({}; 124: not done within {seconds} s):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// dpkg with its database in `root`, as root would run it (dpkg wants
/// ldconfig and start-stop-daemon on its PATH, which are in sbin). Every
/// path is installed even where this machine's dpkg.cfg.d leaves out man
/// pages and docs, as minimal container images do: the package is checked,
/// not the machine.
fn dpkg(root: &Path, log: &Path) -> Command {
    let mut c = Command::new(tool("ELECT_TEST_DPKG", "dpkg", "dpkg"));
    c.arg(format!("--root={}", root.display()))
        .arg("--force-not-root")
        .arg("--path-include=/*")
        .arg(format!("--log={}", log.display()))
        .env(
            "PATH",
            format!(
                "/usr/local/sbin:/usr/sbin:/sbin:{}",
                std::env::var("PATH").unwrap_or_default()
            ),
        );
    c
}

/// The commit this checkout is at, when it is a git checkout of its own.
fn commit() -> Option<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap().trim().to_string())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    (Path::new(&top).canonicalize().ok()? == Path::new(root).canonicalize().ok()?)
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))?
}

#[test]
fn the_package_installs_the_binary_man_pages_and_completions_where_they_are_looked_for() {
    let man = tool("ELECT_TEST_MAN", "man", "man-db");
    let dir = TempDir::new("package");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));

    // The package, from this build's binary; gzip rather than dpkg-deb's
    // default xz, which takes 20 s over an unoptimised binary on two cores.
    let out = dir.join("out");
    let printed = run(
        "scripts/package",
        Command::new("bash")
            .arg(repo.join("scripts/package"))
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_elect"))
            .arg("--out")
            .arg(&out)
            .env("DPKG_DEB_COMPRESSOR_TYPE", "gzip"),
        120,
    );
    let version = env!("CARGO_PKG_VERSION");
    let deb = PathBuf::from(printed.trim());
    assert_eq!(deb.parent(), Some(out.as_path()), "{printed}");
    let name = deb.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("elect_{version}_")) && name.ends_with(".deb"),
        "{name}"
    );

    // Installed as a user would, into a root with an empty dpkg database.
    let root = dir.join("root");
    let admin = root.join("var/lib/dpkg");
    for sub in ["info", "updates"] {
        std::fs::create_dir_all(admin.join(sub)).unwrap();
    }
    std::fs::write(admin.join("status"), "").unwrap();
    let log = dir.join("dpkg.log");
    run("dpkg -i", dpkg(&root, &log).arg("-i").arg(&deb), 60);
    let status = run("dpkg -s", dpkg(&root, &log).args(["-s", "elect"]), 10);
    assert!(status.contains("Status: install ok installed"), "{status}");
    assert!(status.contains(&format!("Version: {version}")), "{status}");
    let listed = run("dpkg -L", dpkg(&root, &log).args(["-L", "elect"]), 10);
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort();
    let mut expected = FILES.to_vec();
    expected.sort();
    assert_eq!(listed, expected, "the package's files");

    // The binary names its version and, built from a checkout, the commit.
    let bin = root.join("usr/bin/elect");
    let shown = run("elect --version", Command::new(&bin).arg("--version"), 10);
    assert!(shown.starts_with(&format!("elect {version}")), "{shown}");
    if let Some(commit) = commit() {
        assert!(
            shown.contains(&format!("({commit} ")),
            "{shown} (HEAD is {commit})"
        );
    }

    // man finds every page where the package put it, and the run page
    // shows its examples.
    let manpath = root.join("usr/share/man");
    for page in [
        "elect",
        "elect-run",
        "elect-status",
        "elect-list",
        "elect-check",
        "elect-break",
        "elect-checkpoint",
        "elect-history",
    ] {
        let found = run(
            "man -w",
            Command::new(&man)
                .args(["-w", page])
                .env("MANPATH", &manpath),
            10,
        );
        assert_eq!(
            found.trim(),
            manpath
                .join(format!("man1/{page}.1.gz"))
                .display()
                .to_string(),
            "man -w {page}"
        );
    }
    let page = run(
        "man elect-run",
        Command::new(&man)
            .arg("elect-run")
            .env("MANPATH", &manpath)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100"),
        10,
    );
    assert!(page.contains("EXAMPLES"), "{page}");
    assert!(page.contains("ExecStart=/usr/bin/elect run"), "{page}");

    // The completions, byte for byte the generated ones, where each shell
    // looks: bash-completion loads completions/NAME on first use of NAME,
    // zsh's fpath on Debian has vendor-completions, fish reads
    // vendor_completions.d.
    for (installed, generated) in [
        (
            "usr/share/bash-completion/completions/elect",
            "completions/elect.bash",
        ),
        (
            "usr/share/zsh/vendor-completions/_elect",
            "completions/_elect",
        ),
        (
            "usr/share/fish/vendor_completions.d/elect.fish",
            "completions/elect.fish",
        ),
    ] {
        assert_eq!(
            std::fs::read(root.join(installed)).unwrap(),
            std::fs::read(repo.join(generated)).unwrap(),
            "{installed}"
        );
    }
    let bash = root.join("usr/share/bash-completion/completions/elect");
    let complete = run(
        "bash completion",
        Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && complete -p elect", bash.display())),
        10,
    );
    assert!(
        complete.contains("-F _elect") && complete.trim_end().ends_with(" elect"),
        "{complete}"
    );
    let zsh =
        std::fs::read_to_string(root.join("usr/share/zsh/vendor-completions/_elect")).unwrap();
    assert!(
        zsh.starts_with("#compdef elect"),
        "zsh autoloads it by its first line"
    );

    let copyright = std::fs::read_to_string(root.join("usr/share/doc/elect/copyright")).unwrap();
    assert!(
        copyright.contains("License: MIT or Apache-2.0"),
        "{copyright}"
    );

    // Removed, it leaves nothing of its own behind.
    run("dpkg -r", dpkg(&root, &log).args(["-r", "elect"]), 60);
    for path in FILES.iter().filter(|p| p.contains("elect")) {
        let path = root.join(path.trim_start_matches('/'));
        assert!(!path.exists(), "{} left after dpkg -r", path.display());
    }
}
