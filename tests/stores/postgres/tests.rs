//! The PostgreSQL store beyond the behaviour suite (tests/suites/behaviour.rs):
//! tokens across crashes, breaks and restarts of the database, partitions,
//! the GC-pause story with a fenced write in the same database, clock skew,
//! PgBouncer pooling by transaction, and bad input. Overlap is measured on
//! one monotonic clock (support::ticker).
//!
//! First, the test PostgreSQL and PgBouncer themselves
//! ([`super::server`]), before any store test leans on them: the
//! server answers as the superuser over its socket and to `elect` over TCP
//! with a password, `reader` can create nothing, the data outlives a fast
//! and an immediate (crash) restart, and a PgBouncer pooling by transaction
//! passes a query on with the password, and refuses a wrong one.

use crate::stores::postgres::{PgBouncer, Postgres};
use crate::support;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::stores::postgres::{PASSWORD, READER_PASSWORD, listen_url, psql_url};
use support::proxy::{Mode, Proxy};
use support::ticker::{Ticks, group_alive, group_members};
use support::{
    Running, SECOND, TempDir, assert_outcome, elect, elect_run, find_child, ms, now_ns, until,
};

/// `elect run` on PostgreSQL, with the role's password in PGPASSWORD.
fn pg_run(url: &str, lock: &str, extra: &[&str], script: &str) -> Command {
    let mut command = elect_run(url, lock, extra, script);
    command.env("PGPASSWORD", PASSWORD);
    command
}

/// A contender whose command ticks as `label`, elect leading its own group.
fn ticking(url: &str, lock: &str, label: &str, extra: &[&str], ticks: &Ticks) -> Running {
    let mut command = pg_run(url, lock, extra, &ticks.script(label, false));
    command.process_group(0);
    Running::spawn(command)
}

/// The process group of a ticking holder's command.
fn group_of(holder: &mut Running) -> i32 {
    holder.expect_line("pgid", 15 * SECOND).parse().unwrap()
}

/// Wait until `lock` has a holder and `waiters` live waiters, by the tables.
fn wait_contenders(pg: &Postgres, lock: &str, n: usize) {
    let what = format!("{n} contenders for {lock}");
    support::eventually(&what, 10 * SECOND, || {
        let found: usize = pg
            .try_psql(&format!(
                "SELECT (SELECT count(*) FROM elect.lease WHERE name = '{lock}' \
                   AND tenure IS NOT NULL AND expires_at > clock_timestamp()) \
                 + (SELECT count(*) FROM elect.waiter WHERE name = '{lock}' \
                   AND expires_at > clock_timestamp())"
            ))
            .map_or(0, |n| n.parse().unwrap());
        match found == n {
            true => Ok(()),
            false => Err(format!("found {found}")),
        }
    })
}

fn token_of(run: &mut Running) -> u64 {
    run.expect_line("token", 15 * SECOND).parse().unwrap()
}

#[test]
fn the_test_servers_start_and_restart() {
    let started = Instant::now();
    let pg = Postgres::start();
    eprintln!("Postgres::start took {:?}", started.elapsed());
    let started = Instant::now();
    let second = Postgres::start();
    eprintln!("a second Postgres::start took {:?}", started.elapsed());
    assert_ne!(second.port(), pg.port());
    drop(second);
    assert_eq!(pg.psql("select 1"), "1");

    let elect = format!(
        "postgresql://elect:{}@127.0.0.1:{}/elect",
        pg.password(),
        pg.port()
    );
    assert_eq!(psql_url(&elect, "select current_user").unwrap(), "elect");
    let wrong = pg.url_as("elect", "wrong");
    let refused = psql_url(&wrong, "select 1").unwrap_err();
    assert!(
        refused.contains("password authentication failed"),
        "{refused}"
    );

    let reader = pg.url_as("reader", READER_PASSWORD);
    assert_eq!(psql_url(&reader, "select current_user").unwrap(), "reader");
    for sql in ["create schema x", "create table t (x int)"] {
        let denied = psql_url(&reader, sql).unwrap_err();
        assert!(denied.contains("permission denied"), "{sql}: {denied}");
    }

    psql_url(
        &elect,
        "create table kept (x int); insert into kept values (7)",
    )
    .unwrap();
    for mode in ["fast", "immediate"] {
        let started = Instant::now();
        pg.restart(mode);
        eprintln!("restart -m {mode} took {:?}", started.elapsed());
        assert_eq!(pg.psql("select x from kept"), "7", "after a {mode} restart");
        assert_eq!(psql_url(&elect, "select current_user").unwrap(), "elect");
    }

    let started = Instant::now();
    let bouncer = PgBouncer::start(&pg, "transaction");
    eprintln!("PgBouncer::start took {:?}", started.elapsed());
    let through = bouncer.url_as("elect", pg.password());
    assert_eq!(
        psql_url(&through, "select current_user, x from kept").unwrap(),
        "elect|7"
    );
    // PgBouncer says less than PostgreSQL does.
    let refused = psql_url(&bouncer.url_as("elect", "wrong"), "select 1").unwrap_err();
    assert!(refused.contains("SASL authentication failed"), "{refused}");
    assert!(bouncer.url().starts_with("postgres://elect@127.0.0.1:"));
    assert!(pg.url().ends_with(&format!(":{}/elect", pg.port())));
}

/// SIGKILL of a whole holder, `elect` with its guard and its command's
/// group, so that nobody releases; when it was killed.
fn kill_whole_holder(elect: &mut Running, guard: i32, group: i32) -> i128 {
    let killed_at = now_ns();
    // SAFETY: plain kill(2) and killpg(2) of our own descendants.
    unsafe {
        libc::kill(guard, libc::SIGKILL);
        libc::kill(elect.pid(), libc::SIGKILL);
        libc::killpg(group, libc::SIGKILL);
    }
    elect.wait(10 * SECOND);
    killed_at
}

