//! The MySQL store beyond the behaviour and fault suites, on MariaDB: an
//! account without CREATE gets the SQL and GRANTs (exit 78), TLS as
//! `ssl-mode` says with client certificates, and the GC-pause story with
//! a fenced write in the same database. Overlap is measured on one
//! monotonic clock (support::ticker).

use crate::support;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::stores::mysql::{MariaDb, PASSWORD, READER_PASSWORD};
use crate::suites::wait_contenders;
use support::ticker::{group_alive, group_members};
use support::{Running, SECOND, assert_outcome, elect, elect_run, find_child};

/// `elect run` over TCP as `user`, its password in ELECT_PASSWORD.
fn tcp_run(db: &MariaDb, user: &str, password: &str, lock: &str, script: &str) -> Command {
    let url = format!(
        "mysql://{user}@127.0.0.1:{}/elect?ssl-mode=DISABLED",
        db.port()
    );
    let mut command = elect_run(&url, lock, &[], script);
    command.env("ELECT_PASSWORD", password);
    command
}

/// The SQL a refusal says an administrator runs once.
fn sql_to_run(said: &str) -> &str {
    said.split("an administrator runs once: ")
        .nth(1)
        .expect("the SQL")
        .trim()
}

#[test]
fn an_account_without_create_exits_78_with_the_sql_and_grants_to_run() {
    let db = MariaDb::start();
    let out = tcp_run(&db, "reader", READER_PASSWORD, "nightly", "echo ran")
        .output()
        .unwrap();
    assert_outcome(
        "reader, no tables",
        &out,
        78,
        "may not create the lease tables",
    );
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    for statement in [
        "CREATE TABLE `elect`.`elect_lease` (",
        "CREATE TABLE `elect`.`elect_waiter` (",
        "CREATE TABLE `elect`.`elect_record` (",
        "GRANT SELECT, INSERT, UPDATE ON `elect`.`elect_lease` TO 'reader'@'%'",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON `elect`.`elect_waiter` TO 'reader'@'%'",
    ] {
        assert!(said.contains(statement), "lacks {statement}: {said}");
    }
    assert_eq!(
        db.sql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'elect'"),
        "0",
        "nothing was created"
    );
    // What it says to run, run as it says, lets the account take locks.
    db.sql(sql_to_run(&said));
    let out = tcp_run(
        &db,
        "reader",
        READER_PASSWORD,
        "nightly",
        "echo ran $ELECT_TOKEN",
    )
    .output()
    .unwrap();
    assert_outcome("reader, with the tables", &out, 0, "");
    let ran = String::from_utf8_lossy(&out.stdout);
    assert!(ran.trim().starts_with("ran "), "{ran}");
}

/// An account that may log in but has no rights on the database (a new
/// service account, before its GRANTs): one line, exit 78, with the SQL
/// an administrator runs once; run as it says, the account takes locks.
#[test]
fn an_account_without_grants_exits_78_with_the_sql_to_run() {
    let db = MariaDb::start();
    db.sql(&format!(
        "CREATE USER 'batch'@'%' IDENTIFIED BY '{PASSWORD}'"
    ));
    let out = tcp_run(&db, "batch", PASSWORD, "nightly", "echo ran")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{said}");
    assert_outcome("batch, no grants", &out, 78, "an administrator runs once: ");
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    for statement in [
        "CREATE TABLE `elect`.`elect_lease` (",
        "GRANT SELECT, INSERT, UPDATE ON `elect`.`elect_lease` TO 'batch'@'%'",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON `elect`.`elect_waiter` TO 'batch'@'%'",
    ] {
        assert!(said.contains(statement), "lacks {statement}: {said}");
    }
    db.sql(sql_to_run(&said));
    let out = tcp_run(&db, "batch", PASSWORD, "nightly", "echo ran")
        .output()
        .unwrap();
    assert_outcome("batch, with the grants", &out, 0, "");
}

