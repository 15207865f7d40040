//! Usage errors, which need no store: each says what to type in one line
//! and exits 64 (78 for a store URL elect cannot use), as text or JSON,
//! before anything is reached; `--help`'s exit codes; and every option of
//! `elect run` taken from its environment variable too (on `file:`).

use crate::support;

use support::{SECOND, elect, elect_run};

/// `--help`'s exit codes fit the help's width, each wrapped line under its
/// text.
#[test]
fn the_exit_codes_in_help_wrap_under_their_text() {
    let out = elect().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let codes = &help[help.find("Exit codes:").unwrap()..];
    for line in codes.lines().skip(1).take_while(|l| !l.is_empty()) {
        assert!(line.len() <= 100, "{line}");
        assert!(line.starts_with("  "), "{line}");
        let rest = line.trim_start();
        let indent = line.len() - rest.len();
        assert!(indent == 2 || indent == 8, "{line}");
    }
}

#[test]
fn bad_input_is_a_usage_or_configuration_error() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--lock", "a b"], 64, "lock name"),
        (&["--lock", ""], 64, "empty"),
        (&["--lock", "x", "--ttl", "0s"], 64, "too short"),
        (&["--lock", "x", "--ttl=-1s"], 64, "negative"),
        (&["--lock", "x", "--ttl", "15"], 64, "unit"),
        (
            &["--lock", "x", "--ttl", "3s", "--grace", "2s"],
            64,
            "does not fit",
        ),
        (&["--lock", "x", "--signal", "NOPE"], 64, "signal"),
        (
            &["--lock", "x", "--wait", "1s", "--no-wait"],
            64,
            "cannot be used",
        ),
        (
            &["--lock", "x", "--store", "consul://a:1"],
            78,
            "unknown store",
        ),
        (&["--lock", "x", "--store", "etcd://a:notaport"], 78, "port"),
    ];
    for (args, code, text) in cases {
        let out = elect()
            .arg("run")
            .args(*args)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let out = elect().args(["run", "--lock", "x"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "a missing command is a usage error"
    );
}

#[test]
fn usage_errors_say_what_to_type_in_one_line() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["run", "--lock", "x", "echo", "hi"],
            64,
            "put -- before the command: elect run --lock x -- echo hi",
        ),
        (
            &["run", "--lcok", "x", "--", "true"],
            64,
            "did you mean '--lock'?",
        ),
        (
            &["run", "-lock", "x", "--", "true"],
            64,
            "'-lock' has one dash; did you mean --lock?",
        ),
        // Parsed as -l with the value 'ock=x' by clap alone: a lock never
        // meant.
        (
            &["run", "-lock=x", "--", "true"],
            64,
            "'-lock=x' has one dash; did you mean --lock=x?",
        ),
        (
            &["status", "-store", "file:/x", "--lock", "x"],
            64,
            "'-store' has one dash; did you mean --store?",
        ),
        (
            &["run", "--lock", "x", "--wait", "never", "--", "true"],
            64,
            "--wait never: to not wait at all, write 0 or use -n",
        ),
        (
            &["run", "--lock", "x", "--ttl", "25h", "--", "true"],
            64,
            "--ttl 25h: too long; the longest TTL is 24h",
        ),
        (
            &["run", "--lock", "x", "--rejoin", "always", "--", "true"],
            64,
            "--rejoin takes its value after '=': --rejoin=always",
        ),
        (
            &["run", "--lock", "überweisung", "--", "true"],
            64,
            "the lock name 'überweisung' contains 'ü'",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "etcd:127.0.0.1:2379",
                "--",
                "true",
            ],
            78,
            "did you mean etcd://127.0.0.1:2379? The forms are etcd://",
        ),
        (
            &["run", "--lock", "x", "--store", "/tmp/x", "--", "true"],
            78,
            "did you mean file:/tmp/x?",
        ),
        (&["check"], 64, "elect check is for COMMAND under elect run"),
        (
            &["run", "--lock", "a b", "--", "true"],
            64,
            "the lock name 'a b' contains ' '",
        ),
        (&["list", "--prefix"], 64, "--prefix needs a value (see"),
        (
            &["run", "--lock", "x", "--ttl", "15", "--", "true"],
            64,
            "--ttl 15: give a unit, e.g. 15s (see",
        ),
        (
            &["run", "--lock", "x", "--grace", "500", "--", "true"],
            64,
            "--grace 500: give a unit, e.g. 500ms or 500s",
        ),
        (
            &["run", "--endpoints", "h:2379", "--lock", "x", "--", "true"],
            64,
            "--store etcd://HOST:PORT",
        ),
        (
            &["run", "--lock", "x", "--shards", "0", "--", "true"],
            64,
            "--shards 0 is out of range",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "127.0.0.1:2379",
                "--",
                "true",
            ],
            78,
            "did you mean etcd://127.0.0.1:2379?",
        ),
        (
            &["run", "--lock", "x", "--store", "bogus:x", "--", "true"],
            78,
            "unknown store 'bogus:' in 'bogus:x'",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "postgres://u@h/d?sslmode=allow",
                "--",
                "true",
            ],
            78,
            "use disable, prefer, require, verify-ca or verify-full",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "etcd://127.0.0.1:2379?x=y",
                "--",
                "true",
            ],
            78,
            "unknown option 'x': etcd's URL takes none",
        ),
        // Below a millisecond is no bound at all, on any store: as 0s.
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "file:/tmp/elect-test-connect-timeout",
                "--connect-timeout",
                "1ns",
                "--",
                "true",
            ],
            64,
            "--connect-timeout 1ns: too short; the shortest --connect-timeout is 1ms",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "file:/tmp/elect-test-connect-timeout",
                "--connect-timeout",
                "0s",
                "--",
                "true",
            ],
            64,
            "--connect-timeout 0s: too short; the shortest --connect-timeout is 1ms",
        ),
        (
            &[
                "status",
                "--lock",
                "x",
                "--store",
                "file:/tmp/elect-test-connect-timeout",
                "--connect-timeout",
                "999us",
            ],
            64,
            "--connect-timeout 999us: too short",
        ),
    ];
    for (args, code, text) in cases {
        let out = elect()
            .env_remove("ELECT_KEY")
            .env_remove("ELECT_TOKEN")
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("elect: ") && !err.starts_with("elect: 20"),
            "a usage or configuration error has no timestamp: {err}"
        );
        if *code == 64 {
            assert!(
                err.trim_end().ends_with("--help)"),
                "says where to look: {err}"
            );
        }
    }
    // Bare elect lists the commands, each with its line, and exits 64.
    let out = elect().output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    for command in ["run ", "status ", "list ", "check ", "break "] {
        assert!(err.contains(&format!("  {command}")), "{err}");
    }
    assert!(err.contains("Take the lock"), "{err}");
    // Each command's line starts in one column.
    let columns: Vec<usize> = err
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| {
            let name_and_about = l.trim_start();
            let about = name_and_about[name_and_about.find(' ').unwrap()..].trim_start();
            l.len() - about.len()
        })
        .collect();
    assert!(columns.windows(2).all(|w| w[0] == w[1]), "{err}");
}