/// Tokens strictly increase, one by one, whatever ends a holder: a clean
/// exit, SIGKILL of its elect (its guard releases), SIGKILL of elect, guard
/// and command at once (the row expires), `elect break`, and a restart of
/// the database (fast, then immediate).
#[test]
fn tokens_rise_across_crashes_breaks_and_database_restarts() {
    let pg = Postgres::start();
    let url = pg.url();
    let ttl = ["--ttl", "1s"];
    let hold =
        r#"echo "token $ELECT_TOKEN"; echo "pgid $(cut -d' ' -f5 /proc/$$/stat)"; read _line"#;
    let mut tokens = Vec::new();

    let mut clean = Running::spawn(pg_run(&url, "t", &ttl, hold));
    tokens.push(token_of(&mut clean));
    clean.send_line("done");
    assert_eq!(clean.wait_code(10 * SECOND), 0);

    // SIGKILL of elect: its guard kills the command and releases.
    let mut killed = Running::spawn(pg_run(&url, "t", &ttl, hold));
    tokens.push(token_of(&mut killed));
    killed.signal(libc::SIGKILL);
    killed.wait(10 * SECOND);

    // SIGKILL of everything: nobody releases; the row expires by the
    // database's clock.
    let mut whole = Running::spawn(pg_run(&url, "t", &ttl, hold));
    tokens.push(token_of(&mut whole));
    let group: i32 = whole.expect_line("pgid", 10 * SECOND).parse().unwrap();
    let guard = find_child(whole.pid(), support::GUARD);
    let killed_at = kill_whole_holder(&mut whole, guard, group);
    let mut next = Running::spawn(pg_run(
        &url,
        "t",
        &ttl,
        r#"echo "start $(date +%s%N)"; echo "token $ELECT_TOKEN""#,
    ));
    let started: i128 = next.expect_line("start", 10 * SECOND).parse().unwrap();
    tokens.push(token_of(&mut next));
    assert_eq!(next.wait_code(10 * SECOND), 0);
    let failover = ms(started - killed_at);
    eprintln!(
        "SIGKILL of the whole holder, TTL 1 s: the next holder started after {failover:.0} ms"
    );
    assert!(
        (900.0..3000.0).contains(&failover),
        "the next holder waited for the row to expire (1 s): {failover:.0} ms"
    );

    // break.
    let mut broken = Running::spawn(pg_run(&url, "t", &["--ttl", "3s"], hold));
    tokens.push(token_of(&mut broken));
    let out = elect()
        .args(["break", "--store", &url, "--lock", "t", "--yes"])
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(broken.wait_code(10 * SECOND), 76);

    for mode in ["fast", "immediate"] {
        pg.restart(mode);
        let out = pg_run(&url, "t", &ttl, "echo $ELECT_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "after a {mode} restart: {out:?}");
        tokens.push(
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        );
    }
    eprintln!("tokens: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[1] == w[0] + 1),
        "each holder's token is one more than the last: {tokens:?}"
    );
}

/// A holder cut off from the database, silently (packets vanish) or
/// loudly (connections reset), stops its command before its row can
/// expire, and the next holder starts after: no tick of the old command
/// after the new one's first, and nothing of its group left.
#[test]
fn a_partitioned_holder_stops_before_its_row_expires() {
    let pg = Postgres::start();
    let dir = TempDir::new("pg-partition");
    for (mode, name) in [(Mode::Blackhole, "blackhole"), (Mode::Reset, "reset")] {
        let ticks = Ticks::new(&dir.join(name));
        std::fs::create_dir_all(dir.join(name)).unwrap();
        let proxy = Proxy::start(&format!("127.0.0.1:{}", pg.port()));
        let via = format!("postgres://elect@127.0.0.1:{}/elect", proxy.port);
        let lock = format!("cut-{name}");
        let mut a = ticking(&via, &lock, "A", &["--ttl", "2s"], &ticks);
        let a_group = group_of(&mut a);
        ticks.first("A", 10 * SECOND);
        let mut b = ticking(&pg.url(), &lock, "B", &["--ttl", "2s"], &ticks);
        wait_contenders(&pg, &lock, 2);
        let cut = support::ticker::monotonic_ns();
        proxy.set(mode);
        ticks.assert_handed_over_after_cut(&format!("{name}, TTL 2s"), cut, a_group);
        assert_eq!(a.wait_code(10 * SECOND), 76, "{name}: {:?}", a.stderr_seen);
        b.signal(libc::SIGTERM);
        b.wait(10 * SECOND);
    }
}

/// The GC-pause story in one database: the lock and the resource it
/// guards. A holds the lock and writes with its token; A is paused (elect,
/// guard and command stopped) past its lease; B takes over with a higher
/// token and writes; A's command wakes first and writes with its old
/// token: the database refuses it in the same statement that checks the
/// token. A's elect, continued, stops its command and exits 76.
#[test]
fn a_paused_holders_fenced_write_in_the_same_database_is_refused() {
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE account (id int PRIMARY KEY, fence bigint NOT NULL, balance int NOT NULL); \
         INSERT INTO account VALUES (1, 0, 0); \
         CREATE TABLE attempt (at timestamptz DEFAULT clock_timestamp(), writer text, token bigint, accepted bool); \
         GRANT ALL ON account, attempt TO elect",
    );
    // Each write: add one if our token is still the highest seen, and log
    // the attempt either way; one statement, so check and write are one.
    let writer = |label: &str| {
        format!(
            r#"echo "pgid $(cut -d' ' -f5 /proc/$$/stat)"; while :; do psql -X -q -At -h '{socket}' -p {port} -U elect elect -c "WITH w AS (UPDATE account SET fence = $ELECT_TOKEN, balance = balance + 1 WHERE id = 1 AND fence <= $ELECT_TOKEN RETURNING 1) INSERT INTO attempt (writer, token, accepted) SELECT '{label}', $ELECT_TOKEN, EXISTS (SELECT 1 FROM w)" || exit 1; sleep 0.02; done"#,
            port = pg.port(),
            socket = pg.socket_dir().display()
        )
    };
    let attempts = |label: &str, accepted: bool| -> usize {
        pg.psql(&format!(
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
    let url = pg.url();
    // Long enough that A keeps its lease on a busy machine until the pause.
    let ttl = ["--ttl", "3s"];
    let mut command = pg_run(&url, "gc", &ttl, &writer("A"));
    command.process_group(0);
    let mut a = Running::spawn(command);
    let a_group = group_of(&mut a);
    wait_for("A writes", &|| attempts("A", true) > 0);
    let t: u64 = pg.psql("SELECT fence FROM account").parse().unwrap();
    let mut b = Running::spawn(pg_run(&url, "gc", &ttl, &writer("B")));
    wait_contenders(&pg, "gc", 2);

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
    let t2: u64 = pg.psql("SELECT fence FROM account").parse().unwrap();
    assert!(t2 > t, "B's token {t2} exceeds A's {t}");
    eprintln!("A held with token {t}, was paused; B took over with token {t2}");

    // A's command wakes first: the worst case, a write with the old token.
    let refused_before = attempts("A", false);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::killpg(a_group, libc::SIGCONT) }, 0);
    wait_for("A's late write", &|| attempts("A", false) > refused_before);
    eprintln!(
        "A's late write with token {t} was refused; the account's fence is {}",
        pg.psql("SELECT fence FROM account")
    );
    for group in [guard, a.pid()] {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::killpg(group, libc::SIGCONT) }, 0);
    }
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
    assert!(!group_alive(a_group), "{:?}", group_members(a_group));
    let late_accepted = pg.psql(
        "SELECT count(*) FROM attempt a WHERE writer = 'A' AND accepted \
         AND at > (SELECT min(at) FROM attempt WHERE writer = 'B')",
    );
    assert_eq!(
        late_accepted, "0",
        "no write of A's counted after B's first"
    );
    assert_eq!(
        pg.psql("SELECT fence FROM account"),
        t2.to_string(),
        "the resource kept B's token"
    );
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// PostgreSQL restarted under a holder (TTL 5 s), fast (sessions ended)
/// and immediate (a crash): either a renewal gets through in time and the
/// holder carries on, or its command is stopped before the row could
/// expire; never two holders at once.
#[test]
fn a_database_restart_never_makes_two_holders() {
    let pg = Postgres::start();
    let dir = TempDir::new("pg-restart");
    for mode in ["fast", "immediate"] {
        std::fs::create_dir_all(dir.join(mode)).unwrap();
        let ticks = Ticks::new(&dir.join(mode));
        let lock = format!("restart-{mode}");
        let mut a = ticking(&pg.url(), &lock, "A", &["--ttl", "5s"], &ticks);
        let a_group = group_of(&mut a);
        ticks.first("A", 10 * SECOND);
        let b = ticking(&pg.url(), &lock, "B", &["--ttl", "5s"], &ticks);
        wait_contenders(&pg, &lock, 2);
        pg.restart(mode);
        // Past A's whole lease: if A lived on, it renewed in time.
        std::thread::sleep(Duration::from_secs(6));
        let a_lives = group_alive(a_group);
        let b_ticked = ticks.last("B").is_some();
        eprintln!(
            "{mode} restart: A {} and B {}",
            if a_lives { "holds on" } else { "was stopped" },
            if b_ticked { "took over" } else { "waits" }
        );
        if a_lives {
            assert!(!b_ticked, "{mode}: B ran while A held");
            assert_eq!(a.try_wait_code(), None);
        } else {
            let overlap = ticks.overlap_ms("A", a_group, "B");
            assert!(overlap < 0.0, "{mode}: A ran {overlap:.1} ms beside B");
        }
        for mut contender in [a, b] {
            contender.signal(libc::SIGTERM);
            contender.wait(10 * SECOND);
        }
    }
}

