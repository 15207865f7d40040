//! The test PostgreSQL and PgBouncer themselves (tests/support/postgres.rs),
//! before any store test leans on them: the server answers as the
//! superuser over its socket and to `elect` over TCP with a password,
//! `reader` can create nothing, the data outlives a fast and an immediate
//! (crash) restart, and a PgBouncer pooling by transaction passes a query
//! on with the password, and refuses a wrong one.

mod support;

use std::time::Instant;

use support::postgres::{READER_PASSWORD, psql_url};
use support::{PgBouncer, Postgres};

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
