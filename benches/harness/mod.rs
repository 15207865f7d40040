//! The benchmark harness: the figures, processes, /proc readings,
//! statistics, the tools compared, the stores' servers, and the report,
//! its plot and the page it is written to.

pub mod figures;
pub mod floor;
pub mod locker;
pub mod page;
pub mod plot;
pub mod process;
pub mod procfs;
pub mod report;
pub mod served;
pub mod stats;
