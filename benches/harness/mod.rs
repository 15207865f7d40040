//! The benchmark harness: processes, /proc readings,
//! statistics, the tools compared, and the report.

pub mod floor;
pub mod locker;
pub mod process;
pub mod procfs;
pub mod report;
pub mod stats;