/// A store named as nothing (`--store ''`, `ELECT_STORE` empty or blank)
/// would be the default store, most likely not the one meant: a usage
/// error that lists the URL forms, for `run` and the other commands alike.
#[test]
fn a_store_named_as_nothing_is_a_usage_error_not_the_default() {
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (&["--store", ""], None, "--store '' names no store"),
        (&["--store", " "], None, "--store ' ' names no store"),
        (&[], Some(""), "ELECT_STORE='' names no store"),
        (&[], Some(" \t"), "ELECT_STORE=' \\t' names no store"),
    ];
    for (store, variable, says) in cases {
        for command in [&["run", "--lock", "x"][..], &["status", "--lock", "x"][..]] {
            let mut c = elect();
            c.args(command).args(store);
            if command[0] == "run" {
                c.args(["--", "echo", "ran"]);
            }
            if let Some(value) = variable {
                c.env("ELECT_STORE", value);
            }
            let out = c.output().unwrap();
            let what = format!("{command:?} {store:?} ELECT_STORE={variable:?}");
            support::assert_outcome(&what, &out, 64, says);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("etcd://HOST:PORT") && err.trim_end().ends_with("--help)"),
                "{what}: {err}"
            );
        }
    }
}

/// A control character in a store URL (an escape sequence pasted by
/// mistake) is shown escaped in every line that shows the URL, never
/// passed raw to the terminal.
#[test]
fn control_characters_in_a_store_url_are_shown_escaped() {
    for store in [
        "etcd://a\x1b[31mb",
        "zk://a\x1b[31mb:2181",
        "file:/tmp/a\x1b[31mb",
        "postgres://u@a\x1b[31mb/db",
        "mysql://u@a\x1b[31mb/db",
        "k8s:a\x1b[31mb",
    ] {
        for format in ["text", "json"] {
            let out = elect()
                .args(["--log-format", format, "status", "--lock", "x"])
                .args(["--store", store, "--connect-timeout", "1s"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{store:?}: {err}");
            assert!(!err.contains('\x1b'), "{store:?}: raw in {err:?}");
            assert!(err.contains(r"\u{1b}[31mb"), "{store:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{store:?}: {err}");
        }
    }
}

#[test]
fn json_logs_cover_usage_errors_too() {
    for (args, env) in [
        (
            &["--log-format", "json", "run", "--lcok", "x", "--", "true"][..],
            None,
        ),
        (&["run", "--lock", "x", "echo", "hi"][..], Some("json")),
        (&[][..], Some("json")),
    ] {
        let mut c = elect();
        c.args(args);
        match env {
            Some(format) => c.env("ELECT_LOG_FORMAT", format),
            None => c.env_remove("ELECT_LOG_FORMAT"),
        };
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(64));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        let v: serde_json::Value =
            serde_json::from_str(&err).unwrap_or_else(|e| panic!("{e}: {err}"));
        assert_eq!(v["level"], "error", "{err}");
        assert!(v["message"].as_str().unwrap().contains("--"), "{err}");
    }
}

#[test]
fn every_run_option_comes_from_the_environment_too() {
    let dir = support::TempDir::new("run-env");
    let store = dir.url();
    // As in the guide's Kubernetes examples: the identity from the pod's name.
    let out = elect()
        .args([
            "run",
            "--lock",
            "env",
            "--",
            "sh",
            "-c",
            "echo id=$ELECT_IDENTITY",
        ])
        .env("ELECT_STORE", &store)
        .env("ELECT_IDENTITY", "compactor-7f9c")
        .env("ELECT_TTL", "3s")
        .env("ELECT_GRACE", "")
        .env("ELECT_SIGNAL", "INT")
        .env("ELECT_REJOIN", "always")
        .env("ELECT_CONNECT_TIMEOUT", "2s")
        .env("ELECT_QUIET", "yes")
        .env("ELECT_SUBREAPER", "off")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "id=compactor-7f9c"
    );

    // A held lock: ELECT_WAIT=0 gives up at once with ELECT_BUSY_EXIT_CODE,
    // and says so with a timestamp; ELECT_QUIET=1 says nothing.
    let (mut holder, _) = support::hold(&store, "env", &["--identity", "first"]);
    let busy = |extra: &[(&str, &str)]| {
        let mut c = elect_run(&store, "env", &[], "echo ran");
        c.env("ELECT_WAIT", "0").env("ELECT_BUSY_EXIT_CODE", "3");
        for (k, v) in extra {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = busy(&[]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("held by first"), "{err}");
    let stamp = err.strip_prefix("elect: ").unwrap_or_default();
    assert!(
        humantime::parse_rfc3339(stamp.split(' ').next().unwrap()).is_ok(),
        "a timestamp after 'elect: ': {err}"
    );
    let out = busy(&[("ELECT_QUIET", "1")]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stderr.is_empty());
    // -v on the command line wins over ELECT_QUIET.
    let out = elect_run(&store, "env", &["-v"], "echo ran")
        .env("ELECT_WAIT", "0")
        .env("ELECT_QUIET", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(!out.stderr.is_empty());
    // -n wins over ELECT_WAIT.
    let started = std::time::Instant::now();
    let out = elect_run(&store, "env", &["-n"], "echo ran")
        .env("ELECT_WAIT", "forever")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(started.elapsed() < 10 * SECOND);
    // A variable that is not understood is named in the error.
    for (variable, value) in [
        ("ELECT_QUIET", "maybe"),
        ("ELECT_TTL", "25h"),
        ("ELECT_WAIT", "never"),
    ] {
        let out = elect_run(&store, "env", &[], "echo ran")
            .env(variable, value)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(err.contains(&format!("{variable}={value}: ")), "{err}");
    }
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}
