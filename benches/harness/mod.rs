//! The benchmark harness: processes, /proc readings, etcd over HTTP,
//! statistics, the tools compared, and the report.

pub mod etcd_http;
pub mod floor;
pub mod locker;
pub mod process;
pub mod procfs;
pub mod report;
pub mod stats;