/// Through PgBouncer pooling by transaction: LISTEN cannot work there, so
/// waiters find that out and poll; exclusion and tokens hold.
#[test]
fn through_pgbouncer_in_transaction_mode_waiters_poll_and_tokens_hold() {
    let pg = Postgres::start();
    let bouncer = PgBouncer::start(&pg, "transaction");
    let dir = TempDir::new("pg-bouncer");
    let ticks = Ticks::new(&dir.0);
    let url = bouncer.url();
    let mut a = ticking(&url, "pooled", "A", &[], &ticks);
    let t1: u64 = a.expect_line("token", 10 * SECOND).parse().unwrap();
    let a_group = group_of(&mut a);
    ticks.first("A", 10 * SECOND);
    let mut b = ticking(&url, "pooled", "B", &["-v"], &ticks);
    b.expect_stderr("polling every", 10 * SECOND);
    wait_contenders(&pg, "pooled", 2);
    // SAFETY: killpg(2) of a group our own child leads.
    assert_eq!(unsafe { libc::killpg(a_group, libc::SIGTERM) }, 0);
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!("through PgBouncer: A's last tick {overlap:.1} ms after B's first");
    assert!(overlap < 0.0, "A ran {overlap:.1} ms beside B");
    let t2: u64 = b.expect_line("token", 10 * SECOND).parse().unwrap();
    assert_eq!(t2, t1 + 1, "the next fence");
    a.wait(10 * SECOND);
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// Bad input: one line that names the problem, the documented exit code,
/// the command never run, and nothing left in the database.
#[test]
fn bad_input_gets_one_line_the_right_code_and_leaves_nothing() {
    let pg = Postgres::start();
    pg.psql(
        "CREATE SCHEMA other AUTHORIZATION elect; CREATE TABLE other.lease (id int); \
         ALTER TABLE other.lease OWNER TO elect",
    );
    let port = pg.port();
    let base = format!("postgres://elect@127.0.0.1:{port}/elect");
    let nothing_listens = support::tools::free_port();
    let cases: Vec<(&str, String, &str, i32, &str)> = vec![
        (
            "a bad port",
            format!("postgres://elect@127.0.0.1:{port}x/elect"),
            PASSWORD,
            78,
            "is not a port",
        ),
        (
            "an unknown option",
            format!("{base}?bogus=1"),
            PASSWORD,
            78,
            "unknown option 'bogus'",
        ),
        (
            "a wrong password",
            base.clone(),
            "wrong",
            78,
            "password authentication failed",
        ),
        (
            "a database that does not exist",
            format!("postgres://elect@127.0.0.1:{port}/nosuchdb"),
            PASSWORD,
            78,
            "does not exist",
        ),
        (
            "TLS required, the server has none",
            format!("{base}?sslmode=require"),
            PASSWORD,
            69,
            "TLS",
        ),
        (
            "a role that may not create the tables",
            format!("postgres://reader@127.0.0.1:{port}/elect"),
            READER_PASSWORD,
            78,
            "an administrator runs once: CREATE SCHEMA \"elect\"; CREATE TABLE",
        ),
        (
            "a foreign table in the way",
            format!("{base}?schema=other"),
            PASSWORD,
            78,
            "table other.lease is not elect's",
        ),
        (
            "nothing listens",
            format!("postgres://elect@127.0.0.1:{nothing_listens}/elect"),
            PASSWORD,
            69,
            "cannot reach",
        ),
    ];
    for (what, url, password, code, says) in cases {
        let out = elect_run(&url, "bad", &["--connect-timeout", "1s"], "echo ran")
            .env("PGPASSWORD", password)
            .output()
            .unwrap();
        assert_outcome(what, &out, code, says);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains(PASSWORD), "{what}: the password shows");
    }
    assert_eq!(
        pg.psql("SELECT count(*) FROM pg_namespace WHERE nspname = 'elect'"),
        "0",
        "nothing was created"
    );
    assert_eq!(
        pg.psql("SELECT string_agg(relname, ',') FROM pg_class c JOIN pg_namespace n ON n.oid = relnamespace WHERE nspname = 'other' AND relkind = 'r'"),
        "lease",
        "the foreign table was left alone, and nothing added beside it"
    );
}

