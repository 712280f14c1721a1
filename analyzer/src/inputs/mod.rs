//! What comes from outside the analysis: other tools' block traces imported into the trace
//! format, the stress tool's results and the application's log, the time zones they are read
//! in, and synthetic traces with planted truth.

pub mod import;
pub mod stress;
pub mod synth;
pub mod zone;
