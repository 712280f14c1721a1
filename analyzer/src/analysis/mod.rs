//! What is computed from the records: the streaming summary (`summary/`), the
//! sections it feeds, time series, bursts, busy time, size classes, sampling noise, the
//! what-if array model, and the names of what a trace leaves unnamed (`labels.rs`: shared with
//! the export).

pub mod bursts;
pub mod busy;
pub mod classes;
pub mod labels;
pub mod loghist;
pub mod noise;
pub mod per_device;
pub mod sections;
pub mod series;
pub mod sizes;
pub mod summary;
pub mod whatif;
