//! A real etcd with TLS and client certificates, and one with users and
//! roles: what works, what is refused and how, and where secrets never go.

use crate::stores::etcd::{Etcd, EtcdOptions};
use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

use support::certs::{self, Certs};
use support::{Running, SECOND, TempDir, elect};

fn tls_etcd(name: &str) -> (Etcd, Certs) {
    let certs = certs::generate(name);
    let etcd = Etcd::start_with(EtcdOptions {
        tls: Some(certs.clone()),
        ..Default::default()
    });
    (etcd, certs)
}

/// `elect run --store URL --lock LOCK [extra] -- sh -c SCRIPT`, output.
fn run(store: &str, lock: &str, extra: &[&str], script: &str) -> (i32, String, String) {
    let out = support::elect_run(store, lock, extra, script)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn tls_with_client_certificates_holds_renews_and_releases() {
    let (etcd, c) = tls_etcd("tls-ok");
    let flags = [
        "--cacert",
        path(&c.ca),
        "--cert",
        path(&c.client_cert),
        "--key",
        path(&c.client_key),
    ];
    let mut extra = flags.to_vec();
    extra.extend(["--ttl", "1s"]);
    // Several renewals happen while the command runs.
    let (code, out, err) = run(
        &etcd.url(),
        "secure",
        &extra,
        "sleep 2.5; echo token=$ELECT_TOKEN store=$ELECT_STORE",
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    assert!(
        out.contains("token=") && out.contains(&format!("store={}", etcd.url())),
        "{out}"
    );
    assert!(etcd.keys("secure/").is_empty(), "released");

    // The same flags through the environment variables etcdctl users have.
    let out = support::elect_run(&etcd.url(), "secure", &[], "echo ran")
        .env("ETCDCTL_CACERT", &c.ca)
        .env("ETCDCTL_CERT", &c.client_cert)
        .env("ETCDCTL_KEY", &c.client_key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tls_failures_are_refused_at_once_and_never_retried_in_the_clear() {
    let (etcd, c) = tls_etcd("tls-bad");
    let url = etcd.url();
    let plain = url.replace("etcds://", "etcd://");
    let garbage = TempDir::new("tls-garbage");
    let not_pem = garbage.join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let p = |f: &Path| path(f).to_string();
    let client = || {
        vec![
            "--cert".to_string(),
            p(&c.client_cert),
            "--key".into(),
            p(&c.client_key),
        ]
    };
    let other_client = vec![
        "--cert".to_string(),
        p(&c.other_client_cert),
        "--key".into(),
        p(&c.other_client_key),
    ];
    let ca = |f: &Path| vec!["--cacert".to_string(), p(f)];
    // (what, store URL, flags, exit code, text in the message)
    let cases: Vec<(&str, &str, Vec<String>, i32, &str)> = vec![
        (
            "a CA that did not sign the server",
            &url,
            [ca(&c.other_ca), client()].concat(),
            69,
            "certificate",
        ),
        // The server closes the connection without saying why: elect tries
        // until --connect-timeout, then says what to check.
        (
            "no client certificate",
            &url,
            ca(&c.ca),
            69,
            "does it accept this client certificate",
        ),
        (
            "a client certificate of another CA",
            &url,
            [ca(&c.ca), other_client].concat(),
            69,
            "does it accept this client certificate",
        ),
        ("plain text to a TLS server", &plain, vec![], 69, "etcd://"),
        (
            "a missing CA file",
            &url,
            ca(Path::new("/no/such/ca.pem")),
            78,
            "cannot read --cacert /no/such/ca.pem",
        ),
        (
            "a CA file that is not PEM",
            &url,
            ca(&not_pem),
            78,
            "is not a PEM file",
        ),
        (
            "an X.509 v1 client certificate",
            &url,
            [
                ca(&c.ca),
                vec![
                    "--cert".into(),
                    p(&c.v1_client_cert),
                    "--key".into(),
                    p(&c.v1_client_key),
                ],
            ]
            .concat(),
            78,
            "is an X.509 v1 certificate",
        ),
        (
            "--cert without --key",
            &url,
            vec!["--cert".into(), p(&c.client_cert)],
            78,
            "--cert needs --key",
        ),
    ];
    for (what, store, flags, code, text) in cases {
        let mut extra: Vec<&str> = flags.iter().map(String::as_str).collect();
        extra.extend(["--connect-timeout", "3s"]);
        let started = Instant::now();
        let (got, out, err) = run(store, "refused", &extra, "echo ran");
        assert_eq!(got, code, "{what}: {err}");
        assert!(out.is_empty(), "{what}: the command ran");
        assert!(err.contains(text), "{what}: {err:?} lacks {text:?}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        eprintln!(
            "{what}: exit {got} after {:?}: {}",
            started.elapsed(),
            err.trim()
        );
        if text == "certificate" || what == "plain text to a TLS server" {
            assert!(
                started.elapsed() < 1500 * MS,
                "{what}: a refusal is not retried until the timeout"
            );
        }
    }
    // A TLS port behind every store's plain URL: said at once.
    let port = plain.rsplit(':').next().unwrap();
    for store in [
        format!("etcd://127.0.0.1:{port}"),
        format!("postgres://elect@127.0.0.1:{port}/elect?sslmode=disable"),
        format!("mysql://elect@127.0.0.1:{port}/elect?ssl-mode=DISABLED"),
        format!("zk://127.0.0.1:{port}"),
    ] {
        let started = Instant::now();
        let (got, _, err) = run(&store, "refused", &["--connect-timeout", "5s"], "echo ran");
        let took = started.elapsed();
        eprintln!("{store}: exit {got} after {took:?}: {}", err.trim());
        assert_eq!(got, 69, "{store}: {err}");
        assert!(
            err.contains("speaks TLS from its first byte"),
            "{store}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{store}: one line: {err}");
        assert!(took < 1500 * MS, "{store}: took {took:?}");
    }
    let leases = etcd.etcdctl(&["lease", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&leases.stdout).trim(),
        "found 0 leases"
    );
}

fn auth_etcd(name: &str) -> (Etcd, TempDir) {
    // Simple tokens that expire after a second: a long hold outlives many.
    let mut etcd = Etcd::start_with(EtcdOptions {
        args: vec![
            "--auth-token".into(),
            "simple".into(),
            "--auth-token-ttl".into(),
            "1".into(),
        ],
        ..Default::default()
    });
    etcd.enable_auth("alice", "alice-pw", "jobs/");
    let dir = TempDir::new(name);
    std::fs::write(dir.join("password"), "alice-pw\n").unwrap();
    std::fs::write(dir.join("wrong"), "nope\n").unwrap();
    (etcd, dir)
}

#[test]
fn with_users_a_limited_role_is_enough_and_secrets_stay_hidden() {
    let (etcd, dir) = auth_etcd("auth-ok");
    let password_file = dir.join("password");
    let flags = [
        "--user",
        "alice",
        "--password-file",
        path(&password_file),
        "--ttl",
        "1s",
    ];
    let script = "sleep 3; echo token=$ELECT_TOKEN";
    let mut holder = Running::spawn(support::elect_run(
        &etcd.url(),
        "jobs/nightly",
        &flags,
        script,
    ));
    let token = holder.expect_line("token=", 10 * SECOND);
    assert_eq!(
        holder.wait_code(10 * SECOND),
        0,
        "held across several token expiries without a loss"
    );
    assert!(token.parse::<u64>().unwrap() > 0);

    // The password through the environment: not in the command's
    // environment, not in the argv of elect or of its guard.
    let seen = TempDir::new("auth-seen");
    let script = format!(
        "env > {0}/env; cat /proc/$PPID/cmdline > {0}/guard; cat /proc/$(cut -d' ' -f4 /proc/$PPID/stat)/cmdline > {0}/elect",
        seen.0.display()
    );
    let out = support::elect_run(&etcd.url(), "jobs/env", &["--user", "alice"], &script)
        .env("ELECT_PASSWORD", "alice-pw")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read =
        |f: &str| String::from_utf8_lossy(&std::fs::read(seen.join(f)).unwrap()).into_owned();
    assert!(
        read("guard").contains("lease-guard") && read("elect").contains("--user"),
        "read the right argvs"
    );
    for f in ["env", "guard", "elect"] {
        assert!(
            !read(f).contains("alice-pw"),
            "the password is in {f}: {}",
            read(f)
        );
    }
    assert!(
        !read("env")
            .lines()
            .any(|l| l.starts_with("ELECT_PASSWORD="))
    );

    // status and check with the same credentials.
    let out = elect()
        .args([
            "status",
            "--store",
            &etcd.url(),
            "--lock",
            "jobs/nightly",
            "--user",
            "alice",
        ])
        .env("ELECT_PASSWORD", "alice-pw")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "free: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn wrong_passwords_and_missing_permissions_are_refused_clearly() {
    let (etcd, dir) = auth_etcd("auth-bad");
    let good = dir.join("password");
    let wrong = dir.join("wrong");
    let cases: Vec<(&str, Vec<&str>, &str, i32, &str)> = vec![
        (
            "a wrong password",
            vec!["--user", "alice", "--password-file", path(&wrong)],
            "jobs/x",
            78,
            "authentication failed",
        ),
        (
            "no role for the lock",
            vec!["--user", "alice", "--password-file", path(&good)],
            "other",
            78,
            "permission denied",
        ),
        (
            "no user at all",
            vec![],
            "jobs/x",
            78,
            "this etcd has users: give --user NAME",
        ),
        (
            "no password at all",
            vec!["--user", "alice"],
            "jobs/x",
            78,
            "needs a password",
        ),
        (
            "a missing password file",
            vec!["--user", "alice", "--password-file", "/no/such/file"],
            "jobs/x",
            78,
            "cannot read --password-file",
        ),
    ];
    for (what, flags, lock, code, text) in cases {
        let (got, out, err) = run(&etcd.url(), lock, &flags, "echo ran");
        assert_eq!(got, code, "{what}: {err}");
        assert!(out.is_empty());
        assert!(err.contains(text), "{what}: {err:?} lacks {text:?}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        eprintln!("{what}: exit {got}: {}", err.trim());
    }
    let (_, _, err) = run(
        &etcd.url(),
        "other",
        &["--user", "alice", "--password-file", path(&good)],
        "true",
    );
    assert!(
        err.contains("readwrite permission on the key prefixes 'other/' (its queue) and 'other.'"),
        "says which permission: {err}"
    );
    // A user with rights on a prefix only is told to list that.
    let out = elect()
        .args(["list", "--store", &etcd.url(), "--user", "alice"])
        .args(["--password-file", path(&good)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("--prefix PREFIX") && err.lines().count() == 1,
        "{err}"
    );
    let out = elect()
        .args([
            "list",
            "--store",
            &etcd.url(),
            "--user",
            "alice",
            "--prefix",
            "jobs/",
        ])
        .args(["--password-file", path(&good)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let leases = etcd.etcdctl(&["lease", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&leases.stdout).trim(),
        "found 0 leases",
        "nothing left in the store"
    );
}

/// `elect check` and `elect checkpoint` inside the command reach the store
/// with the credentials and certificates its elect was given, however it
/// was given them (flags, variables, etcdctl's variable), from any
/// directory, and the password never shows in the command's environment or
/// arguments.
#[test]
fn elect_inside_the_command_reaches_the_store_as_its_elect_did() {
    let (etcd, dir) = auth_etcd("auth-inside");
    // A relative path, from elect's directory.
    support::inspect::reached_from_inside_the_command(
        &etcd.url(),
        "jobs/a",
        (&dir.0, &["--user", "alice", "--password-file", "password"]),
        &[],
        "alice-pw",
    );
    support::inspect::reached_from_inside_the_command(
        &etcd.url(),
        "jobs/b",
        (&dir.0, &["--user", "alice"]),
        &[("ELECT_PASSWORD", "alice-pw")],
        "alice-pw",
    );
    support::inspect::reached_from_inside_the_command(
        &etcd.url(),
        "jobs/c",
        (&dir.0, &[]),
        &[("ETCDCTL_USER", "alice:alice-pw")],
        "alice-pw",
    );
    let (tls, c) = tls_etcd("tls-inside");
    support::inspect::reached_from_inside_the_command(
        &tls.url(),
        "jobs/d",
        (
            &dir.0,
            &[
                "--cacert",
                path(&c.ca),
                "--cert",
                path(&c.client_cert),
                "--key",
                path(&c.client_key),
            ],
        ),
        &[],
        "PRIVATE KEY",
    );
}

/// The guide's least privilege on etcd: readwrite on the lock's queue,
/// `LOCK/`, and on its records, `LOCK.`, and nothing else, runs a job once
/// a period with its history and checkpoint, without a warning; read on
/// the same prefixes is enough to look.
#[test]
fn readwrite_on_the_lock_and_its_records_is_all_a_job_needs() {
    let mut etcd = Etcd::start();
    etcd.enable_auth("batch", "batch-pw", "jobs/nightly/");
    let root = |args: &[&str]| {
        let out = etcd.etcdctl(args);
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
    };
    root(&[
        "role",
        "grant-permission",
        "locks",
        "--prefix=true",
        "readwrite",
        "jobs/nightly.",
    ]);
    root(&["role", "add", "viewers"]);
    for prefix in ["jobs/nightly/", "jobs/nightly."] {
        root(&[
            "role",
            "grant-permission",
            "viewers",
            "--prefix=true",
            "read",
            prefix,
        ]);
    }
    root(&["user", "add", "viewer:viewer-pw", "--interactive=false"]);
    root(&["user", "grant-role", "viewer", "viewers"]);
    let dir = TempDir::new("auth-least");
    let (batch_pw, viewer_pw) = (dir.join("batch"), dir.join("viewer"));
    std::fs::write(&batch_pw, "batch-pw\n").unwrap();
    std::fs::write(&viewer_pw, "viewer-pw\n").unwrap();
    let batch = ["--user", "batch", "--password-file", path(&batch_pw)];
    let once = [&batch[..], &["--once-per", "1h"]].concat();
    let first = support::elect_run(
        &etcd.url(),
        "jobs/nightly",
        &once,
        r#""$ELECT_BIN" checkpoint put 7 && echo ran"#,
    )
    .env("ELECT_BIN", env!("CARGO_BIN_EXE_elect"))
    .output()
    .unwrap();
    let said = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(first.status.code(), Some(0), "{}", said(&first));
    assert_eq!(first.stdout, b"ran\n");
    assert!(first.stderr.is_empty(), "{}", said(&first));
    let (code, out, err) = run(&etcd.url(), "jobs/nightly", &once, "echo again");
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("done already"), "{err}");
    let viewer = ["--user", "viewer", "--password-file", path(&viewer_pw)];
    for command in ["status", "history"] {
        let out = elect()
            .args([
                command,
                "--json",
                "--store",
                &etcd.url(),
                "--lock",
                "jobs/nightly",
            ])
            .args(viewer)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.code() == Some(1) || out.status.success(),
            "{command}: {out:?}"
        );
        assert!(said.contains("succeeded"), "{command}: {said}");
    }
}