/// Clock skew between the hosts and the database changes nothing: with
/// the database's wall clock a day ahead of elect's, or a day behind, a
/// holder keeps its lock for as long as it lives, a waiter neither takes it
/// early nor waits for it long, and tokens go on. Only the database's clock
/// judges expiry, and elect times its lease on its monotonic clock.
#[test]
fn wall_clock_skew_between_hosts_and_database_changes_nothing() {
    for offset in ["+1d", "-1d"] {
        let pg = Postgres::start_skewed(offset);
        let skew: f64 = pg
            .psql("SELECT extract(epoch FROM now())")
            .parse::<f64>()
            .unwrap()
            - std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
        assert!(
            skew.abs() > 80_000.0,
            "the database's clock is {offset} off: {skew:.0} s"
        );
        let dir = TempDir::new(&format!("pg-skew{offset}"));
        let ticks = Ticks::new(&dir.0);
        let ttl = ["--ttl", "2s"];
        let mut a = ticking(&pg.url(), "skew", "A", &ttl, &ticks);
        let t1: u64 = a.expect_line("token", 10 * SECOND).parse().unwrap();
        let a_group = group_of(&mut a);
        ticks.first("A", 10 * SECOND);
        let mut b = ticking(&pg.url(), "skew", "B", &ttl, &ticks);
        wait_contenders(&pg, "skew", 2);
        // Two of A's TTLs: a lease timed by elect's wall clock would have
        // been given up or taken over by now.
        std::thread::sleep(Duration::from_secs(4));
        assert!(
            ticks.last("B").is_none(),
            "{offset}: B took the lock from a live holder"
        );
        assert_eq!(a.try_wait_code(), None, "{offset}: A holds on");
        let stopped = support::ticker::monotonic_ns();
        // SAFETY: killpg(2) of a group our own child leads.
        assert_eq!(unsafe { libc::killpg(a_group, libc::SIGTERM) }, 0);
        let t2: u64 = b.expect_line("token", 10 * SECOND).parse().unwrap();
        let overlap = ticks.overlap_ms("A", a_group, "B");
        let after = (ticks.first("B", SECOND) - stopped) as f64 / 1e6;
        eprintln!(
            "database clock {offset}: B started {after:.0} ms after A's command was stopped; \
             overlap {overlap:.1} ms"
        );
        assert!(overlap < 0.0, "{offset}: A ran {overlap:.1} ms beside B");
        assert!(
            after < 1000.0,
            "{offset}: B waited {after:.0} ms for a released lock"
        );
        assert_eq!(t2, t1 + 1, "{offset}");
        a.wait(10 * SECOND);
        b.signal(libc::SIGTERM);
        b.wait(10 * SECOND);
    }
}

/// What the rule that keeps a stepped clock harmless costs: a contender
/// that starts after its holder died (elect, guard and command SIGKILLed
/// together, so nobody let go) takes the lock only after it saw the row
/// unchanged for a whole TTL on its own clock, however long ago the row
/// expired by the database's.
#[test]
fn a_contender_started_after_its_holder_died_waits_one_ttl() {
    let pg = Postgres::start();
    // Over the socket: no password to hash. In a debug build, hashing one
    // (SCRAM) holds elect's only thread for a while on a busy machine.
    let url = pg.socket_url();
    let ttl = Duration::from_secs(2);
    let hold =
        r#"echo "token $ELECT_TOKEN"; echo "pgid $(cut -d' ' -f5 /proc/$$/stat)"; read _line"#;
    let mut waits = Vec::new();
    for delay in [Duration::ZERO, ttl + Duration::from_millis(500)] {
        let mut whole = Running::spawn(pg_run(&url, "died", &["--ttl", "2s"], hold));
        let t1 = token_of(&mut whole);
        let group: i32 = whole.expect_line("pgid", 10 * SECOND).parse().unwrap();
        let guard = find_child(whole.pid(), support::GUARD);
        // A renewal or two, so the row is a holder's like any other.
        std::thread::sleep(Duration::from_millis(1500));
        let killed_at = kill_whole_holder(&mut whole, guard, group);
        std::thread::sleep(delay);
        let spawned_at = now_ns();
        let mut next = Running::spawn(pg_run(
            &url,
            "died",
            &["--ttl", "2s"],
            r#"echo "start $(date +%s%N)"; echo "token $ELECT_TOKEN""#,
        ));
        let started: i128 = next.expect_line("start", 10 * SECOND).parse().unwrap();
        let t2 = token_of(&mut next);
        assert_eq!(next.wait_code(10 * SECOND), 0);
        let failover = ms(started - killed_at);
        let waited = ms(started - spawned_at);
        eprintln!(
            "SIGKILL of the whole holder, TTL 2 s, a contender started {} ms after: \
             it started its command {failover:.0} ms after the kill, {waited:.0} ms after its own start",
            delay.as_millis()
        );
        assert_eq!(t2, t1 + 1);
        waits.push(waited);
    }
    // A waiter queued before the kill heard of every renewal: it takes the
    // lock within a TTL of the last one, as the database's clock alone
    // would let it.
    let mut whole = Running::spawn(pg_run(&url, "died", &["--ttl", "2s"], hold));
    let t1 = token_of(&mut whole);
    let group: i32 = whole.expect_line("pgid", 10 * SECOND).parse().unwrap();
    let guard = find_child(whole.pid(), support::GUARD);
    let mut waiter = Running::spawn(pg_run(
        &url,
        "died",
        &["--ttl", "2s"],
        r#"echo "start $(date +%s%N)"; echo "token $ELECT_TOKEN""#,
    ));
    wait_contenders(&pg, "died", 2);
    std::thread::sleep(Duration::from_millis(1500));
    let killed_at = kill_whole_holder(&mut whole, guard, group);
    let started: i128 = waiter.expect_line("start", 10 * SECOND).parse().unwrap();
    assert_eq!(token_of(&mut waiter), t1 + 1);
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let failover = ms(started - killed_at);
    eprintln!(
        "SIGKILL of the whole holder, TTL 2 s, a waiter queued before: \
         it started its command {failover:.0} ms after the kill"
    );
    let ttl_ms = ttl.as_secs_f64() * 1000.0;
    assert!(
        failover < ttl_ms + 500.0,
        "a waiter that heard every renewal waited {failover:.0} ms"
    );
    for waited in waits {
        assert!(
            waited >= ttl_ms,
            "a contender took a row it had not seen unchanged for a TTL: {waited:.0} ms"
        );
        assert!(
            waited < ttl_ms + 1500.0,
            "a contender waited {waited:.0} ms for a dead holder's row"
        );
    }
}

