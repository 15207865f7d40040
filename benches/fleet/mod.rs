//! The fleet figures: what elect costs a store and a machine when many
//! use it at once, and how short a lease can be on a busy machine.
//!
//! - [`holders`]: N elects, each holding a lock of its own, for a while;
//! - [`waiters`]: N waiters queued on one lock, and handovers among them;
//! - [`short_lease`]: the shortest TTL a holder keeps on saturated cores,
//!   and failover at it.
//!
//! Each runs against every store of [`stores`], a server started for the
//! figure; [`Growth`] keeps how each figure grows with N for the plot.

pub mod holders;
pub mod short_lease;
pub mod waiters;

use std::path::Path;

use crate::harness::plot::{self, Panel, Series};
use crate::harness::served::Served;
use crate::support::stores::KubeStore;
use crate::support::{Etcd, Postgres, ZooKeeper};

/// The stores the fleet figures run against, by name.
pub const STORES: [&str; 4] = ["etcd", "postgres", "zookeeper", "k8s"];

/// `ELECT_BENCH_STORES` (a comma-separated part of [`STORES`]), or all.
pub fn stores() -> Vec<&'static str> {
    let chosen = std::env::var("ELECT_BENCH_STORES").unwrap_or_default();
    if chosen.is_empty() {
        return STORES.to_vec();
    }
    chosen
        .split(',')
        .map(|name| {
            STORES
                .into_iter()
                .find(|s| *s == name.trim())
                .unwrap_or_else(|| panic!("unknown store {name:?}; the stores are {STORES:?}"))
        })
        .collect()
}

/// A figure that runs the same way on every store.
pub trait OnEvery {
    fn on<S: Served>(&mut self);
}

/// Run `figure` on each chosen store in turn.
pub fn on_every(figure: &mut impl OnEvery) {
    for store in stores() {
        match store {
            "etcd" => figure.on::<Etcd>(),
            "postgres" => figure.on::<Postgres>(),
            "zookeeper" => figure.on::<ZooKeeper>(),
            _ => figure.on::<KubeStore>(),
        }
    }
}

/// What each fleet figure came to at each N, on each store: the plot's data.
#[derive(Default)]
pub struct Growth {
    pub holders: Vec<(&'static str, holders::Outcome)>,
    pub waiters: Vec<(&'static str, waiters::Outcome)>,
}

impl Growth {
    fn series<T>(
        rows: &[(&'static str, T)],
        n: impl Fn(&T) -> usize,
        value: impl Fn(&T) -> f64,
    ) -> Vec<Series> {
        let mut series: Vec<Series> = Vec::new();
        for (store, row) in rows {
            let point = (n(row) as f64, value(row));
            match series.iter_mut().find(|s| s.name == *store) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    name: store.to_string(),
                    points: vec![point],
                }),
            }
        }
        series
    }

    /// The panels: per holder, then per handover.
    fn panels(&self) -> Vec<Panel> {
        let h = &self.holders;
        let w = &self.waiters;
        let panel = |title: &str, series, goal| Panel {
            title: title.to_string(),
            series,
            goal,
        };
        vec![
            panel(
                "holders: store requests / renewal floor",
                Self::series(h, |o| o.n, |o| o.requests / o.floor),
                Some(1.0),
            ),
            panel(
                "holders: PSS per holder, MiB",
                Self::series(h, |o| o.n, |o| o.pss_mib),
                Some(2.5),
            ),
            panel(
                "holders: wake-ups per holder per minute",
                Self::series(h, |o| o.n, |o| o.wakeups),
                Some(30.0),
            ),
            panel(
                "holders: store CPU, % of a core",
                Self::series(h, |o| o.n, |o| o.cpu * 100.0),
                None,
            ),
            panel(
                "waiters: handover, ms",
                Self::series(w, |o| o.n, |o| o.handover_ms),
                None,
            ),
            panel(
                "waiters: store requests per handover",
                Self::series(w, |o| o.n, |o| o.requests),
                None,
            ),
        ]
    }

    /// Write the plot to `path`, if any fleet figure ran.
    pub fn plot(&self, path: &Path, title: &str) -> Option<std::io::Result<()>> {
        if self.holders.is_empty() && self.waiters.is_empty() {
            return None;
        }
        let panels: Vec<Panel> = self
            .panels()
            .into_iter()
            .filter(|p| !p.series.is_empty())
            .collect();
        let write = || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, plot::svg(title, &panels))
        };
        Some(write())
    }

    /// The growth table, in Markdown, as the README shows it.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if !self.holders.is_empty() {
            out.push_str(
                "| store | holders | lost | requests/s (floor) | store CPU | PSS/holder | wake-ups/holder/min | preempted/holder/min |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|\n",
            );
            for (store, o) in &self.holders {
                out.push_str(&format!(
                    "| {store} | {} | {} | {:.1} ({:.1}) | {:.1}% | {:.2} MiB | {:.1} | {:.1} |\n",
                    o.n,
                    o.lost,
                    o.requests,
                    o.floor,
                    o.cpu * 100.0,
                    o.pss_mib,
                    o.wakeups,
                    o.preempted
                ));
            }
        }
        if !self.waiters.is_empty() {
            out.push_str(
                "\n| store | waiters | handover | requests/handover | PSS/waiter | store PSS/waiter |\n\
                 |---|---:|---:|---:|---:|---:|\n",
            );
            for (store, o) in &self.waiters {
                out.push_str(&format!(
                    "| {store} | {} | {:.1} ms | {:.1} | {:.2} MiB | {:.2} MiB |\n",
                    o.n, o.handover_ms, o.requests, o.pss_mib, o.store_pss_mib
                ));
            }
        }
        out
    }
}
