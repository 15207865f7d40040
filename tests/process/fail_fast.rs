//! A store that is not there, or says no, is answered at once: a new user's
//! first mistake costs them no ten seconds of silence.

use crate::stores::etcd::Etcd;
use crate::support;

use std::process::Stdio;
use std::time::Instant;

use support::elect;

/// A loopback port where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Run elect with `args`; its exit code, stderr and how long it took.
fn timed(args: &[&str]) -> (i32, String, f64) {
    let started = Instant::now();
    let out = elect().args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed().as_secs_f64() * 1e3,
    )
}

#[test]
fn a_refused_connection_is_answered_within_two_seconds_by_every_command() {
    let store = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{}",
        closed_port(),
        closed_port()
    );
    let commands: [&[&str]; 5] = [
        &["run", "--lock", "x", "--", "true"],
        &["status", "--lock", "x"],
        &["list"],
        &[
            "check",
            "--lock",
            "x",
            "--holder-key",
            "x/1",
            "--token",
            "1",
        ],
        &["break", "--lock", "x", "--yes"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.extend(["--store", &store]);
        // `run` takes its options before `--`.
        if command[0] == "run" {
            args = vec!["run", "--store", &store, "--lock", "x", "--", "true"];
        }
        let (code, said, took) = timed(&args);
        eprintln!("{}: {took:.0} ms", command[0]);
        assert_eq!(code, 69, "{command:?}: {said}");
        assert!(took < 2000.0, "{command:?} took {took:.0} ms");
        assert!(
            said.contains("is etcd running there?") && said.contains("ELECT_STORE"),
            "{command:?}: {said}"
        );
        assert!(!said.contains("x/ "), "an internal key prefix: {said}");
        assert_eq!(said.lines().count(), 1, "one line: {said}");
    }
}

#[test]
fn a_user_against_an_etcd_without_users_is_told_at_once() {
    let etcd = Etcd::start();
    let started = Instant::now();
    let out = elect()
        .args([
            "status",
            "--store",
            &etcd.url(),
            "--lock",
            "x",
            "--user",
            "bob",
        ])
        .env("ELECT_PASSWORD", "secret")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed().as_secs_f64() * 1e3;
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!("--user against an etcd without auth: {took:.0} ms: {said}");
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(took < 2000.0, "took {took:.0} ms");
    assert!(said.contains("authentication is not enabled"), "{said}");
}

/// A Unix socket that is not there, or that nothing listens on (its server
/// gone, its file left behind), is answered as a refused port is: at once,
/// naming the socket, by `run` and the other commands.
#[test]
fn a_missing_or_dead_unix_socket_is_answered_at_once() {
    let dir = support::TempDir::new("dead-sockets");
    // Bound and let go: the file stays, and a connection to it is refused.
    let dead_postgres = dir.join(".s.PGSQL.5432");
    drop(std::os::unix::net::UnixListener::bind(&dead_postgres).unwrap());
    let dead_mysql = dir.join("mysqld.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead_mysql).unwrap());
    let missing = dir.join("no-such-dir").display().to_string();
    let dir = dir.0.display();
    let cases = [
        (
            format!("postgres:///db?host={missing}"),
            format!("the socket {missing}/.s.PGSQL.5432 does not exist; is PostgreSQL running"),
        ),
        (
            format!("postgres:///db?host={dir}"),
            format!(
                "nothing listens at the socket {} (connection refused); is PostgreSQL running",
                dead_postgres.display()
            ),
        ),
        (
            format!("mysql://u@localhost/db?socket={missing}/mysqld.sock"),
            format!("the socket {missing}/mysqld.sock does not exist; is MySQL or MariaDB running"),
        ),
        (
            format!("mysql://u@localhost/db?socket={}", dead_mysql.display()),
            format!(
                "nothing listens at the socket {} (connection refused); is MySQL or MariaDB running",
                dead_mysql.display()
            ),
        ),
    ];
    for (store, says) in &cases {
        let commands: [&[&str]; 2] = [
            &["run", "--store", store, "--lock", "x", "--", "true"],
            &["status", "--store", store, "--lock", "x"],
        ];
        for args in commands {
            let (code, said, took) = timed(args);
            eprintln!("{store} {}: {took:.0} ms: {said}", args[0]);
            assert_eq!(code, 69, "{args:?}: {said}");
            assert!(took < 2000.0, "{args:?} took {took:.0} ms");
            assert!(said.contains(says.as_str()), "{args:?}: {said}");
            assert_eq!(said.lines().count(), 1, "one line: {said}");
        }
    }
}

/// A store URL in a message keeps its user and loses only its password,
/// and a --password-file that cannot be read is named with why: 78,
/// before anything is sent.
#[test]
fn a_password_file_that_cannot_be_read_is_named_and_the_user_kept() {
    for scheme in ["postgres", "mysql"] {
        let url = |rest: &str| format!("{scheme}://alice{rest}");
        for (given, extra, says) in [
            (
                url("@127.0.0.1:9/app"),
                &["--password-file", "/nonexistent/password"][..],
                format!(
                    "store URL '{}': cannot read --password-file /nonexistent/password: No such \
                     file or directory",
                    url("@127.0.0.1:9/app")
                ),
            ),
            (
                url(":s3cret@127.0.0.1:9/app?bogus=1"),
                &[][..],
                format!(
                    "store URL '{}': unknown option 'bogus'",
                    url(":***@127.0.0.1:9/app?bogus=1")
                ),
            ),
        ] {
            let out = elect()
                .args(["status", "--store", &given, "--lock", "x"])
                .args(extra)
                .output()
                .unwrap();
            support::assert_outcome(&given, &out, 78, &says);
            assert!(!String::from_utf8_lossy(&out.stderr).contains("s3cret"));
        }
    }
    // libpq's URLs take a password among their options too.
    let given = "postgres://alice@127.0.0.1:9/app?password=s3cret&bogus=1";
    let out = elect()
        .args(["status", "--store", given, "--lock", "x"])
        .output()
        .unwrap();
    support::assert_outcome(
        given,
        &out,
        78,
        "store URL 'postgres://alice@127.0.0.1:9/app?password=***&bogus=1': unknown option",
    );
}