/// What an idle holder costs the database: one renewal every TTL/3, and
/// nothing else (a waiter that can LISTEN adds nothing while idle).
#[test]
fn an_idle_holder_and_a_listening_waiter_cost_one_statement_a_third_of_a_ttl() {
    let pg = Postgres::start();
    let url = pg.url();
    let hold = r#"echo "token $ELECT_TOKEN"; read _line"#;
    let mut a = Running::spawn(pg_run(&url, "idle", &["--ttl", "3s"], hold));
    a.expect_line("token", 10 * SECOND);
    let mut b = Running::spawn(pg_run(&url, "idle", &["--ttl", "3s"], "echo ran"));
    wait_contenders(&pg, "idle", 2);
    // Every statement of an idle elect updates a row: a renewal its lease
    // row or its waiter row. The server counts row updates per table.
    let updates = || -> i64 {
        pg.psql("SELECT sum(n_tup_upd) FROM pg_stat_user_tables WHERE schemaname = 'elect'")
            .parse()
            .unwrap()
    };
    std::thread::sleep(Duration::from_secs(2));
    let before = updates();
    let window = Duration::from_secs(9);
    std::thread::sleep(window);
    let seen = updates() - before;
    let per_second = seen as f64 / window.as_secs_f64();
    eprintln!(
        "an idle holder and an idle waiter, TTL 3 s: {seen} statements in {window:?} \
         ({per_second:.2}/s, {:.2}/s each)",
        per_second / 2.0
    );
    // One renewal each per second (9 or 10 in the window), and the
    // server's counts lag up to a second; a waiter that polled would add
    // four a second.
    assert!((14..=24).contains(&seen), "{seen} statements in {window:?}");
    a.send_line("done");
    assert_eq!(a.wait_code(10 * SECOND), 0);
    b.expect_line("ran", 10 * SECOND);
    assert_eq!(b.wait_code(10 * SECOND), 0);
}

