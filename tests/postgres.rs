//! The PostgreSQL store beyond the behaviour suite (tests/behaviour.rs):
//! tokens across crashes, breaks and restarts of the database, partitions,
//! the GC-pause story with a fenced write in the same database, clock skew,
//! PgBouncer pooling by transaction, and bad input. Overlap is measured on
//! one monotonic clock (support::ticker).
//!
//! First, the test PostgreSQL and PgBouncer themselves
//! (tests/support/postgres.rs), before any store test leans on them: the
//! server answers as the superuser over its socket and to `elect` over TCP
//! with a password, `reader` can create nothing, the data outlives a fast
//! and an immediate (crash) restart, and a PgBouncer pooling by transaction
//! passes a query on with the password, and refuses a wrong one.

mod support;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use support::postgres::{PASSWORD, READER_PASSWORD, psql_url};
use support::proxy::{Mode, Proxy};
use support::ticker::{Ticks, group_alive, group_members};
use support::{
    PgBouncer, Postgres, Running, SECOND, TempDir, elect, elect_run, find_child, ms, now_ns,
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
    let give_up = Instant::now() + 10 * SECOND;
    loop {
        let found: usize = pg
            .try_psql(&format!(
                "SELECT (SELECT count(*) FROM elect.lease WHERE name = '{lock}' \
                   AND tenure IS NOT NULL AND expires_at > clock_timestamp()) \
                 + (SELECT count(*) FROM elect.waiter WHERE name = '{lock}' \
                   AND expires_at > clock_timestamp())"
            ))
            .map_or(0, |n| n.parse().unwrap());
        if found == n {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{n} contenders for {lock}, found {found}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let guard = find_child(whole.pid(), "elect-guard");
    let killed_at = now_ns();
    // SAFETY: plain kill(2) and killpg(2) of our own descendants.
    unsafe {
        libc::kill(guard, libc::SIGKILL);
        libc::kill(whole.pid(), libc::SIGKILL);
        libc::killpg(group, libc::SIGKILL);
    }
    whole.wait(10 * SECOND);
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
        .args(["break", "--store", &url, "--lock", "t"])
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
        let cut_at = now_ns();
        proxy.set(mode);
        let cut_mono = support::ticker::monotonic_ns() - (now_ns() - cut_at);
        let overlap = ticks.overlap_ms("A", a_group, "B");
        let a_last = ticks.last("A").unwrap();
        let b_first = ticks.first("B", SECOND);
        eprintln!(
            "{name}, TTL 2s: A's last tick {:.0} ms after the cut, B's first {:.0} ms after; \
             A's last tick {overlap:.1} ms after B's first",
            (a_last - cut_mono) as f64 / 1e6,
            (b_first - cut_mono) as f64 / 1e6
        );
        assert!(overlap < 0.0, "{name}: A ran {overlap:.1} ms beside B");
        assert!(
            !group_alive(a_group),
            "{name}: {:?}",
            group_members(a_group)
        );
        assert_eq!(a.wait_code(10 * SECOND), 76, "{name}: {:?}", a.stderr_seen);
        b.signal(libc::SIGTERM);
        b.wait(10 * SECOND);
    }
}
