//! The report model (`model.rs`, the typed form of `report --json`) and its rendering:
//! terminal text, the HTML page (templates in analyzer/templates/), SVG charts, and the
//! formatting helpers they share.

pub mod format;
pub mod html;
pub mod model;
pub mod plots;
pub mod terminal;
pub mod text;
