//! The tools compared: each runs a command while holding a named lock.
//! A figure takes a [`Pair`], elect and the reference tool on the same
//! store, so a new store is one more pair in [`pairs`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::stores::etcd::Etcd;
use crate::support;

#[derive(Clone)]
enum Kind {
    ElectEtcd {
        url: String,
    },
    EtcdctlLock {
        endpoint: String,
    },
    ElectFile {
        dir: PathBuf,
    },
    ElectPostgres {
        url: String,
    },
    ElectZooKeeper {
        url: String,
    },
    ElectKube {
        url: String,
    },
    /// elect on MySQL or MariaDB, its password (if any) in the URL.
    ElectMySql {
        url: String,
    },
    Flock {
        dir: PathBuf,
    },
    /// elect on any store by its URL, as the fleet figures run it.
    ElectOn {
        url: String,
    },
    /// Another build of elect (`ELECT_BENCH_AGAINST`) on the store of `url`.
    ElectAt {
        program: PathBuf,
        url: String,
        postgres: bool,
    },
}

/// A way to run a command while holding a named lock.
#[derive(Clone)]
pub struct Locker {
    pub name: &'static str,
    kind: Kind,
}

impl Locker {
    pub fn elect_etcd(etcd: &Etcd) -> Locker {
        Locker {
            name: "elect",
            kind: Kind::ElectEtcd { url: etcd.url() },
        }
    }

    pub fn etcdctl_lock(etcd: &Etcd) -> Locker {
        Locker {
            name: "etcdctl lock",
            kind: Kind::EtcdctlLock {
                endpoint: etcd.endpoint.clone(),
            },
        }
    }

    pub fn elect_file(dir: &Path) -> Locker {
        Locker {
            name: "elect (file)",
            kind: Kind::ElectFile {
                dir: dir.to_path_buf(),
            },
        }
    }

    /// elect on PostgreSQL at `url`, with the test role's password.
    pub fn elect_postgres(url: &str, name: &'static str) -> Locker {
        Locker {
            name,
            kind: Kind::ElectPostgres {
                url: url.to_string(),
            },
        }
    }

    /// elect on ZooKeeper at `url`.
    pub fn elect_zookeeper(url: &str) -> Locker {
        Locker {
            name: "elect (zookeeper)",
            kind: Kind::ElectZooKeeper {
                url: url.to_string(),
            },
        }
    }

    /// elect on the store at `url`, any kind (with the test role's password
    /// for PostgreSQL over TCP, which the others ignore).
    pub fn elect_on(url: &str) -> Locker {
        Locker {
            name: "elect",
            kind: Kind::ElectOn {
                url: url.to_string(),
            },
        }
    }

    /// elect on Kubernetes at `url` (a context of the tests' kubeconfig).
    pub fn elect_kube(url: &str) -> Locker {
        Locker {
            name: "elect (k8s)",
            kind: Kind::ElectKube {
                url: url.to_string(),
            },
        }
    }

    /// elect on MySQL or MariaDB at `url`.
    pub fn elect_mysql(url: &str) -> Locker {
        Locker {
            name: "elect (mariadb)",
            kind: Kind::ElectMySql {
                url: url.to_string(),
            },
        }
    }

    /// The elect at `program` on the store `of` runs on, in its place as the
    /// reference tool: this build against an earlier one, in one run.
    pub fn elect_at(program: &Path, of: &Locker) -> Locker {
        let (url, postgres) = match &of.kind {
            Kind::ElectEtcd { url }
            | Kind::ElectZooKeeper { url }
            | Kind::ElectKube { url }
            | Kind::ElectMySql { url } => (url.clone(), false),
            Kind::ElectPostgres { url } => (url.clone(), true),
            Kind::ElectFile { dir } => (format!("file:{}", dir.display()), false),
            _ => panic!("{} is not elect", of.name),
        };
        Locker {
            name: "elect before",
            kind: Kind::ElectAt {
                program: program.to_path_buf(),
                url,
                postgres,
            },
        }
    }

    /// Whether this is elect (some build of it), which has a guard.
    pub fn is_elect(&self) -> bool {
        !matches!(self.kind, Kind::EtcdctlLock { .. } | Kind::Flock { .. })
    }

    pub fn flock(dir: &Path) -> Locker {
        Locker {
            name: "flock",
            kind: Kind::Flock {
                dir: dir.to_path_buf(),
            },
        }
    }

