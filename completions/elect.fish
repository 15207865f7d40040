# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_elect_global_optspecs
    string join \n q/quiet v/verbose log-format= h/help V/version
end

function __fish_elect_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_elect_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_elect_using_subcommand
    set -l cmd (__fish_elect_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c elect -n "__fish_elect_needs_command" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_needs_command" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_needs_command" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_needs_command" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_needs_command" -f -a "run" -d 'Take the lock, run COMMAND while holding it, release it when COMMAND ends'
complete -c elect -n "__fish_elect_needs_command" -f -a "status" -d 'Show who holds a lock, since when, with which token, and how many wait'
complete -c elect -n "__fish_elect_needs_command" -f -a "list" -d 'List the locks in a store with their holders'
complete -c elect -n "__fish_elect_needs_command" -f -a "check" -d 'Exit 0 only if the caller still holds its lock with its token (run it from COMMAND)'
complete -c elect -n "__fish_elect_needs_command" -f -a "break" -d 'Make the current holder let go: its command is stopped and the next waiter proceeds'
complete -c elect -n "__fish_elect_needs_command" -f -a "checkpoint" -d 'Read or commit the lock\'s checkpoint: the progress the next holder resumes from'
complete -c elect -n "__fish_elect_needs_command" -f -a "history" -d 'Show who held a lock, when, with which token, and how each tenure ended'
complete -c elect -n "__fish_elect_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c elect -n "__fish_elect_using_subcommand run" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand run" -s l -l lock -d 'Name of the lock. Segments of ASCII letters, digits, \'.\', \'_\' and \'-\', separated by \'/\'' -x
complete -c elect -n "__fish_elect_using_subcommand run" -l shards -d 'Split the lock into N shards, each with one owner: take a free one, or wait in every shard\'s queue and keep the first won. COMMAND gets ELECT_SHARD (0..N-1) and ELECT_SHARDS. N is recorded on first use; another N is refused (exit 78)' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l prefer-shard -d 'With --shards: take shard K when it is free [default: the shard this --identity held last]' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand run" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand run" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand run" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand run" -l ttl -d 'Lease time-to-live, 1s to 24h. A lost holder\'s command is dead before this runs out' -r
complete -c elect -n "__fish_elect_using_subcommand run" -s w -l wait -d 'How long to wait for the lock: a duration, 0, or "forever" [default: forever]' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l grace -d 'Time between the first signal and SIGKILL when the lease is lost [default: TTL/3]' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l signal -d 'First signal sent to COMMAND\'s process group when the lease is lost: a name (TERM, SIGTERM, term) or a number' -r -f -a "TERM\t''
INT\t''
HUP\t''
QUIT\t''
USR1\t''
USR2\t''
ALRM\t''
KILL\t''"
complete -c elect -n "__fish_elect_using_subcommand run" -l busy-exit-code -d 'Exit code when the lock was not acquired within --wait' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l lost-exit-code -d 'Exit code when the lease was lost and COMMAND was stopped' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l once-per -d 'Run COMMAND only if no run of this lock succeeded within DUR (20h, 1d): else exit --done-exit-code at once, naming who ran it. The window is judged by this host\'s clock against the start time the successful run recorded' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l slot -d 'Run COMMAND only if no run of this lock succeeded for the period KEY ("$(date +%F)", a billing month): a slot done is never run again. Letters, digits and . _ - :' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l done-exit-code -d 'Exit code when --once-per or --slot found the work done already' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l metrics-file -d 'Write node_exporter\'s textfile metrics of this run to PATH (atomically) when COMMAND starts and when elect ends: held, token, start, end, duration, exit code, outcome' -r -F
complete -c elect -n "__fish_elect_using_subcommand run" -l listen -d 'Serve /readyz (200 while this elect holds the lock), /livez and /metrics (Prometheus) over HTTP on HOST:PORT. A bare :PORT or PORT listens on 127.0.0.1 only; any other address (0.0.0.0 for every interface, a pod\'s) must be named explicitly' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l on-end -d 'Run CMD with sh -c once the lock is released, with ELECT_OUTCOME, ELECT_EXIT_CODE, ELECT_TOKEN, ELECT_DURATION_MS and ELECT_LOCK set; killed after 10s; never changes elect\'s exit code' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l history -d 'How many tenures the lock\'s history keeps in the store (elect history); 0 records none' -r
complete -c elect -n "__fish_elect_using_subcommand run" -l rejoin -d 'After losing the lease, wait for the lock again and run COMMAND anew with a new token; "always": also after COMMAND fails. Backs off 1s, 2s, ... up to 60s between turns. The value needs \'=\': --rejoin=always' -r -f -a "lost\t'After the lease was lost'
always\t'Also after COMMAND exited non-zero or was killed by a signal'"
complete -c elect -n "__fish_elect_using_subcommand run" -l identity -d 'Who holds the lock, as recorded in the store and in ELECT_IDENTITY [default: hostname]' -r
complete -c elect -n "__fish_elect_using_subcommand run" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand run" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand run" -s n -l no-wait -d 'Do not wait: exit at once if the lock is held (same as --wait 0; wins over ELECT_WAIT)'
complete -c elect -n "__fish_elect_using_subcommand run" -l subreaper -d 'Reap orphaned processes, as elect does when it is PID 1 (a container\'s entrypoint)'
complete -c elect -n "__fish_elect_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand run" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand status" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand status" -s l -l lock -d 'Name of the lock' -x
complete -c elect -n "__fish_elect_using_subcommand status" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand status" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand status" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand status" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand status" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand status" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand status" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand status" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand status" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand status" -l json -d 'Print one JSON object (the format is stable; see docs/reference.md)'
complete -c elect -n "__fish_elect_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand status" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand list" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand list" -l prefix -d 'Only locks whose names start with this' -r
complete -c elect -n "__fish_elect_using_subcommand list" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand list" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand list" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand list" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand list" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand list" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand list" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand list" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand list" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand list" -l json -d 'Print a JSON array of the objects `elect status --json` prints'
complete -c elect -n "__fish_elect_using_subcommand list" -l names-only -d 'Print only the names, one a line, and nothing on stderr: for shell completion'
complete -c elect -n "__fish_elect_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand list" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand check" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand check" -s l -l lock -d 'Name of the lock' -x
complete -c elect -n "__fish_elect_using_subcommand check" -l shard -d 'For a lock run with --shards: which shard (as ELECT_SHARD, which elect run sets)' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l holder-key -d 'The holder\'s key in the store' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l token -d 'The fencing token the holder was given' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand check" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand check" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand check" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand check" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand check" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand check" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand check" -l json -d 'Print one JSON object with the answer on stdout (see docs/reference.md)'
complete -c elect -n "__fish_elect_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand check" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand break" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand break" -s l -l lock -d 'Name of the lock' -x
complete -c elect -n "__fish_elect_using_subcommand break" -l shard -d 'For a lock run with --shards: the shard to break' -r
complete -c elect -n "__fish_elect_using_subcommand break" -l token -d 'Only if the holder\'s token is T: refuse when the holder changed meanwhile' -r
complete -c elect -n "__fish_elect_using_subcommand break" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand break" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand break" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand break" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand break" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand break" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand break" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand break" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand break" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand break" -s y -l yes -d 'Do not ask for confirmation; required without a terminal to ask on'
complete -c elect -n "__fish_elect_using_subcommand break" -l force -d 'End the holder\'s tenure at once instead of asking it to stop its command first: the command may run on beside the next holder\'s until its elect notices, then at most 100 ms more'
complete -c elect -n "__fish_elect_using_subcommand break" -l json -d 'Print one JSON object with the outcome on stdout (see docs/reference.md)'
complete -c elect -n "__fish_elect_using_subcommand break" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand break" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -s l -l lock -d 'Name of the lock' -x
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l shard -d 'For a lock run with --shards: which shard (as ELECT_SHARD, which elect run sets)' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l holder-key -d 'The holder\'s key in the store (put)' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l token -d 'The fencing token the holder was given (put)' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -l json -d 'get: print one JSON object, {value, token, at}'
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand checkpoint" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand history" -l log-format -d 'Format of every line elect writes on stderr, usage errors included' -r -f -a "text\t'`elect: TIME message`; usage and configuration errors without the time'
json\t'One JSON object per line: {"time", "level", "message"}, with "lock", "identity", "token", "shard", "exit_code" once known and an "event" for a holder\'s steps'"
complete -c elect -n "__fish_elect_using_subcommand history" -s l -l lock -d 'Name of the lock' -x
complete -c elect -n "__fish_elect_using_subcommand history" -l shard -d 'For a lock run with --shards: that shard\'s history only [default: every shard\'s]' -r
complete -c elect -n "__fish_elect_using_subcommand history" -l since -d 'Only tenures that began less than DUR ago (24h, 7d)' -r
complete -c elect -n "__fish_elect_using_subcommand history" -l store -d 'Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS, postgres://USER@HOST:PORT/DB (or libpq\'s \'host=H dbname=D\' words), mysql://USER@HOST:PORT/DB (or mariadb://), zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS), k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account), or file:DIR for locks on this host only ("file" alone: /var/lib/elect for root, else $XDG_STATE_HOME/elect, or ~/.local/state/elect without it).' -r
complete -c elect -n "__fish_elect_using_subcommand history" -l connect-timeout -d 'How long the store may take to answer, from connecting until elect is queued (or, for the other commands, until each look is answered), before giving up with exit code 69' -r
complete -c elect -n "__fish_elect_using_subcommand history" -l cacert -d 'CA certificate (PEM) that signed the servers\' certificates (etcd: else the system\'s roots; PostgreSQL: as sslrootcert, the whole chain checked; MySQL/MariaDB: as ssl-ca; ZooKeeper: needed by zks://); Kubernetes and file take none' -r -F
complete -c elect -n "__fish_elect_using_subcommand history" -l cert -d 'Client certificate (PEM) for servers that require one; needs --key' -r -F
complete -c elect -n "__fish_elect_using_subcommand history" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c elect -n "__fish_elect_using_subcommand history" -l user -d 'The store\'s user (etcd: its user; PostgreSQL: the role; MySQL/MariaDB: the account; ZooKeeper: a digest user); Kubernetes and file take none. The password comes from --password-file, the store URL or ELECT_PASSWORD, else the store\'s own variables and files (see Environment)' -r
complete -c elect -n "__fish_elect_using_subcommand history" -l password-file -d 'File whose first line is the user\'s password' -r -F
complete -c elect -n "__fish_elect_using_subcommand history" -s q -l quiet -d 'Print nothing of elect\'s own but errors, not even why the lock was busy'
complete -c elect -n "__fish_elect_using_subcommand history" -s v -l verbose -d 'Show the lifecycle on stderr: connected, queued, acquired, renewals, released'
complete -c elect -n "__fish_elect_using_subcommand history" -l json -d 'Print one JSON object per tenure, one per line (the format is stable; see docs/reference.md)'
complete -c elect -n "__fish_elect_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c elect -n "__fish_elect_using_subcommand history" -s V -l version -d 'Print version'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "run" -d 'Take the lock, run COMMAND while holding it, release it when COMMAND ends'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "status" -d 'Show who holds a lock, since when, with which token, and how many wait'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "list" -d 'List the locks in a store with their holders'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "check" -d 'Exit 0 only if the caller still holds its lock with its token (run it from COMMAND)'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "break" -d 'Make the current holder let go: its command is stopped and the next waiter proceeds'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "checkpoint" -d 'Read or commit the lock\'s checkpoint: the progress the next holder resumes from'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "history" -d 'Show who held a lock, when, with which token, and how each tenure ended'
complete -c elect -n "__fish_elect_using_subcommand help; and not __fish_seen_subcommand_from run status list check break checkpoint history help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# elect's own: lock names from the store, store URL schemes, and after --
# the command and its own completions.
function __fish_elect_locks
    set -l tokens (commandline -opc)
    set -l store
    set -l i (contains -i -- --store $tokens)
    and set store --store $tokens[(math $i + 1)]
    $tokens[1] list --names-only --connect-timeout 500ms $store </dev/null 2>/dev/null
end
function __fish_elect_after_dashes
    contains -- -- (commandline -opc)
end
function __fish_elect_command
    set -l tokens (commandline -opc)
    set -l i (contains -i -- -- $tokens)
    set -l rest $tokens[(math $i + 1)..-1]
    if test (count $rest) -eq 0
        __fish_complete_command
    else
        complete -C "$rest "(commandline -ct)
    end
end
complete -c elect -n "__fish_elect_using_subcommand status; and not __fish_elect_after_dashes" -s l -l lock -x -a "(__fish_elect_locks)"
complete -c elect -n "__fish_elect_using_subcommand check; and not __fish_elect_after_dashes" -s l -l lock -x -a "(__fish_elect_locks)"
complete -c elect -n "__fish_elect_using_subcommand break; and not __fish_elect_after_dashes" -s l -l lock -x -a "(__fish_elect_locks)"
complete -c elect -n "__fish_elect_using_subcommand checkpoint; and not __fish_elect_after_dashes" -s l -l lock -x -a "(__fish_elect_locks)"
complete -c elect -n "__fish_elect_using_subcommand history; and not __fish_elect_after_dashes" -s l -l lock -x -a "(__fish_elect_locks)"
complete -c elect -n "not __fish_elect_after_dashes" -l store -x -a "etcd:// etcds:// postgres:// mysql:// mariadb:// zk:// zks:// k8s: file:"
complete -c elect -n "__fish_elect_using_subcommand run; and __fish_elect_after_dashes" -x -a "(__fish_elect_command)"
