//! The benchmark harness: processes, /proc readings,
//! statistics, the tools compared, the stores' servers, and the report
//! and its plot.

pub mod floor;
pub mod locker;
pub mod plot;
pub mod process;
pub mod procfs;
pub mod report;
pub mod served;
pub mod stats;
