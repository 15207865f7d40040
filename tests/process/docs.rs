//! What the README and the guide show runs as written: the README's quick
//! start, every systemd unit (`systemd-analyze verify`), and every
//! Kubernetes manifest (a dry run on a real kube-apiserver). The links,
//! tables and command lines are checked against the binary's own
//! definitions by the unit tests of `src/docs.rs`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{self, TempDir};

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The README, CONTRIBUTING.md and every page of `docs/`, each with its
/// path.
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                paths.push(path);
            }
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// The code blocks of `text` fenced as ```` ```kind ````, each without its
/// fences and with the indentation of its fence taken off (a block inside
/// a list item).
fn blocks(text: &str, kind: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence = trimmed.strip_prefix("```");
        match open.as_mut() {
            None if fence == Some(kind) => open = Some((indent, String::new())),
            Some(_) if fence == Some("") => found.extend(open.take().map(|(_, b)| b)),
            Some((indent, block)) => {
                block.push_str(line.get(*indent..).unwrap_or(trimmed));
                block.push('\n');
            }
            None => {}
        }
    }
    found
}

/// `sh -c line` as a user would run it: as the user `nobody` when the
/// tests are root (root's `--store file` is /var/lib/elect, which a test
/// must not touch), with `home` as HOME and elect on the PATH.
fn as_a_user(line: &str, home: &Path, bin: &Path) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", line])
        .env_clear()
        .env("HOME", home)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .stdin(Stdio::null());
    if let Some((uid, gid)) = nobody() {
        c.uid(uid).gid(gid);
    }
    c
}

/// `nobody`'s uid and gid, when the tests are root.
fn nobody() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody");
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// The quick start's three commands, on the `file:` store of a fresh user:
/// the holder prints its token, a second run is turned away with 75
/// without running its command, `status` names the holder, and the next
/// run after the holder ended gets token 2.
#[test]
fn the_readme_quick_start_runs_as_written() {
    let (_, readme) = pages().into_iter().find(|(p, _)| p == "README.md").unwrap();
    let from = readme.find("\n## Quick start\n").expect("a Quick start");
    let section = &readme[from + 1..];
    let section = &section[..section.find("\n## ").unwrap()];
    let commands: Vec<String> = blocks(section, "sh")
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert_eq!(commands.len(), 3, "{commands:?}");

    let dir = TempDir::new("quick-start");
    let home = dir.join("home");
    let bin = dir.join("bin");
    for d in [&home, &bin] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::copy(env!("CARGO_BIN_EXE_elect"), bin.join("elect")).unwrap();
    if let Some((uid, gid)) = nobody() {
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    }
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut holder = as_a_user(&commands[0], &home, &bin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert_eq!(said, "holding with token 1\n", "the holder's first line");

    let busy = as_a_user(&commands[1], &home, &bin).output().unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", stderr_of(&busy));
    assert!(
        busy.stdout.is_empty(),
        "its command ran: {}",
        stdout_of(&busy)
    );
    assert!(
        stderr_of(&busy).contains("the command was not run (exit 75)"),
        "{}",
        stderr_of(&busy)
    );
    let status = as_a_user(&commands[2], &home, &bin).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", stderr_of(&status));
    for shown in ["held", "holder:", "command:", "since:", "token:    1"] {
        assert!(stdout_of(&status).contains(shown), "{}", stdout_of(&status));
    }

    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    holder.wait().unwrap();
    let next = as_a_user(
        "elect run --store file --lock demo -- sh -c 'echo $ELECT_TOKEN'",
        &home,
        &bin,
    )
    .output()
    .unwrap();
    assert_eq!(stdout_of(&next), "2", "{}", stderr_of(&next));
}

/// Every systemd unit of the guide passes `systemd-analyze verify` with no
/// word of complaint (an unknown key is only a warning there), with the
/// test's elect where the unit names /usr/bin/elect.
#[test]
fn every_systemd_unit_passes_systemd_analyze_verify() {
    let analyze = support::tools::tool("ELECT_TEST_SYSTEMD_ANALYZE", "systemd-analyze", "systemd");
    let dir = TempDir::new("units");
    let mut verified = 0;
    for (page, text) in pages() {
        for unit in blocks(&text, "ini") {
            assert!(
                unit.contains("\n[Install]\n"),
                "{page}: a unit without [Install]:\n{unit}"
            );
            verified += 1;
            let path = dir.join(&format!("elect-example-{verified}.service"));
            std::fs::write(
                &path,
                unit.replace("/usr/bin/elect", env!("CARGO_BIN_EXE_elect")),
            )
            .unwrap();
            let out = Command::new(&analyze)
                .arg("verify")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
                "{page}: systemd-analyze verify: {}{}\n{unit}",
                stdout_of(&out),
                stderr_of(&out)
            );
        }
    }
    assert!(verified >= 2, "only {verified} units found");
}

/// The API path that creates an object of `kind` in `namespace`.
fn collection(kind: &str, namespace: &str) -> String {
    let (group, plural) = match kind {
        "ServiceAccount" => ("api/v1", "serviceaccounts"),
        "Role" => ("apis/rbac.authorization.k8s.io/v1", "roles"),
        "RoleBinding" => ("apis/rbac.authorization.k8s.io/v1", "rolebindings"),
        "Deployment" => ("apis/apps/v1", "deployments"),
        "StatefulSet" => ("apis/apps/v1", "statefulsets"),
        "CronJob" => ("apis/batch/v1", "cronjobs"),
        "Job" => ("apis/batch/v1", "jobs"),
        "Service" => ("api/v1", "services"),
        kind => panic!("a manifest of kind {kind}: name its API path here"),
    };
    format!("/{group}/namespaces/{namespace}/{plural}")
}

/// A field's value as `key: value` gives it, on its own line or in a flow
/// map (`metadata: { name: x, namespace: y }`).
fn field<'a>(doc: &'a str, key: &str) -> Option<&'a str> {
    let at = doc.find(&format!("{key}: "))? + key.len() + 2;
    let value = &doc[at..];
    let end = value.find([',', '}', '\n']).unwrap_or(value.len());
    Some(value[..end].trim())
}

/// Every Kubernetes manifest of the guide is whole objects that a real
/// kube-apiserver accepts, each object in a dry run (`dryRun=All`: checked
/// and admitted, nothing stored). Prometheus's rule files are the other
/// YAML of the guide, and are checked where their metrics are.
#[test]
fn every_kubernetes_manifest_is_accepted_by_the_api_server() {
    let kube = crate::stores::k8s::shared();
    let mut accepted = 0;
    for (page, text) in pages() {
        for manifest in blocks(&text, "yaml") {
            if manifest.starts_with("groups:") {
                continue;
            }
            for object in manifest.split("\n---\n") {
                let kind = field(object, "kind").unwrap_or_else(|| {
                    panic!("{page}: a manifest that is not a whole object (no kind):\n{object}")
                });
                assert!(
                    object.starts_with("apiVersion: "),
                    "{page}: an object without apiVersion:\n{object}"
                );
                let namespace = field(object, "namespace").unwrap_or("default");
                kube.create_namespace(namespace);
                let path = format!(
                    "{}?dryRun=All&fieldValidation=Strict",
                    collection(kind, namespace)
                );
                let (code, answer) =
                    kube.request_in("application/yaml", "POST", &path, Some(object));
                assert!(
                    code == 201 || code == 200,
                    "{page}: the API server refused a {kind}: {code} {answer}\n{object}"
                );
                accepted += 1;
            }
        }
    }
    assert!(accepted >= 6, "only {accepted} objects found");
}
