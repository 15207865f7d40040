//! `elect status` of etcdctl's holders, the live waiting line and JSON
//! logs. What `status`, `list`, `check` and `break` show of elect's own
//! holders, on every store, is in tests/suites/behaviour.rs.

use crate::stores::etcd::Etcd;
use crate::support;

use std::process::Command;

use serde_json::Value;
use support::inspect::{holder_and_waiter, status};
use support::{Running, SECOND, TempDir, elect, elect_run, hold};

#[test]
fn status_shows_holders_that_etcdctl_started() {
    let etcd = Etcd::start();
    let dir = TempDir::new("inspect-etcdctl");
    let release = dir.join("release");
    let script = format!(
        "echo held; while [ ! -e {} ]; do sleep 0.01; done",
        release.display()
    );
    let mut etcdctl = etcd.etcdctl_command();
    etcdctl.args(["lock", "theirs", "--", "sh", "-c", &script]);
    let mut theirs = Running::spawn(etcdctl);
    theirs.expect_line("held", 10 * SECOND);
    let (code, out) = status(&etcd.url(), "theirs", true);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["held"], true);
    assert!(v["token"].as_u64().unwrap() > 0);
    assert!(v["holder"].is_null(), "etcdctl records no holder: {v}");
    assert!(v["ttl_left_ms"].as_u64().unwrap() > 0);
    std::fs::write(&release, "").unwrap();
    assert!(theirs.wait(10 * SECOND).success());
}

/// A holder on this host whose elect, guard and command were all killed:
/// `status` says its process is gone and when the lease ends, instead of
/// showing it as a live holder.
#[test]
fn status_names_a_holder_whose_process_is_gone() {
    let etcd = Etcd::start();
    let mut holder = Running::spawn(elect_run(
        &etcd.url(),
        "gone",
        &["--ttl", "30s"],
        support::process::HOLD,
    ));
    holder.expect_line("token", 10 * SECOND);
    let (code, out) = status(&etcd.url(), "gone", true);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["holder_gone"], false, "{v}");
    let elect_pid = holder.pid();
    let guard = support::find_child(elect_pid, support::GUARD);
    let sh = support::find_child(guard, "sh");
    for sig in [libc::SIGSTOP, libc::SIGKILL] {
        for pid in [elect_pid, guard, sh] {
            // SAFETY: plain kill(2) of processes this test started.
            assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
        }
    }
    holder.wait(5 * SECOND);
    let (code, out) = status(&etcd.url(), "gone", false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("(pid {elect_pid} on "))
            && out.contains("; its process is gone, the lease ends in "),
        "{out}"
    );
    let (_, out) = status(&etcd.url(), "gone", true);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["holder_gone"], true, "{v}");
}