#[test]
fn tls_is_checked_as_ssl_mode_says_and_client_certificates_work() {
    let mut db = MariaDb::start();
    let port = db.port();
    let path = |p: &std::path::Path| p.display().to_string();
    let run = |url: String, flags: Vec<String>| {
        let mut command = elect();
        command
            .args(["run", "--store", &url, "--lock", "tls"])
            .args(["--connect-timeout", "2s"])
            .args(&flags)
            .args(["--", "sh", "-c", "echo ran $ELECT_TOKEN"])
            .env("ELECT_PASSWORD", PASSWORD);
        command.output().unwrap()
    };
    let url =
        |user: &str, mode: &str| format!("mysql://{user}@127.0.0.1:{port}/elect?ssl-mode={mode}");
    // A server without TLS: PREFERRED goes on in the clear, REQUIRED does not.
    assert_outcome(
        "PREFERRED, no TLS",
        &run(url("elect", "PREFERRED"), vec![]),
        0,
        "ran",
    );
    assert_outcome(
        "REQUIRED, no TLS",
        &run(url("elect", "REQUIRED"), vec![]),
        69,
        "TLS",
    );
    let certs = support::certs::generate("mariadb-tls");
    db.enable_tls(&certs);
    let ca = vec!["--cacert".to_string(), path(&certs.ca)];
    let client = vec![
        "--cacert".to_string(),
        path(&certs.ca),
        "--cert".into(),
        path(&certs.client_cert),
        "--key".into(),
        path(&certs.client_key),
    ];
    let cases: Vec<(&str, String, Vec<String>, i32, &str)> = vec![
        ("REQUIRED", url("elect", "REQUIRED"), vec![], 0, "ran"),
        (
            "VERIFY_IDENTITY with the CA",
            url("elect", "VERIFY_IDENTITY"),
            ca.clone(),
            0,
            "ran",
        ),
        (
            "VERIFY_CA with the CA",
            url("elect", "VERIFY_CA"),
            ca.clone(),
            0,
            "ran",
        ),
        (
            "VERIFY_IDENTITY, another CA",
            url("elect", "VERIFY_IDENTITY"),
            vec!["--cacert".into(), path(&certs.other_ca)],
            69,
            "certificate",
        ),
        (
            "an account that needs a client certificate, without one",
            url("certified", "VERIFY_IDENTITY"),
            ca.clone(),
            78,
            "Access denied",
        ),
        (
            "with one",
            url("certified", "VERIFY_IDENTITY") + "&prefix=certified",
            client,
            0,
            "ran",
        ),
        (
            "in the clear, where it needs one",
            url("certified", "DISABLED"),
            vec![],
            78,
            "Access denied",
        ),
    ];
    for (what, url, flags, code, says) in cases {
        assert_outcome(what, &run(url, flags), code, says);
    }
}

