//! Names the commit elect is built from, for `elect --version`:
//! `0.1.0 (1c0cad1e5f3a 2026-12-01)`, with `, modified` when the sources
//! that go into the binary differ from that commit. An operator who finds
//! a binary on a host can then tell which code it runs.
//!
//! It also keeps the layers ARCHITECTURE.md draws (`src/layers.rs`): an
//! import across a boundary, or an exit outside a process's entry point,
//! fails the build with the line that does it.
//!
//! Outside a git checkout of its own (a crates.io tarball, a vendored copy
//! inside another repository, no git installed) the commit comes from the
//! tarball's `.cargo_vcs_info.json` if there is one, else the version stands
//! alone: the build never fails for want of git.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/layers.rs"]
mod layers;

/// What goes into the binary: a change here is a change of the binary.
const SOURCES: &[&str] = &["src", "build.rs", "Cargo.toml", "Cargo.lock", ".cargo"];

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    keep_the_layers(&root.join("src"));
    let version = env!("CARGO_PKG_VERSION").to_string();
    let commit = from_git(&root).or_else(|| from_crate_archive(&root));
    let full = match commit {
        Some(commit) => format!("{version} ({commit})"),
        None => version,
    };
    println!("cargo:rustc-env=ELECT_VERSION={full}");
    println!("cargo:rerun-if-changed=build.rs");
}

/// Fail the build on any line of `src` that crosses a layer's boundary.
fn keep_the_layers(src: &Path) {
    println!("cargo:rerun-if-changed={}", src.display());
    let wrong = match layers::read(src) {
        Ok(sources) => layers::violations(&sources),
        Err(e) => vec![format!("cannot read {}: {e}", src.display())],
    };
    if !wrong.is_empty() {
        eprintln!("the layers ARCHITECTURE.md draws are crossed:");
        for line in &wrong {
            eprintln!("  {line}");
        }
        std::process::exit(1);
    }
}

/// `git` in `root`, its output trimmed, or None on any failure.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        // Look only; never rewrite the index (which would make the next
        // build see a change and run this again).
        .arg("--no-optional-locks")
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

/// `1c0cad1e5f3a 2026-12-01[, modified]` when `root` is the top of a git
/// checkout; also asks cargo to look again when HEAD moves or a source
/// changes.
fn from_git(root: &Path) -> Option<String> {
    // A crate vendored inside another repository is not that repository's
    // commit.
    let top = git(root, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let hash = git(root, &["rev-parse", "--short=12", "HEAD"])?;
    let date = git(root, &["log", "-1", "--format=%cs", "HEAD"])?;
    // HEAD, the branch it names and the packed refs move with a commit or a
    // checkout (in a worktree, HEAD is in its own git dir, the refs in the
    // common one).
    let dir = |args: &[&str]| git(root, args).map(|d| root.join(d));
    let git_dir = dir(&["rev-parse", "--git-dir"])?;
    let common = dir(&["rev-parse", "--git-common-dir"])?;
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    watched.extend(SOURCES.iter().map(|s| root.join(s)));
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(SOURCES);
    let modified = !git(root, &status)?.is_empty();
    Some(if modified {
        format!("{hash} {date}, modified")
    } else {
        format!("{hash} {date}")
    })
}

/// The commit `cargo package` recorded in the tarball, as
/// `{"git": {"sha1": "…"}, …}`.
fn from_crate_archive(root: &Path) -> Option<String> {
    let path = root.join(".cargo_vcs_info.json");
    let info = std::fs::read_to_string(&path).ok()?;
    // (A path that does not exist would count as changed at every build.)
    println!("cargo:rerun-if-changed={}", path.display());
    let start = info.find("\"sha1\"")? + "\"sha1\"".len();
    let rest = info[start..].trim_start().strip_prefix(':')?.trim_start();
    let hash: String = rest
        .strip_prefix('"')?
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (hash.len() >= 12).then(|| hash[..12].to_string())
}