    /// A short name for lock names and labels: "elect", "etcdctl", ...
    pub fn tag(&self) -> &'static str {
        match self.kind {
            Kind::ElectEtcd { .. } => "elect",
            Kind::EtcdctlLock { .. } => "etcdctl",
            Kind::ElectFile { .. } => "elect-file",
            Kind::ElectPostgres { .. } => "elect-postgres",
            Kind::ElectZooKeeper { .. } => "elect-zookeeper",
            Kind::ElectKube { .. } => "elect-k8s",
            Kind::ElectMySql { .. } => "elect-mariadb",
            Kind::Flock { .. } => "flock",
            Kind::ElectAt { .. } => "elect-before",
            Kind::ElectOn { .. } => "elect-on",
        }
    }

    /// Run `argv` while holding `lock`, with a lease TTL in seconds if given
    /// (ignored by the file stores, which have none).
    pub fn command(&self, lock: &str, ttl_secs: Option<u64>, argv: &[&str]) -> Command {
        match &self.kind {
            Kind::ElectEtcd { url } => elect_run(support::elect(), url, lock, ttl_secs, argv),
            Kind::ElectFile { dir } => elect_run(
                support::elect(),
                &format!("file:{}", dir.display()),
                lock,
                None,
                argv,
            ),
            Kind::ElectZooKeeper { url } | Kind::ElectKube { url } | Kind::ElectMySql { url } => {
                elect_run(support::elect(), url, lock, ttl_secs, argv)
            }
            Kind::ElectPostgres { url } | Kind::ElectOn { url } => {
                let mut c = elect_run(support::elect(), url, lock, ttl_secs, argv);
                c.env("PGPASSWORD", crate::stores::postgres::PASSWORD);
                c
            }
            Kind::ElectAt {
                program,
                url,
                postgres,
            } => {
                let mut elect = Command::new(program);
                elect
                    .env_remove("ELECT_STORE")
                    .env_remove("ETCDCTL_ENDPOINTS");
                let ttl = if url.starts_with("file:") {
                    None
                } else {
                    ttl_secs
                };
                let mut c = elect_run(elect, url, lock, ttl, argv);
                if *postgres {
                    c.env("PGPASSWORD", crate::stores::postgres::PASSWORD);
                }
                c
            }
            Kind::EtcdctlLock { endpoint } => {
                let mut c = Command::new(
                    std::env::var_os("ELECT_TEST_ETCDCTL").unwrap_or_else(|| "etcdctl".into()),
                );
                c.env("ETCDCTL_API", "3")
                    .args(["--endpoints", endpoint, "lock"]);
                if let Some(ttl) = ttl_secs {
                    c.arg(format!("--ttl={ttl}"));
                }
                c.arg(lock).arg("--").args(argv);
                c
            }
            Kind::Flock { dir } => {
                let mut c = Command::new("flock");
                c.arg(dir.join(lock.replace('/', "_"))).args(argv);
                c
            }
        }
    }
}

fn elect_run(
    mut c: Command,
    store: &str,
    lock: &str,
    ttl_secs: Option<u64>,
    argv: &[&str],
) -> Command {
    c.args(["run", "--store", store, "--lock", lock]);
    if let Some(ttl) = ttl_secs {
        c.arg(format!("--ttl={ttl}s"));
    }
    c.arg("--").args(argv);
    c
}

/// elect and the tool it is measured against, on the same store.
pub struct Pair {
    pub store: &'static str,
    pub elect: Locker,
    pub reference: Locker,
}

/// The pairs of the cycle figure: etcd always; the file store once elect
/// accepts `--store file:DIR` (probed by running it), else a note says why not.
/// With `ELECT_BENCH_AGAINST=PATH`, each pair's reference tool is the elect
/// at PATH instead (see [`against`]).
pub fn pairs(etcd: &Etcd, file_dir: &Path) -> (Vec<Pair>, Vec<String>) {
    let (mut pairs, notes) = tools(etcd, file_dir);
    if let Some(program) = against() {
        for pair in &mut pairs {
            pair.reference = Locker::elect_at(&program, &pair.elect);
        }
    }
    (pairs, notes)
}

/// `ELECT_BENCH_AGAINST`: an earlier build of elect to measure this one
/// against, alternating run by run, in place of the tools it replaces.
pub fn against() -> Option<PathBuf> {
    std::env::var_os("ELECT_BENCH_AGAINST")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

fn tools(etcd: &Etcd, file_dir: &Path) -> (Vec<Pair>, Vec<String>) {
    let mut pairs = vec![Pair {
        store: "etcd",
        elect: Locker::elect_etcd(etcd),
        reference: Locker::etcdctl_lock(etcd),
    }];
    let mut notes = Vec::new();
    let file = Locker::elect_file(file_dir);
    let probe = file
        .command("probe", None, &["true"])
        .stdin(std::process::Stdio::null())
        .output();
    match probe {
        Ok(out) if out.status.success() => pairs.push(Pair {
            store: "file",
            elect: file,
            reference: Locker::flock(file_dir),
        }),
        Ok(out) => notes.push(format!(
            "file store skipped: `elect run --store file:DIR` exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => notes.push(format!("file store skipped: cannot run elect: {e}")),
    }
    (pairs, notes)
}