#[test]
fn a_paused_holders_fenced_write_in_the_same_database_is_refused() {
    let db = MariaDb::start();
    db.sql(
        "CREATE TABLE account (id int PRIMARY KEY, fence bigint NOT NULL, balance int NOT NULL); \
         INSERT INTO account VALUES (1, 0, 0); \
         CREATE TABLE attempt (at DATETIME(6) DEFAULT NOW(6), writer text, token bigint, accepted bool);\n\
         DELIMITER //\n\
         CREATE PROCEDURE write_as(who text, tok bigint) BEGIN \
           UPDATE account SET fence = tok, balance = balance + 1 WHERE id = 1 AND fence <= tok; \
           INSERT INTO attempt (writer, token, accepted) VALUES (who, tok, ROW_COUNT() > 0); \
         END //\n\
         DELIMITER ;",
    );
    // Each write: add one if our token is still the highest seen (one
    // statement, so check and write are one), then log the attempt, both
    // in one call: a client paused between two statements would log an
    // accepted write after the pause, as if it came then.
    let writer = |label: &str| {
        format!(
            r#"echo "pgid $(cut -d' ' -f5 /proc/$$/stat)"; while :; do mariadb --no-defaults --socket='{socket}' -uelect elect -e "CALL write_as('{label}', $ELECT_TOKEN)" || exit 1; sleep 0.02; done"#,
            socket = db.socket().display()
        )
    };
    let attempts = |label: &str, accepted: bool| -> usize {
        db.sql(&format!(
            "SELECT count(*) FROM attempt WHERE writer = '{label}' AND accepted = {accepted}"
        ))
        .parse()
        .unwrap()
    };
    let wait_for = |what: &str, f: &dyn Fn() -> bool| {
        let give_up = Instant::now() + 15 * SECOND;
        while !f() {
            assert!(Instant::now() < give_up, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let url = db.socket_url();
    let ttl = ["--ttl", "3s"];
    let mut command = elect_run(&url, "gc", &ttl, &writer("A"));
    command.process_group(0);
    let mut a = Running::spawn(command);
    let a_group: i32 = a
        .expect_line("pgid", 10 * SECOND)
        .parse()
        .expect("the command's group");
    wait_for("A writes", &|| attempts("A", true) > 0);
    let t: u64 = db.sql("SELECT fence FROM account").parse().unwrap();
    let mut b = Running::spawn(elect_run(&url, "gc", &ttl, &writer("B")));
    wait_contenders(&db, "gc", 2);

    // The pause: elect's group, its guard's and its command's.
    let guard = find_child(a.pid(), support::GUARD);
    for group in [a.pid(), guard, a_group] {
        // SAFETY: killpg(2) of groups our own descendants lead.
        assert_eq!(unsafe { libc::killpg(group, libc::SIGSTOP) }, 0);
    }
    assert!(
        group_alive(a_group),
        "A's command was gone before the pause: A lost its lease first ({:?})",
        a.stderr_seen
    );
    wait_for("B writes", &|| attempts("B", true) > 0);
    let t2: u64 = db.sql("SELECT fence FROM account").parse().unwrap();
    assert!(t2 > t, "B's token {t2} exceeds A's {t}");
    eprintln!("A held with token {t}, was paused; B took over with token {t2}");

    // A's command wakes first: the worst case, a write with the old token.
    let refused_before = attempts("A", false);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::killpg(a_group, libc::SIGCONT) }, 0);
    wait_for("A's late write", &|| attempts("A", false) > refused_before);
    for group in [guard, a.pid()] {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::killpg(group, libc::SIGCONT) }, 0);
    }
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
    assert!(!group_alive(a_group), "{:?}", group_members(a_group));
    assert_eq!(
        db.sql(
            "SELECT count(*) FROM attempt WHERE writer = 'A' AND accepted \
             AND at > (SELECT min(at) FROM attempt WHERE writer = 'B')"
        ),
        "0",
        "no write of A's counted after B's first"
    );
    assert_eq!(
        db.sql("SELECT fence FROM account"),
        t2.to_string(),
        "the resource kept B's token"
    );
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// `CLOCK_MONOTONIC` in ns, appended to `log` with a label: one clock for
/// every process here.
fn stamp(label: &str, log: &std::path::Path) -> String {
    format!(
        r#"perl -MTime::HiRes=clock_gettime,CLOCK_MONOTONIC -e 'printf "%s %d\n", $ARGV[0], clock_gettime(CLOCK_MONOTONIC) * 1e9' {label} >> '{}'"#,
        log.display()
    )
}

