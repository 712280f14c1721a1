//! Commands that work on reports or traces beyond `report` itself: `check` (CI gate),
//! `compare` (A/B side by side) and `export` (one module per format).

pub mod check;
pub mod compare;
pub mod export;
