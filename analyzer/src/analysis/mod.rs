//! What is computed from the records: the streaming summary (the engine, `summary.rs`), the
//! sections it feeds, time series, bursts, busy time, size classes, sampling noise and the
//! what-if array model.

pub mod bursts;
pub mod busy;
pub mod classes;
pub mod loghist;
pub mod noise;
pub mod sections;
pub mod series;
pub mod sizes;
pub mod summary;
pub mod whatif;
