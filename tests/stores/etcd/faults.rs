//! Fault injection against a real etcd: contenders for one lock write to a
//! fenced register while a nemesis pauses, freezes, kills and partitions
//! them and crashes etcd members; then the history is checked.
//!
//! The normal run gives every kind of fault one turn (about 15 s per
//! store). `ELECT_SOAK_SECS=600` makes each nemesis run that long;
//! `ELECT_FAULT_SEED=N` replays the nemesis's choices. A failure prints the
//! seed and the part of the history that breaks the property.
//!
//! The tests in this file run one at a time: they measure handovers in
//! milliseconds, and CI has two cores.

use crate::support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::nemesis::{Nemesis, World};
use support::history::{self, Figures, Violation, What};
use support::now_ns;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Contenders per lock.
const CONTENDERS: usize = 3;
/// Lease TTL in seconds: short, so that losses and handovers happen often.
const TTL_SECS: u64 = 1;
/// Lease TTL for the member-loss test. After a missed renewal elect has
/// TTL - TTL/3 - grace - margin to renew through another member: 264 ms at
/// 1 s, which covers a dead member but not always the election that follows
/// the leader's death (renewals fail with "no leader" meanwhile); 3 s does.
const MEMBER_LOSS_TTL_SECS: u64 = 3;
/// After the faults heal, a holder must be writing within TTL plus this.
const RECOVERY_SLACK: Duration = Duration::from_secs(3);

fn soak() -> Option<Duration> {
    let secs = std::env::var("ELECT_SOAK_SECS").ok()?;
    Some(Duration::from_secs(secs.trim().parse().unwrap_or_else(
        |_| panic!("ELECT_SOAK_SECS={secs:?} is not a number of seconds"),
    )))
}

/// Print the seed, the broken property and the history around it; panic.
fn fail(world: &World, seed: u64, v: Violation) -> ! {
    let excerpt = world
        .history
        .excerpt(v.from - 1_000_000_000, v.to + 1_000_000_000, 120);
    eprintln!(
        "\nPROPERTY {} BROKEN (seed {seed}, replay with ELECT_FAULT_SEED={seed}):\n  {}\n\
         history around it:\n{excerpt}\n",
        v.property, v.detail
    );
    panic!("property {} broken: {} (seed {seed})", v.property, v.detail);
}

fn nemesis_run(members: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut nemesis = Nemesis::new(members);
    let seed = nemesis.seed;
    let store = if members == 1 {
        "one etcd node".to_string()
    } else {
        format!("{members} etcd members")
    };
    eprintln!("nemesis on {store}: seed {seed} (replay with ELECT_FAULT_SEED={seed})");
    let mut world = World::start(members, CONTENDERS, "faults", TTL_SECS);
    let ttl = world.ttl;
    if world
        .wait_until(Duration::from_secs(10), |w| w.register.highest().is_some())
        .is_err()
    {
        fail(
            &world,
            seed,
            violation("startup", "nobody took the lock", 0),
        );
    }

    let soak = soak();
    let began = Instant::now();
    loop {
        let done = match soak {
            Some(d) => began.elapsed() >= d,
            None => nemesis.first_pass_done(),
        };
        if done {
            break;
        }
        let fault = nemesis.next();
        world.inject(fault, &mut nemesis.rng);
        let gap = nemesis
            .rng
            .between(Duration::from_millis(200), Duration::from_millis(800));
        world.idle(gap);
    }

    // Property 4: once everything is healed, someone holds the lock again
    // within the TTL plus a small bound.
    world.heal_all();
    let healed = now_ns();
    let writing = |w: &mut World| {
        w.history
            .events()
            .iter()
            .any(|e| e.at > healed && matches!(e.what, What::Write { accepted: true, .. }))
    };
    let recovery = match world.wait_until(ttl + RECOVERY_SLACK, writing) {
        Ok(took) => took,
        Err(took) => fail(
            &world,
            seed,
            violation(
                "4 (a holder again after the faults heal)",
                &format!("no accepted write within {took:?} of the heal"),
                healed,
            ),
        ),
    };

    // Property 5: stop the contenders; nothing they started may be left.
    let ends = world.stop();
    let orphans = world.orphans(Duration::from_secs(5));
    if !orphans.is_empty() {
        fail(
            &world,
            seed,
            violation(
                "5 (no orphans)",
                &format!("still running after every elect ended ({ends:?}): {orphans:?}"),
                now_ns() - 5_000_000_000,
            ),
        );
    }

    let events = world.history.events();
    let mut figures: Figures = history::count(&events);
    let checks = history::check_tokens(&events)
        .and_then(|()| history::check_fencing(&events))
        .and_then(|()| history::check_exclusion(&events, &mut figures));
    if let Err(v) = checks {
        fail(&world, seed, v);
    }
    eprintln!(
        "nemesis on {store}, seed {seed}, {:.1} s of faults; a holder {:.0} ms after the heal\n{figures}",
        began.elapsed().as_secs_f64(),
        recovery.as_secs_f64() * 1e3
    );
    assert!(
        figures.grants > CONTENDERS,
        "the lock hardly moved: {figures}"
    );
    assert!(figures.accepted > 0);
}

fn violation(property: &'static str, detail: &str, at: i128) -> Violation {
    Violation {
        property,
        detail: detail.to_string(),
        from: at,
        to: now_ns(),
    }
}

#[test]
fn the_lock_stays_safe_under_faults_on_one_etcd_node() {
    nemesis_run(1);
}

#[test]
fn the_lock_stays_safe_under_faults_on_three_etcd_members() {
    nemesis_run(3);
}