/// An elect's first listener checks that notifications reach it with a
/// probe on a channel of its own: on the schema's, every elect listening
/// there would wake for each elect that starts, and a thousand holders
/// starting on one server would wake each of them a thousand times.
#[test]
fn the_listen_probe_wakes_no_other_listener() {
    let pg = Postgres::start();
    let url = pg.url();
    let listener = {
        let url = pg.url_as("elect", PASSWORD);
        std::thread::spawn(move || listen_url(&url, "elect", 5))
    };
    let sleeping = "SELECT count(*) FROM pg_stat_activity \
                    WHERE query = 'SELECT pg_sleep(5)' AND state = 'active'";
    until("psql listens on the schema's channel", 10 * SECOND, || {
        pg.psql(sleeping) == "1"
    });
    pg.psql("ALTER ROLE elect SET log_statement = 'all'");
    let mut holder = Running::spawn(pg_run(&url, "probe", &[], "echo held; read _line"));
    holder.expect_line("held", 10 * SECOND);
    // The probe's statement is done once the same connection has sent
    // the next (the server logs each statement as it starts).
    support::eventually("the holder's probe was answered", 5 * SECOND, || {
        let log = pg.log_text();
        let mut lines = log.lines().filter(|l| l.contains("LOG:  execute"));
        let probe = lines
            .by_ref()
            .find(|l| l.contains("SELECT pg_notify("))
            .ok_or("no probe in the log yet")?;
        let backend = probe.split_once("] ").map(|(p, _)| p).unwrap_or(probe);
        let backend = backend.rsplit_once(" [").map_or(backend, |(_, p)| p);
        match lines.any(|l| l.contains(&format!("[{backend}] "))) {
            true => Ok(()),
            false => Err(format!("nothing after the probe on backend {backend}")),
        }
    });
    assert_eq!(pg.psql(sleeping), "1", "psql stopped listening too soon");
    let printed = listener.join().unwrap().unwrap();
    assert!(printed.ends_with("slept"), "psql printed: {printed}");
    assert!(
        !printed.contains("notification"),
        "a listener on the schema's channel heard another elect's probe: {printed}"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// Waiters take the row in the order they came: a release names the oldest
/// live waiter before it wakes them, and the others let it take the row
/// first, so that a release costs one take, not a try by every waiter.
/// Each holds until told, so a take out of order leaves the one due next
/// waiting, and the test fails. The last comes just before the release,
/// often before it listens: it finds the row free at a look of its own,
/// and must leave it to the oldest all the same.
#[test]
fn waiters_take_the_row_in_the_order_they_came() {
    let pg = Postgres::start();
    let url = pg.url();
    let hold = "echo held; read _line";
    let mut holder = Running::spawn(pg_run(&url, "order", &[], hold));
    holder.expect_line("held", 10 * SECOND);
    let mut waiters = Vec::new();
    for n in 1..=4 {
        waiters.push(Running::spawn(pg_run(&url, "order", &[], hold)));
        wait_contenders(&pg, "order", n + 1);
    }
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    for waiter in &mut waiters {
        waiter.expect_line("held", 10 * SECOND);
        waiter.send_line("done");
        assert_eq!(waiter.wait_code(10 * SECOND), 0);
    }
}

/// Elects started at once on a database none has used yet each create the
/// lease tables as far as they are missing: one of them creates them, and
/// none of the others fails on the objects the first one made meanwhile.
#[test]
fn elects_started_at_once_on_a_fresh_database_all_take_their_locks() {
    let pg = Postgres::start();
    let url = pg.url();
    let elects: Vec<Running> = (0..12)
        .map(|i| Running::spawn(pg_run(&url, &format!("fresh-{i}"), &[], "echo ran")))
        .collect();
    for (i, mut e) in elects.into_iter().enumerate() {
        let code = e.wait_code(30 * SECOND);
        assert_eq!(
            code,
            0,
            "elect {i} exited with {code}: {}",
            e.drain_stderr()
        );
    }
}

/// `elect break --force` ends the holder's row at once and notifies; the
/// holder's elect, listening, looks at its row and signals its command
/// within milliseconds. Behind a pooler, where nothing can listen, the
/// next renewal (within TTL/3) finds the row gone and the command is
/// signalled right then.
#[test]
fn break_force_reaches_the_holder_by_notification_or_at_its_next_renewal() {
    let pg = Postgres::start();
    let bouncer = PgBouncer::start(&pg, "transaction");
    // The trap only echoes (a builtin): a forced break leaves the command
    // 100 ms before SIGKILL, which a fork for a timestamp could outlast on a
    // busy machine. The line's arrival is the time of the SIGTERM, or later.
    let script =
        r#"trap 'echo term; exit 0' TERM; echo "token $ELECT_TOKEN"; while :; do sleep 0.01; done"#;
    let wall_ns = |text: &str| -> i128 {
        humantime::parse_rfc3339(text)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128
    };
    for (how, url, within_ms) in [
        ("listening", pg.url(), 300),
        ("through PgBouncer", bouncer.url(), 1300),
    ] {
        for round in 0..3 {
            let lock = format!("force-{}-{round}", how.len());
            let mut holder = Running::spawn(pg_run(&url, &lock, &["--ttl", "3s"], script));
            holder.expect_line("token", 10 * SECOND);
            // Somewhere in the renewal cycle, and past the holder's start.
            std::thread::sleep(Duration::from_millis(300 + 300 * round));
            let broke_at = now_ns();
            let out = elect()
                .args([
                    "break", "--store", &url, "--lock", &lock, "--force", "--yes",
                ])
                .env("PGPASSWORD", PASSWORD)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            holder.expect_line("term", 10 * SECOND);
            let termed_at = now_ns();
            assert_eq!(holder.wait_code(10 * SECOND), 76);
            let said = holder
                .stderr_seen
                .iter()
                .find(|line| line.contains("lost the lease"))
                .unwrap_or_else(|| panic!("{:?}", holder.stderr_seen))
                .clone();
            assert!(said.contains("was ended or taken over"), "{said}");
            // "elect: TIME lost the lease…": when elect learned it.
            let noticed_at = wall_ns(said.split_whitespace().nth(1).unwrap());
            eprintln!(
                "break --force, {how}: the holder learned it {:.0} ms after the break began, \
                 its command's SIGTERM was seen {:.1} ms after that",
                ms(noticed_at - broke_at),
                ms(termed_at - noticed_at)
            );
            assert!(
                termed_at - broke_at < within_ms * 1_000_000,
                "{how}: SIGTERM {:.0} ms after the break",
                ms(termed_at - broke_at)
            );
            // The line's arrival, a little after the signal itself.
            assert!(termed_at - noticed_at < 200_000_000);
        }
    }
}

/// TLS as libpq's `sslmode` says: `verify-full` checks the chain and the
/// host name, `verify-ca` the chain only, a wrong CA is refused before a
/// password is sent, and a client certificate is offered when given.
#[test]
fn tls_is_checked_as_sslmode_says_and_client_certificates_work() {
    let pg = Postgres::start();
    let certs = support::certs::generate("pg-tls");
    pg.enable_tls(&certs);
    let port = pg.port();
    let path = |p: &std::path::Path| p.display().to_string();
    let run = |url: String, flags: Vec<String>| {
        let mut command = elect();
        command
            .args([
                "run",
                "--store",
                &url,
                "--lock",
                "tls",
                "--connect-timeout",
                "2s",
            ])
            .args(&flags)
            .args(["--", "sh", "-c", "echo ran $ELECT_TOKEN"])
            .env("PGPASSWORD", PASSWORD);
        command.output().unwrap()
    };
    let ca = vec!["--cacert".to_string(), path(&certs.ca)];
    let full = |host: &str, user: &str| {
        format!("postgres://{user}@{host}:{port}/elect?sslmode=verify-full")
    };
    let client = vec![
        "--cacert".to_string(),
        path(&certs.ca),
        "--cert".into(),
        path(&certs.client_cert),
        "--key".into(),
        path(&certs.client_key),
    ];
    let cases: Vec<(&str, String, Vec<String>, i32, &str)> = vec![
        (
            "verify-full with the CA",
            full("127.0.0.1", "elect"),
            ca.clone(),
            0,
            "ran",
        ),
        (
            "verify-full, another CA",
            full("127.0.0.1", "elect"),
            vec!["--cacert".into(), path(&certs.other_ca)],
            69,
            "certificate",
        ),
        (
            "verify-full, a name the certificate lacks",
            full("localhost", "elect"),
            ca.clone(),
            69,
            "certificate",
        ),
        (
            "verify-ca, the same name",
            format!("postgres://elect@localhost:{port}/elect?sslmode=verify-ca"),
            ca.clone(),
            0,
            "ran",
        ),
        (
            "a role that needs a client certificate, without one",
            full("127.0.0.1", "certified"),
            ca.clone(),
            78,
            "requires a valid client certificate",
        ),
        (
            "with one",
            full("127.0.0.1", "certified") + "&schema=certified",
            client,
            0,
            "ran",
        ),
    ];
    for (what, url, flags, code, says) in cases {
        assert_outcome(what, &run(url, flags), code, says);
    }
}

/// The password reaches the database and nothing else: not the command's
/// environment, not the guard's command line, not elect's messages (even
/// with -v), not ELECT_STORE.
#[test]
fn the_password_stays_out_of_the_command_the_guard_and_every_message() {
    let pg = Postgres::start();
    let script = r#"echo "store $ELECT_STORE"; env; tr '\0' ' ' < /proc/$PPID/cmdline; echo"#;
    for (how, url, env) in [
        ("PGPASSWORD", pg.url(), vec![("PGPASSWORD", PASSWORD)]),
        (
            "ELECT_PASSWORD",
            pg.url(),
            vec![("ELECT_PASSWORD", PASSWORD)],
        ),
        (
            "the URL",
            format!("postgres://elect:{PASSWORD}@127.0.0.1:{}/elect", pg.port()),
            vec![],
        ),
    ] {
        let mut command = elect_run(&url, "secret", &["-v"], script);
        command.envs(env);
        let out = command.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{how}: {said}");
        assert!(
            said.contains("lease-guard"),
            "{how}: the guard's command line: {said}"
        );
        assert!(
            said.contains(&format!(
                "store postgres://elect@127.0.0.1:{}/elect",
                pg.port()
            )),
            "{how}: {said}"
        );
        assert!(
            !said.contains(PASSWORD),
            "{how}: the password shows: {said}"
        );
    }
}

/// The duplicate-invoice exercise, end to end: a billing script bills
/// customers in order and commits a checkpoint after each batch. A is
/// paused (its elect, guard and command all stopped) past its lease; B
/// takes over and resumes from A's last checkpoint; A wakes, its late batch
/// meets the unique constraint, and its checkpoint is refused. Every
/// customer is billed exactly once.
#[test]
fn the_duplicate_invoice_exercise_bills_every_customer_exactly_once() {
    const CUSTOMERS: u32 = 300;
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE invoice (customer int PRIMARY KEY, token bigint NOT NULL, \
           at timestamptz NOT NULL DEFAULT clock_timestamp()); \
         GRANT ALL ON invoice TO elect",
    );
    // The README's worked example, with a short pause per batch so that
    // the run is long enough to be paused in.
    let bill = format!(
        r#"last=${{ELECT_CHECKPOINT:-0}}; echo "resume $last $ELECT_TOKEN"
while [ "$last" -lt {CUSTOMERS} ]; do
  next=$((last + 10))
  added=$(psql -X -qAt -h '{socket}' -p {port} -U elect elect -c "WITH i AS (INSERT INTO invoice (customer, token) SELECT c, $ELECT_TOKEN FROM generate_series($((last + 1)), $next) c ON CONFLICT (customer) DO NOTHING RETURNING 1) SELECT count(*) FROM i") || exit 1
  echo "billed $((last + 1))-$next: $added new"
  "$ELECT_BIN" checkpoint put "$next" || {{ echo "refused $next"; exit 1; }}
  last=$next
  sleep 0.05
done
echo "done $last""#,
        socket = pg.socket_dir().display(),
        port = pg.port(),
    );
    // The password in a file, whose name the command inherits: its own
    // `elect checkpoint` needs it too (a password itself never reaches it).
    let dir = TempDir::new("pg-invoices");
    let password_file = dir.join("password");
    std::fs::write(&password_file, PASSWORD).unwrap();
    let contender = |label: &str| {
        let mut command = elect_run(&pg.url(), "billing", &["--ttl", "2s"], &bill);
        command
            .env("ELECT_PASSWORD_FILE", &password_file)
            .env("ELECT_BIN", env!("CARGO_BIN_EXE_elect"))
            .env("LABEL", label)
            .process_group(0);
        Running::spawn(command)
    };
    let log = |who: &str, line: &str| eprintln!("{who}: {line}");
    let mut a = contender("A");
    let resume_a = a.expect_line("resume", 10 * SECOND);
    log("A", &format!("resume {resume_a}"));
    let a_token: u64 = resume_a.split_whitespace().nth(1).unwrap().parse().unwrap();
    // A few of A's batches.
    for _ in 0..5 {
        log("A", &a.expect_line("billed", 10 * SECOND));
    }
    let mut b = contender("B");
    wait_contenders(&pg, "billing", 2);

    // The pause: A's elect, its guard and its command, all stopped.
    let guard = find_child(a.pid(), support::GUARD);
    let command = support::process::pgid(find_child(guard, "sh")).unwrap();
    for group in [a.pid(), guard, command] {
        // SAFETY: killpg(2) of groups our own descendants lead.
        assert_eq!(unsafe { libc::killpg(group, libc::SIGSTOP) }, 0);
    }
    let stored: u32 = pg
        .psql("SELECT checkpoint FROM elect.lease WHERE name = 'billing'")
        .parse()
        .unwrap();
    log("A", &format!("paused; its last checkpoint is {stored}"));
    let resume_b = b.expect_line("resume", 15 * SECOND);
    log("B", &format!("resume {resume_b}"));
    let (from, b_token) = resume_b.split_once(' ').unwrap();
    assert_eq!(
        from.parse::<u32>().unwrap(),
        stored,
        "B resumes from A's last checkpoint"
    );
    assert!(b_token.parse::<u64>().unwrap() > a_token);
    log("B", &b.expect_line("billed", 10 * SECOND));

    // A wakes: its command first, as a resumed VM may run it first.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::killpg(command, libc::SIGCONT) }, 0);
    let mut refused = false;
    while let Some(line) = a.next_line(10 * SECOND) {
        log("A", &line);
        if line.starts_with("refused") {
            refused = true;
            break;
        }
    }
    assert!(refused, "A's late checkpoint was refused");
    for group in [guard, a.pid()] {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::killpg(group, libc::SIGCONT) }, 0);
    }
    let a_code = a.wait_code(10 * SECOND);
    log(
        "A",
        &format!("exit {a_code}; {}", a.stderr_seen.join(" | ")),
    );
    assert!(matches!(a_code, 1 | 76), "A stops: {a_code}");
    loop {
        let line = b.expect_line("", 30 * SECOND);
        log("B", &line);
        if line.starts_with("done") {
            break;
        }
    }
    assert_eq!(b.wait_code(10 * SECOND), 0);
    let billed = pg.psql(&format!(
        "SELECT count(*), count(DISTINCT customer), min(customer), max(customer), \
           count(*) FILTER (WHERE token = {a_token}) FROM invoice"
    ));
    log(
        "invoices",
        &format!("rows|customers|first|last|by A = {billed}"),
    );
    let fields: Vec<u32> = billed.split('|').map(|f| f.parse().unwrap()).collect();
    assert_eq!(
        &fields[..4],
        &[CUSTOMERS, CUSTOMERS, 1, CUSTOMERS],
        "each customer once"
    );
}