/// Without NOTIFY, a waiter sleeps on the holder's doorbell: a release
/// wakes it at once (reading the row every 250 ms would take 125 ms on
/// average), and meanwhile an idle waiter sends a few statements a lease,
/// not four a second.
#[test]
fn waiters_wake_at_a_release_and_cost_the_server_little_meanwhile() {
    let db = MariaDb::start();
    let url = db.socket_url();
    let dir = support::TempDir::new("mariadb-doorbell");
    let log = dir.0.join("stamps");
    let questions = || -> i64 {
        db.sql("SHOW GLOBAL STATUS LIKE 'Questions'")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("the server's count of statements")
    };
    let ttl = ["--ttl", "6s"];
    // Each command stamps its start, holds until told, and stamps its end.
    let job = format!(
        r#"{}; echo "token $ELECT_TOKEN"; read line; {}"#,
        stamp("start", &log),
        stamp("end", &log)
    );
    let mut holder = Running::spawn(elect_run(&url, "bell", &ttl, &job));
    holder.expect_line("token", 10 * SECOND);

    // The holder alone, then with one idle waiter, each over the same window.
    let window = 12 * SECOND;
    let before = questions();
    std::thread::sleep(window);
    let alone = questions() - before - 1;
    let mut waiter = Running::spawn(elect_run(&url, "bell", &ttl, &job));
    wait_contenders(&db, "bell", 2);
    let before = questions();
    std::thread::sleep(window);
    let idle = questions() - before - 1 - alone;
    eprintln!("statements in {window:?}: the holder alone {alone}, one idle waiter {idle} more");

    // Handovers to one waiter each: it becomes the holder, the next waits.
    let rounds = 7;
    for round in 1..=rounds {
        holder.send_line("done");
        assert_eq!(holder.wait_code(10 * SECOND), 0, "{:?}", holder.stderr_seen);
        waiter.expect_line("token", 10 * SECOND);
        holder = waiter;
        waiter = Running::spawn(elect_run(&url, "bell", &ttl, &job));
        if round < rounds {
            wait_contenders(&db, "bell", 2);
        }
    }
    waiter.signal(libc::SIGTERM);
    waiter.wait(10 * SECOND);
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let stamps = std::fs::read_to_string(&log).unwrap();
    let mut stamps: Vec<(String, i128)> = stamps
        .lines()
        .map(|l| {
            let (label, ns) = l.split_once(' ').unwrap();
            (label.to_string(), ns.parse().unwrap())
        })
        .collect();
    stamps.sort_by_key(|(_, ns)| *ns);
    let mut handovers: Vec<f64> = stamps
        .windows(2)
        .filter(|w| w[0].0 == "end" && w[1].0 == "start")
        .map(|w| (w[1].1 - w[0].1) as f64 / 1e6)
        .collect();
    assert_eq!(handovers.len(), rounds, "one handover a round: {stamps:?}");
    handovers.sort_by(f64::total_cmp);
    let median = handovers[rounds / 2];
    eprintln!("handovers, ms: {handovers:.1?}; median {median:.1}");
    assert!(
        median < 150.0,
        "a release must wake the waiter: median handover {median:.1} ms"
    );
    // Reading the row every 250 ms would be 48 statements in 12 s.
    assert!(
        idle < 20,
        "an idle waiter sent {idle} statements in {window:?}"
    );
}

/// The guide's least privilege for a person who only looks: SELECT on
/// the three tables lets status, history and list read a lock and its
/// history; break is refused, 78, naming the GRANTs.
#[test]
fn select_on_the_tables_is_all_a_person_who_looks_needs() {
    let db = MariaDb::start();
    let out = tcp_run(&db, "elect", PASSWORD, "looked-at", "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    db.sql(
        "CREATE USER 'viewer'@'%' IDENTIFIED BY 'viewer-pw'; \
         GRANT SELECT ON `elect`.`elect_lease` TO 'viewer'@'%'; \
         GRANT SELECT ON `elect`.`elect_waiter` TO 'viewer'@'%'; \
         GRANT SELECT ON `elect`.`elect_record` TO 'viewer'@'%'",
    );
    let mut holder = Running::spawn(tcp_run(&db, "elect", PASSWORD, "held", support::HOLD));
    holder.expect_line("token", 10 * SECOND);
    let viewer = format!(
        "mysql://viewer:viewer-pw@127.0.0.1:{}/elect?ssl-mode=DISABLED",
        db.port()
    );
    support::inspect::a_person_who_only_looks(
        &viewer,
        "looked-at",
        "held",
        &[
            "UPDATE command denied",
            "GRANT SELECT, INSERT, UPDATE ON `elect`.`elect_lease` TO 'viewer'@'%'",
        ],
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}