/// Property 6: a cluster of three survives the crash of any one member, the
/// leader included, and so does the lease: the holder keeps its lock and
/// its command keeps running and writing, while a waiter stays waiting.
#[test]
fn losing_one_etcd_member_of_three_loses_no_lease() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut world = World::start(3, 2, "steady", MEMBER_LOSS_TTL_SECS);
    let ttl = world.ttl;
    world
        .wait_until(Duration::from_secs(10), |w| w.holder().is_some())
        .expect("nobody took the lock");
    let holder = world.holder().unwrap();
    let label = world.contenders[holder].label.clone();
    let command = world.contenders[holder].writer().unwrap();
    let elect = world.contenders[holder].pid;
    let token = world.register.highest().unwrap();

    // The leader first, then the others: one of them is the member elect
    // talks to, whose loss elect must ride out by moving to another.
    let first = world.cluster.wait_leader();
    for member in (0..3).map(|i| (first + i) % 3) {
        let leader = world.cluster.wait_leader();
        let victim = if member == leader {
            "leader"
        } else {
            "follower"
        };
        world.cluster.kill(member);
        let killed = now_ns();
        world
            .history
            .note(format!("killed the {victim}, member {member}"));
        // A lost renewal would cost the lease within one TTL.
        world.idle(ttl * 3 / 2);
        let writes_since = world
            .history
            .events()
            .iter()
            .filter(|e| {
                e.at > killed + ttl.as_nanos() as i128
                    && matches!(e.what, What::Write { pid, accepted: true, .. } if pid == command)
            })
            .count();
        let exits: Vec<String> = world
            .history
            .events()
            .iter()
            .filter(|e| matches!(e.what, What::Exit { .. }))
            .map(|e| e.what.to_string())
            .collect();
        let c = &world.contenders[holder];
        let kept = c.pid == elect && c.running() && c.writer() == Some(command);
        if !kept
            || writes_since == 0
            || !exits.is_empty()
            || world.register.highest() != Some(token)
        {
            eprintln!(
                "history:\n{}",
                world.history.excerpt(killed - 2_000_000_000, now_ns(), 120)
            );
            panic!(
                "killing the etcd {victim} cost {label} its lease: elect {elect} running: {}, \
                 command {command} still its command: {}, its writes in the last {:?}: \
                 {writes_since}, exits: {exits:?}, highest token {:?} (was {token})",
                c.running(),
                c.writer() == Some(command),
                ttl / 2,
                world.register.highest()
            );
        }
        world.cluster.restart(member);
        world.cluster.wait_healthy();
        eprintln!(
            "killed the etcd {victim} (member {member}) for {:?}: {label} kept its lease \
             (token {token}); its command wrote {writes_since} times in the last {:?}",
            ttl * 3 / 2,
            ttl / 2
        );
    }
    world.stop();
    let orphans = world.orphans(Duration::from_secs(5));
    assert!(orphans.is_empty(), "left running: {orphans:?}");
}

/// The checkers themselves, on made-up histories: each must catch what it
/// is there to catch, or the runs above prove nothing.
#[test]
fn the_checkers_catch_what_they_are_for() {
    use support::history::{Event, check_exclusion, check_fencing, check_tokens};
    let at = |ms: i128| ms * 1_000_000;
    let grant = |t: i128, token: u64, pid: i32| Event {
        at: at(t),
        what: What::Grant {
            label: format!("c{pid}"),
            token,
            pid,
            older_alive: vec![],
        },
    };
    let death = |t: i128, pid: i32| Event {
        at: at(t),
        what: What::Death { pid, exact: true },
    };
    let write = |t: i128, token: u64, pid: i32, accepted: bool, highest: u64| Event {
        at: at(t),
        what: What::Write {
            label: format!("c{pid}"),
            token,
            pid,
            seq: 1,
            accepted,
            highest,
        },
    };
    let paused = |t: i128, pid: i32| Event {
        at: at(t),
        what: What::Fault {
            kind: "pause",
            detail: String::new(),
            paused: Some(pid),
        },
    };
    let clean = vec![
        grant(0, 5, 1),
        death(100, 1),
        grant(110, 7, 2),
        death(200, 2),
    ];
    let mut f = Figures::default();
    assert!(check_tokens(&clean).is_ok());
    assert!(check_exclusion(&clean, &mut f).is_ok());
    assert_eq!(f.min_handover_ms, Some(10.0));

    let overlap = vec![
        grant(0, 5, 1),
        grant(90, 7, 2),
        death(100, 1),
        death(200, 2),
    ];
    assert!(check_exclusion(&overlap, &mut Figures::default()).is_err());
    let mut excused = overlap.clone();
    excused.push(paused(50, 1));
    let mut f = Figures::default();
    assert!(check_exclusion(&excused, &mut f).is_ok());
    assert_eq!((f.paused_overlaps, f.max_paused_overlap_ms), (1, 10.0));

    let stale_write = vec![
        grant(0, 5, 1),
        death(100, 1),
        grant(110, 7, 2),
        write(120, 5, 1, false, 7),
    ];
    assert!(check_exclusion(&stale_write, &mut Figures::default()).is_err());

    let backwards = vec![grant(0, 7, 1), death(100, 1), grant(110, 5, 2)];
    assert!(check_tokens(&backwards).is_err());
    let twice = vec![grant(0, 7, 1), death(100, 1), grant(110, 7, 2)];
    assert!(check_tokens(&twice).is_err());

    let unfenced = vec![write(0, 7, 1, true, 0), write(10, 5, 2, true, 7)];
    assert!(check_fencing(&unfenced).is_err());
    let fenced = vec![write(0, 7, 1, true, 0), write(10, 5, 2, false, 7)];
    assert!(check_fencing(&fenced).is_ok());
}