/// A read-only server (a hot standby, the schema replicated from the
/// primary) is named as such in one line, exit 78, at once: by `elect run`
/// with `-n`, with `--wait` and with neither (else it would look like a
/// lock held for ever), and by every command where it writes (`checkpoint
/// put`, `break`, `break --force`); reads (`status`, `check`) answer as on
/// the primary.
#[test]
fn a_read_only_standby_is_named_at_once() {
    let primary = Postgres::start();
    let hold = r#"echo "token $ELECT_TOKEN"; echo "key $ELECT_KEY"; read _line"#;
    let mut holder = Running::spawn(pg_run(&primary.url(), "held", &["--ttl", "3s"], hold));
    let token = token_of(&mut holder);
    let key = holder.expect_line("key", 10 * SECOND);
    let standby = primary.start_standby();
    standby.catch_up(&primary);
    assert_eq!(
        standby.psql("SELECT count(*) FROM elect.lease WHERE name = 'held'"),
        "1",
        "the standby has the primary's rows"
    );
    let url = standby.url();
    // Exit code (None: still running after 10 s, then killed), time, stderr.
    let timed = |what: &str, mut command: Command| {
        command.env("PGPASSWORD", PASSWORD);
        let started = Instant::now();
        let mut running = Running::spawn(command);
        let code = loop {
            match running.try_wait_code() {
                Some(code) => break Some(code),
                None if started.elapsed() > 10 * SECOND => break None,
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let took = started.elapsed();
        std::thread::sleep(Duration::from_millis(20));
        let said = running.drain_stderr();
        eprintln!("{what}: exit {code:?} after {took:?}: {said}");
        (code, took, said)
    };
    let runs: Vec<_> = [
        ("run -n", &["-n"][..]),
        ("run --wait 5s", &["--wait", "5s"][..]),
        ("run", &[][..]),
    ]
    .into_iter()
    .map(|(what, extra)| {
        (
            what,
            timed(what, elect_run(&url, "free", extra, "echo ran")),
        )
    })
    .collect();
    for (what, (code, took, said)) in runs {
        assert_eq!(code, Some(78), "{what}: {said}");
        assert!(
            said.contains("read-only server, a hot standby"),
            "{what}: {said}"
        );
        assert_eq!(said.lines().count(), 1, "{what}: {said}");
        // At once: a connection or two (0.3 s when the machine is idle).
        assert!(took < Duration::from_millis(2500), "{what}: {took:?}");
    }
    let inspect = |args: &[&str]| {
        let mut c = elect();
        c.args(args).args(["--store", &url, "--lock", "held"]);
        c
    };
    let (code, _, said) = timed("status", inspect(&["status"]));
    assert_eq!(code, Some(0), "status reads the replicated holder: {said}");
    let (code, _, said) = timed(
        "check",
        inspect(&["check", "--holder-key", &key, "--token", &token.to_string()]),
    );
    assert_eq!(code, Some(0), "check reads: {said}");
    let mut put = elect();
    put.args(["checkpoint", "put", "7"])
        .env("ELECT_STORE", &url)
        .env("ELECT_LOCK", "held")
        .env("ELECT_KEY", &key)
        .env("ELECT_TOKEN", token.to_string());
    for (what, command) in [
        ("checkpoint put", put),
        ("break", inspect(&["break", "--yes"])),
        ("break --force", inspect(&["break", "--force", "--yes"])),
    ] {
        let (code, took, said) = timed(what, command);
        assert_eq!(code, Some(78), "{what}: {said}");
        // break says first whom it asks to let go.
        let error = said.lines().last().unwrap_or_default();
        assert!(
            error.contains("read-only server, a hot standby"),
            "{what}: {said}"
        );
        assert_eq!(
            said.lines().filter(|l| l.contains("read-only")).count(),
            1,
            "{what}: {said}"
        );
        // At once: a connection or two (0.3 s when the machine is idle).
        assert!(took < Duration::from_millis(2500), "{what}: {took:?}");
    }
    assert_eq!(
        holder.try_wait_code(),
        None,
        "the holder on the primary holds on"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// A lease table of an earlier elect (without `renewals`) is brought up to
/// date by its owner's first `elect run`, its rows and fences kept; a role
/// that does not own it is told, exit 78, the one statement to run, and
/// runs once that is done.
#[test]
fn an_earlier_lease_table_gets_its_renewals_column() {
    let earlier = "CREATE TABLE elect.lease (name text PRIMARY KEY, tenure text, \
         fence bigint NOT NULL, expires_at timestamptz NOT NULL, renewed_at timestamptz, \
         acquired_at timestamptz, holder jsonb, checkpoint text, checkpoint_fence bigint, \
         checkpoint_at timestamptz, shards integer); \
         CREATE TABLE elect.waiter (name text NOT NULL, tenure text NOT NULL, \
         since timestamptz NOT NULL, expires_at timestamptz NOT NULL, holder jsonb, \
         PRIMARY KEY (name, tenure)); \
         INSERT INTO elect.lease (name, fence, expires_at) VALUES ('old', 5, '-infinity');";
    let columns = |pg: &Postgres| {
        pg.psql(
            "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute \
             WHERE attrelid = 'elect.lease'::regclass AND attnum > 0 AND NOT attisdropped",
        )
    };
    let token = |pg: &Postgres| {
        let out = pg_run(&pg.url(), "old", &[], "echo $ELECT_TOKEN")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    };

    // The owner's elect adds the column.
    let pg = Postgres::start();
    psql_url(
        &pg.url_as("elect", PASSWORD),
        &format!("CREATE SCHEMA elect; {earlier}"),
    )
    .unwrap();
    assert!(!columns(&pg).contains("renewals"));
    let (code, stdout, stderr) = token(&pg);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "6", "the row's fence goes on");
    assert!(
        columns(&pg).ends_with(",shards,renewals"),
        "{}",
        columns(&pg)
    );
    let (code, stdout, _) = token(&pg);
    assert_eq!((code, stdout.as_str()), (Some(0), "7"));

    // Another role's tables: the statement, and nothing else changed.
    let pg = Postgres::start();
    pg.psql(&format!(
        "CREATE SCHEMA elect; {earlier} \
         GRANT USAGE ON SCHEMA elect TO elect; \
         GRANT SELECT, INSERT, UPDATE ON elect.lease TO elect; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON elect.waiter TO elect;"
    ));
    let (code, stdout, stderr) = token(&pg);
    eprintln!("not the owner: exit {code:?}: {stderr}");
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stdout.is_empty(), "the command ran");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let alter =
        "ALTER TABLE \"elect\".lease ADD COLUMN IF NOT EXISTS renewals bigint NOT NULL DEFAULT 0;";
    assert!(stderr.contains(alter), "{stderr}");
    assert!(!columns(&pg).contains("renewals"));
    pg.psql(alter);
    let (code, stdout, stderr) = token(&pg);
    assert_eq!((code, stdout.as_str()), (Some(0), "6"), "{stderr}");
}

/// A column of elect's tables changed to another type (by hand, or by
/// another program) is one line and 78 from every command that reads it,
/// never an abort.
#[test]
fn a_column_of_another_type_is_one_line_not_an_abort() {
    let pg = Postgres::start();
    let url = pg.url();
    let out = pg_run(&url, "typed", &[], "true").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pg.psql("ALTER TABLE elect.lease ALTER COLUMN fence TYPE integer");
    let run = pg_run(&url, "typed", &[], "echo ran").output().unwrap();
    assert_outcome("run", &run, 78, "fence");
    assert!(run.stdout.is_empty(), "the command ran");
    let mut status = elect();
    status
        .args(["status", "--store", &url, "--lock", "typed"])
        .env("PGPASSWORD", PASSWORD);
    assert_outcome("status", &status.output().unwrap(), 78, "fence");
}

/// `elect check` and `elect checkpoint` inside the command reach the
/// database with the password its elect was given, whether by
/// `--password-file` (a relative path), in the URL, or in `PGPASSWORD` or
/// `ELECT_PASSWORD` (which the command never sees), and the password shows
/// in neither the command's environment nor its arguments.
#[test]
fn elect_inside_the_command_reaches_the_database_as_its_elect_did() {
    let pg = Postgres::start();
    let dir = TempDir::new("pg-inside");
    std::fs::write(dir.join("password"), format!("{PASSWORD}\n")).unwrap();
    let bare = format!("postgres://elect@127.0.0.1:{}/elect", pg.port());
    let inside = support::inspect::reached_from_inside_the_command;
    inside(
        &bare,
        "inside-a",
        (&dir.0, &["--password-file", "password"]),
        &[],
        PASSWORD,
    );
    inside(
        &pg.url_as("elect", PASSWORD),
        "inside-b",
        (&dir.0, &[]),
        &[],
        PASSWORD,
    );
    inside(
        &bare,
        "inside-c",
        (&dir.0, &[]),
        &[("PGPASSWORD", PASSWORD)],
        PASSWORD,
    );
    inside(
        &bare,
        "inside-d",
        (&dir.0, &[]),
        &[("ELECT_PASSWORD", PASSWORD)],
        PASSWORD,
    );
}

/// The guide's least privilege for a person who only looks: USAGE on the
/// schema and SELECT on its three tables let status, history and list
/// read a lock and its history; break is refused, 78, naming the GRANTs.
#[test]
fn select_on_the_tables_is_all_a_person_who_looks_needs() {
    let pg = Postgres::start();
    let out = pg_run(&pg.url(), "looked-at", &[], "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    pg.psql(
        "GRANT USAGE ON SCHEMA \"elect\" TO reader; \
         GRANT SELECT ON \"elect\".lease, \"elect\".waiter, \"elect\".record TO reader",
    );
    let mut holder = Running::spawn(pg_run(&pg.url(), "held", &[], support::HOLD));
    holder.expect_line("token", 10 * SECOND);
    support::inspect::a_person_who_only_looks(
        &pg.url_as("reader", READER_PASSWORD),
        "looked-at",
        "held",
        &[
            "permission denied for table lease",
            "GRANT SELECT, INSERT, UPDATE ON \"elect\".lease TO reader",
        ],
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}