#[test]
fn the_live_waiting_line_shows_on_a_terminal_only() {
    let dir = TempDir::new("inspect-live");
    let (mut holder, token) = hold(&dir.url(), "live", &["--identity", "first-holder"]);
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    // `script` runs the waiter on a pseudo-terminal and records what it shows.
    let typescript = dir.join("typescript");
    let waiter_cmd = format!(
        "{elect_bin} run --store {} --lock live -- echo acquired",
        dir.url()
    );
    let mut waiter = Running::spawn({
        let mut c = Command::new("script");
        c.args(["-qfec", &waiter_cmd]).arg(&typescript);
        c
    });
    let give_up = std::time::Instant::now() + 10 * SECOND;
    while !std::fs::read_to_string(&typescript)
        .unwrap_or_default()
        .contains("waiting for lock live")
    {
        assert!(
            std::time::Instant::now() < give_up,
            "no live line on the terminal"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    holder.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let shown = std::fs::read_to_string(&typescript).unwrap();
    assert!(
        shown.contains(&format!("held with token {token} by first-holder")),
        "{shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[Kacquired"),
        "the line is erased when the lock is acquired: {shown:?}"
    );

    // Without a terminal: not a byte of it.
    let (mut holder, _) = hold(&dir.url(), "live", &[]);
    let mut waiter = Running::spawn(elect_run(&dir.url(), "live", &["-v"], "echo acquired"));
    waiter.expect_stderr("waiting for the lock", 10 * SECOND);
    // Nothing to wait for when checking that something does not appear:
    // give the line time for a redraw or two.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    holder.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let seen = waiter.stderr_seen.join("\n");
    assert!(
        !seen.contains("\x1b[K") && !seen.contains("waiting for lock"),
        "{seen:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = TempDir::new("inspect-json");
    let out = elect()
        .args([
            "--log-format",
            "json",
            "-v",
            "run",
            "--store",
            &dir.url(),
            "--lock",
            "j",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["time"].is_string() && v["level"].is_string() && v["message"].is_string(),
            "{line}"
        );
    }
    assert!(text.contains("acquired lock j with token 1"));
    // What a log shipper indexes, in fields of their own.
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let event = |name: &str| {
        lines
            .iter()
            .find(|v| v["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event: {text}"))
    };
    for name in ["acquired", "started", "ended", "released"] {
        let v = event(name);
        assert_eq!(
            (&v["lock"], &v["token"]),
            (&Value::from("j"), &Value::from(1)),
            "{v}"
        );
        assert!(v["identity"].is_string(), "{v}");
    }
    assert_eq!(event("ended")["exit_code"], 0, "{text}");
    // A failure's line carries elect's exit code.
    let out = elect()
        .args([
            "--log-format",
            "json",
            "run",
            "--store",
            &dir.url(),
            "--lock",
            "j",
        ])
        .args(["--", "/no/such/command"])
        .output()
        .unwrap();
    let line: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(
        (line["event"].as_str(), line["exit_code"].as_u64()),
        (Some("exit"), Some(127)),
        "{line}"
    );
}

/// `since` is when the holder got the lock, `queued` when it joined the
/// queue: for a holder that waited, they differ.
fn since_is_when_the_lock_was_got(store: &str) {
    let (mut first, _) = hold(store, "since", &[]);
    let mut second = Running::spawn(elect_run(store, "since", &[], support::HOLD));
    // Until the second has queued, and a second more has passed on the wall
    // clock the times are written in (to the second).
    let give_up = std::time::Instant::now() + 10 * SECOND;
    let queued = loop {
        let (_, out) = status(store, "since", true);
        let v: Value = serde_json::from_str(&out).unwrap();
        if v["waiting"].as_u64() == Some(1) {
            break std::time::SystemTime::now();
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the second never queued"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    while queued.elapsed().unwrap() < std::time::Duration::from_millis(1100) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.send_line("done");
    second.expect_line("token", 10 * SECOND);
    // etcd records the time a second after the lock was got.
    let give_up = std::time::Instant::now() + 5 * SECOND;
    loop {
        let (_, out) = status(store, "since", true);
        let v: Value = serde_json::from_str(&out).unwrap();
        let holder = &v["holder"];
        if holder["since"] != holder["queued"] {
            assert!(holder["since"].as_str() > holder["queued"].as_str(), "{v}");
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "since stayed the queue time: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    second.send_line("done");
    assert_eq!(second.wait_code(10 * SECOND), 0);
}

#[test]
fn since_is_when_the_lock_was_got_on_etcd() {
    let etcd = Etcd::start();
    since_is_when_the_lock_was_got(&etcd.url());
}

#[test]
fn since_is_when_the_lock_was_got_on_the_file_store() {
    let dir = TempDir::new("inspect-since");
    since_is_when_the_lock_was_got(&dir.url());
}

#[test]
fn list_on_a_terminal_has_a_header_and_says_when_there_are_no_locks() {
    let dir = TempDir::new("inspect-list");
    let out = elect()
        .args(["list", "--store", &dir.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "no locks: nothing on stdout");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no locks at file:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = elect()
        .args(["list", "-q", "--store", &dir.url(), "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    assert!(out.stderr.is_empty());

    let (mut holder, token) = hold(&dir.url(), "jobs/nightly", &["--identity", "lister"]);
    // Not a terminal: tab-separated, no header.
    let out = elect()
        .args(["list", "--store", &dir.url()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("jobs/nightly\theld by lister"), "{text}");
    assert!(text.contains(&format!("token {token}")), "{text}");
    assert!(!text.contains("LOCK"), "{text}");
    // On a terminal: a header over columns.
    let mut c = elect();
    c.args(["list", "--store", &dir.url()]);
    let mut pty = support::Pty::spawn(c);
    pty.expect("LOCK", 10 * SECOND);
    pty.expect("jobs/nightly", 10 * SECOND);
    assert!(pty.wait(10 * SECOND).success());
    assert!(
        pty.seen.contains("HOLDER") && pty.seen.contains("WAITING"),
        "{:?}",
        pty.seen
    );
    // Names only, for completion.
    let out = elect()
        .args(["list", "--names-only", "--store", &dir.url()])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "jobs/nightly\n");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

#[test]
fn check_and_break_answer_in_json() {
    let dir = TempDir::new("inspect-json-answers");
    let store = dir.url();
    let (mut holder, _waiter, key, token) = holder_and_waiter(&store, "answers");
    let check_json = |token: u64| {
        let out = elect()
            .args(["check", "--json"])
            .env("ELECT_STORE", &store)
            .env("ELECT_LOCK", "answers")
            .env("ELECT_KEY", &key)
            .env("ELECT_TOKEN", token.to_string())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code().unwrap(), v)
    };
    let (code, v) = check_json(token);
    assert_eq!(code, 0);
    assert_eq!(v["holds"], true);
    assert!(v["why"].is_null());
    assert_eq!(v["token"], token);
    assert_eq!(v["lock"], "answers");
    let (code, v) = check_json(token + 7);
    assert_eq!(code, 1);
    assert_eq!(v["holds"], false);
    assert!(v["why"].is_string(), "{v}");

    let break_json = |extra: &[&str]| {
        let out = elect()
            .args([
                "break", "--json", "--yes", "--store", &store, "--lock", "answers",
            ])
            .args(extra)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap(), v)
    };
    let (code, v) = break_json(&["--token", &(token + 100).to_string()]);
    assert_eq!(code, 1);
    assert_eq!(v["outcome"], "changed");
    assert_eq!(v["token"], token);
    let (code, v) = break_json(&[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["outcome"], "stopped");
    assert_eq!(v["token"], token);
    assert_eq!(v["key"], key.as_str());
    assert_eq!(v["holder"]["identity"], "nightly-1");
    assert!(v["after_ms"].is_u64(), "{v}");
    assert_eq!(holder.wait_code(10 * SECOND), 76);
}

/// Without a terminal to ask on (a script, `echo n |`), `break` and
/// `break --force` need `--yes`: exit 64 in one line naming it, and the
/// holder keeps its lock.
#[test]
fn a_break_without_a_terminal_needs_yes() {
    let dir = TempDir::new("inspect-no-terminal");
    let (mut holder, token) = hold(&dir.url(), "keep", &[]);
    for extra in [&[][..], &["--force"]] {
        let mut c = elect();
        c.args(["break", "--store", &dir.url(), "--lock", "keep"])
            .args(extra)
            .stdin(std::process::Stdio::piped());
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(b"n\n");
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {said}");
        assert_eq!(said.trim().lines().count(), 1, "{said}");
        assert!(said.contains("add --yes"), "{said}");
    }
    assert_eq!(
        status_of(&dir.url(), "keep"),
        token,
        "the holder keeps its lock"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

#[test]
fn declining_the_break_prompt_exits_2() {
    let dir = TempDir::new("inspect-decline");
    let (mut holder, token) = hold(&dir.url(), "keep", &[]);
    let mut c = elect();
    c.args(["break", "--json", "--store", &dir.url(), "--lock", "keep"]);
    let mut pty = support::Pty::spawn(c);
    pty.expect("[y/N] ", 10 * SECOND);
    pty.type_in(b"n\n");
    let status = pty.wait(10 * SECOND);
    assert_eq!(status.code(), Some(2), "{:?}", pty.seen);
    pty.expect("\"outcome\":\"declined\"", 10 * SECOND);
    assert_eq!(status_of(&dir.url(), "keep"), token, "still held");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// The token of the holder of `lock`.
fn status_of(store: &str, lock: &str) -> u64 {
    let (code, out) = status(store, lock, true);
    assert_eq!(code, 0, "{out}");
    serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_u64()
        .unwrap()
}

/// Run the bash completion for the words `line` (the last one being
/// completed), as bash would when TAB is pressed, and return its offers.
fn complete_in_bash(line: &[&str]) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/completions/elect.bash");
    let program = format!(
        r#"source '{script}'
COMP_WORDS=("$@")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
_elect "${{COMP_WORDS[0]}}" "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
(( ${{#COMPREPLY[@]}} == 0 )) || printf '%s\n' "${{COMPREPLY[@]}}""#
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program, "bash"])
        .args(line)
        .env_remove("ELECT_STORE")
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash ({e}): install Debian's bash package"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// On a real bash line editor: a store with no locks offers no lock name,
/// and never the files of the current directory instead.
#[test]
fn bash_offers_no_file_names_for_a_lock() {
    let dir = TempDir::new("inspect-complete-files");
    std::fs::write(dir.join("zz-a-file-not-a-lock"), "").unwrap();
    let empty = TempDir::new("inspect-complete-empty");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/completions/elect.bash");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_elect"))
        .parent()
        .unwrap()
        .to_owned();
    let mut bash = Command::new("bash");
    bash.args(["--norc", "--noprofile", "-i"])
        .current_dir(&dir.0)
        .env("PS1", "ready-\\#> ")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env_remove("ELECT_STORE");
    let mut pty = support::Pty::spawn(bash);
    // Each prompt numbered: typing waits for readline's, not the echo.
    pty.expect("ready-1> ", 10 * SECOND);
    pty.type_in(format!("source '{script}'\n").as_bytes());
    pty.expect("ready-2> ", 10 * SECOND);
    pty.type_in(format!("elect status --store {} --lock z\t\t", empty.url()).as_bytes());
    // Then a line of our own, to know when the editor is done.
    pty.type_in(b"\x15echo done-$((6*7))\n");
    pty.expect("done-42", 10 * SECOND);
    assert!(!pty.seen.contains("zz-a-file-not-a-lock"), "{:?}", pty.seen);
    pty.type_in(b"exit\n");
    pty.wait(10 * SECOND);
}

#[test]
fn bash_completes_lock_names_signals_stores_and_commands() {
    let dir = TempDir::new("inspect-complete");
    let store = dir.url();
    let (mut holder, _) = hold(&store, "nightly-report", &[]);
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    for sub in ["status", "check", "break"] {
        let offered = complete_in_bash(&[elect_bin, sub, "--store", &store, "--lock", "night"]);
        assert_eq!(offered, ["nightly-report"], "{sub}");
    }
    let offered = complete_in_bash(&[elect_bin, "status", "--store", &store, "-l", ""]);
    assert_eq!(offered, ["nightly-report"]);
    // A store that cannot be reached offers nothing, at once.
    let started = std::time::Instant::now();
    let offered = complete_in_bash(&[
        elect_bin,
        "status",
        "--store",
        "etcd://127.0.0.1:1",
        "--lock",
        "",
    ]);
    assert!(offered.is_empty(), "{offered:?}");
    assert!(started.elapsed() < 5 * SECOND);

    let offered = complete_in_bash(&[elect_bin, "run", "--signal", ""]);
    assert!(offered.contains(&"TERM".to_string()), "{offered:?}");
    let offered = complete_in_bash(&[elect_bin, "run", "--store", "e"]);
    assert_eq!(offered, ["etcd://", "etcds://"]);
    let offered = complete_in_bash(&[elect_bin, "status", "--store", ""]);
    assert!(offered.contains(&"file:".to_string()), "{offered:?}");
    // After --: commands, not the files of the current directory.
    let offered = complete_in_bash(&[elect_bin, "run", "--lock", "x", "--", "ech"]);
    assert!(offered.contains(&"echo".to_string()), "{offered:?}");
    let offered = complete_in_bash(&[elect_bin, "run", "--lock", "x", "--", "Cargo.to"]);
    assert!(offered.is_empty(), "files offered as commands: {offered:?}");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// A reader that has gone (`elect list | head -n1`, `elect status … | grep
/// -q held`) ends elect quietly, as any Unix filter: by SIGPIPE, or exit 0,
/// with nothing on stderr; never a panic.
#[test]
fn a_closed_pipe_ends_elect_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new("inspect-pipe");
    let (mut holder, _token) = hold(&dir.url(), "piped", &[]);
    let store = dir.url();
    for args in [
        vec!["status", "--store", &store, "--lock", "piped"],
        vec!["status", "--store", &store, "--lock", "piped", "--json"],
        vec!["list", "--store", &store],
        vec!["checkpoint", "--store", &store, "--lock", "piped", "get"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = elect()
            .args(&args)
            .env("ELECT_KEY", "none")
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.signal() == Some(libc::SIGPIPE) || out.status.code().is_some_and(|c| c < 64),
            "{args:?}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    holder.signal(libc::SIGTERM);
    holder.wait(10 * SECOND);
}
