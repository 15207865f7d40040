//! The figures, in the order they run and appear on docs/benchmarks.md:
//! what each measures and its target, said once here for the bench's own
//! docs and for the page it writes.

/// One figure: its name (as `cargo bench -- NAME` picks it), what it
/// measures and its target in a sentence or two (the page shows this, in
/// Markdown), and how it measures it (for the reader of the code).
pub struct Figure {
    pub name: &'static str,
    pub measures: &'static str,
    pub how: &'static str,
}

/// Every figure. `floor` and `timeline` are part of `cycle`; the fleet
/// figures (`holders`, `herd`, `waiters`, `short-lease`) run on the stores of
/// [`crate::fleet::stores`].
pub const FIGURES: [Figure; 15] = [
    Figure {
        name: "cycle",
        measures: "One uncontended `elect run -- true`, from spawn to exit, against \
            `etcdctl lock L true` on etcd (target: at most 0.25x), against `flock \
            FILE true` on the file store (at most 1.5x) and against itself keeping \
            no history (at most 1.05x). Beside it, the cycle's floor, two execs \
            and the store's unavoidable writes (target: at most 1.3x the floor), \
            and where a cycle's time goes, step by step.",
        how: "`elect run --store etcd://… --lock L -- true` against `etcdctl lock L \
            true`, median and p99, on every store of `harness::locker::pairs`. \
            Every tool runs without the LD_LIBRARY_PATH that cargo sets for its \
            build directories. The floor, in the same run: spawning `true`; an \
            etcd grant on a new connection (what a new process pays to connect, \
            beside which the queue transaction rides), and a grant, queue \
            transaction and revoke on a warm one; 32 bytes fdatasync'd. Each \
            cycle is set against 2 execs + the grant on a new connection + \
            revoke (etcd) or 2 execs + fdatasync (file). The timeline comes from \
            elect's own `-v` lines with `ELECT_TIMELINE=1` (`step +N ms NAME`, from the start of \
            `main`): the median of each step over 40 cycles (10 quick) of each \
            store, run after the cycle figure with nothing beside them.",
    },
    Figure {
        name: "handover",
        measures: "The holder's command exits and the next waiter's command starts: \
            the time between, median and p99. Target: median under 5 ms.",
        how: "The waiter is queued first (its key is in etcd), then the holder's \
            command is released through a FIFO it blocks on (100 ms after the \
            waiter's key appeared, so the waiter has settled); the time runs \
            from that write to the waiter's first line.",
    },
    Figure {
        name: "failover",
        measures: "The holder (the `elect` or `etcdctl` process itself) is killed \
            with SIGKILL while a waiter is queued, TTL 2 s: the time to the \
            waiter's first line minus the TTL. Target: within TTL + 100 ms.",
        how: "It can be below zero: the lease runs from the last renewal, up to \
            TTL/3 before the kill. etcd itself looks for expired leases only \
            every 500 ms.",
    },
    Figure {
        name: "revoke",
        measures: "The holder's lease is revoked from outside: the time until its \
            command, which traps TERM, says it got it.",
        how: "The LeaseRevoke that `etcdctl lease revoke <ELECT_LEASE_ID>` sends, \
            here through etcd's HTTP gateway to leave out etcdctl's start-up. \
            `etcdctl lock` does not stop its command when its session ends: it \
            is watched for a while to show that.",
    },
    Figure {
        name: "idle",
        measures: "One holder of each tool (TTL 15 s) with an idle command: peak and \
            proportional memory, CPU time and wake-ups per minute, elect's \
            process and its guard summed. Target: peak memory under 8 MiB.",
        how: "Over a window (20 s quick, 60 s full): peak resident memory (VmHWM \
            at the end) and proportional memory (Pss, pages shared counted in \
            parts), CPU time and wake-ups (voluntary context switches: a \
            preemption is no wake-up) per minute, from /proc, summed over \
            threads. elect is two processes, `elect` and its guard \
            `lease-guard`; both are counted. A third holder, elect with \
            `--listen` on and nothing asking it, runs in the same window: its \
            CPU and wake-ups against elect's without the endpoint. (The guard's \
            sentinel, `lease-sentinel`, a fork of the guard that only waits for \
            a signal, is not counted.)",
    },
    Figure {
        name: "postgres",
        measures: "The PostgreSQL store on a server started for the purpose: the \
            uncontended cycle over TCP and over the Unix socket against `psql -c \
            'SELECT 1'`, the handover, failover after SIGKILL, and the load an \
            idle waiter puts on the server.",
        how: "fsync off, as the tests run it. The cycle over TCP (with a password) \
            and over the Unix socket, each against psql the same way (one \
            connection and one statement, what any client pays); the handover \
            after a clean exit with LISTEN (direct) and with polling (through \
            PgBouncer in transaction mode); failover after SIGKILL of elect (its \
            guard releases) and of elect, guard and command at once (the row \
            expires: TTL + how much, TTL 2 s). The idle waiters' load as for \
            `mariadb`, in the server's CPU time alone (PostgreSQL's counters \
            lag).",
    },
    Figure {
        name: "mariadb",
        measures: "The MySQL store on a MariaDB started for the purpose: the \
            uncontended cycle over TCP and over the Unix socket against `mariadb \
            -e 'SELECT 1'`, the handover, failover after SIGKILL, and the load an \
            idle waiter puts on the server.",
        how: "The cycle over TCP (with a password) and over the Unix socket, each \
            against the mariadb client the same way; the handover after a clean \
            exit (the waiter wakes at the holder's doorbell); failover after \
            SIGKILL of elect and of elect, guard and command at once (TTL 2 s); \
            and the load an idle waiter puts on the server: a holder and four \
            waiters (TTL 6 s) over a window (10 s quick, 30 s full), against the \
            holder alone, in the server's CPU time (its processes, summed over \
            threads) and its statements (`Questions`), per waiter per minute.",
    },
    Figure {
        name: "zookeeper",
        measures: "The ZooKeeper store on one server started for the purpose: the \
            uncontended cycle, the handover after a clean exit, and failover \
            after SIGKILL.",
        how: "Failover after SIGKILL of elect (its guard deletes the node) and of \
            elect, guard and command at once (the session expires: TTL + how \
            much, TTL 2 s).",
    },
    Figure {
        name: "k8s",
        measures: "The Kubernetes store on a kube-apiserver started for the \
            purpose: the uncontended cycle and its requests, the handover, \
            failover after SIGKILL, and a holder's requests per renewal.",
        how: "`scripts/servers-go build` names the server, which keeps an audit \
            log of every Lease request. The handover after a clean exit; \
            failover after SIGKILL of elect (its guard lets go) and of elect, \
            guard and command at once (the Lease is taken once seen unchanged \
            for its duration: TTL + how much, TTL 2 s); a holder's requests per \
            renewal with and without a waiter.",
    },
    Figure {
        name: "contention",
        measures: "Four contenders each run `LOCKER L -- true` in a loop for a \
            fixed time: acquisitions per second, elect against `etcdctl lock`.",
        how: "5 s once quick, 10 s three times full.",
    },
    Figure {
        name: "scale",
        measures: "N waiters queued on one lock, in a fresh etcd each, and a chain \
            of handovers among them: etcd requests and watch messages per \
            handover. Target: requests per handover flat as N grows.",
        how: "N is 10 and 50 quick; 10, 100, 500 full. The first few waiters' \
            commands are `true`, so once the holder is released the handovers \
            chain; the next one's command stays, which ends the measured chain \
            with N − 8 waiters still queued. etcd's own counters (/metrics) are \
            read before and after: gRPC messages received except lease \
            keep-alives (those come per waiter per TTL/3, not per handover, and \
            are shown apart), and watch messages sent (a thundering herd would \
            show there). etcdctl lock is measured up to 100 waiters.",
    },
    Figure {
        name: "holders",
        measures: "N elects, each holding a lock of its own for a while, on each \
            store: leases lost (target 0), store requests per second against the \
            renewal floor of one per holder per TTL/3 (target at most 1.1x), the \
            server's CPU, Pss per holder (target at most 2.5 MiB) and wake-ups \
            per holder per minute (target at most 30).",
        how: "N is 10 and 100 quick; 10, 100, 1,000 full, started in waves of \
            100, each holding before the next starts, at the default TTL, for a \
            hold of 2 minutes quick and 10 full for the largest N (the smaller \
            ones 2 minutes at most). Pss per holder counts elect and its guard.",
    },
    Figure {
        name: "herd",
        measures: "N elects started at once with `-n -q --once-per 1h` on one \
            lock, as cron starts one line on N hosts, on each store: runs of the \
            job (target: 1), the time from the last start to the last exit \
            (target at 1,000: 2 s), the store's requests (target: at most 2) \
            and CPU per skipped elect, the exit codes and the lines on stderr \
            (target: none).",
        how: "N is 100 quick; 100, 1,000 and 10,000 full, each started by one \
            thread as fast as it can fork (the row says over how long), on a \
            server sized for 100 clients at once. A skipped elect's requests \
            and CPU are the store's counters over the herd less what one run \
            of the job cost them alone, measured just before on a lock of its \
            own, shared among the skipped.",
    },
    Figure {
        name: "waiters",
        measures: "N waiters on one lock and a chain of handovers among them, on \
            each store: the time and store requests per handover (target: flat \
            as N grows), and the Pss per waiter of elect and of the store's \
            servers.",
        how: "N is 10 and 100 quick; 10, 100, 1,000, 10,000 full, queued in \
            waves of 100; the chain as in `scale`. A queue the memory available \
            would not hold, reckoned from the one before, is not started.",
    },
    Figure {
        name: "short-lease",
        measures: "A holder at each TTL of 1, 2, 3 and 5 s beside a CPU hog, then \
            beside a load on the same store: the shortest TTL none lost (target \
            1 s), and failover at it after SIGKILL of the holder's elect, guard \
            and command (target within TTL + 100 ms).",
        how: "Holds of 2 minutes quick, 30 full; the load is two contenders per \
            core in all, shared among the stores, which run side by side.",
    },
];

/// The names of [`FIGURES`], in order.
pub fn names() -> impl Iterator<Item = &'static str> {
    FIGURES.iter().map(|f| f.name)
}
