//! Rendering of the report model: terminal text, the HTML page, SVG charts, and the
//! formatting helpers they share.

pub mod format;
pub mod html;
pub mod model;
pub mod plots;
pub mod text;
