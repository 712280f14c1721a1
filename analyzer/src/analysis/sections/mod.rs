//! The extension point for analyses. A section is fed the trace's records chunk by chunk (up
//! to a chunk of the file at a time, so dynamic dispatch stays out of the per-record loop),
//! puts its part of the report into the model (`JsonReport::sections`, under its name), and
//! renders that part as text and as HTML from the model alone, so `report --from-json` shows
//! it too. A new section is one file here and one line in [`SECTIONS`], and its HTML a
//! template in analyzer/templates/sections/ (auto-escaped; `access.rs` and
//! `templates/sections/access.html` are the example).

use std::io::Write;

use serde_json::Value;
use tracer_common::format::{IoRecord, TraceHeader};

use crate::analysis::series::Options;

mod access;
pub(crate) mod arrays;
mod cgroups;
mod files;
pub mod heatmaps;
mod hwqueues;
mod phases;
mod shape;

/// One kind of section: how to make it and how to show what it made.
pub struct SectionDef {
    /// Its key in the report's `sections`.
    pub name: &'static str,
    /// Made once the trace's header is read (before its records).
    pub new: fn(&Options, &TraceHeader) -> Box<dyn Section>,
    /// The terminal report's lines for it (after the devices').
    pub text: fn(&Value, &mut dyn Write) -> std::io::Result<()>,
    /// The HTML report's part for it (after the devices'): a template rendered with
    /// `render_html`, which escapes every string from the trace (or, written by hand, each
    /// one through [`crate::report::format::escape`]).
    pub html: fn(&Value, &mut String) -> std::fmt::Result,
}

/// A running analysis.
pub trait Section {
    /// The records of one chunk, in file order (nearly completion order), without those whose
    /// times cannot belong to the run.
    fn chunk(&mut self, records: &[IoRecord]);
    /// Its part of the report.
    fn finish(self: Box<Self>, cx: &Names) -> Value;
}

/// What a section may name by the trace's tables once all records are read.
pub struct Names<'a> {
    /// What the summary counted per device (sizes, latency histograms per op and phase), so
    /// a section shows it instead of counting it again.
    pub devices: &'a std::collections::BTreeMap<u32, crate::analysis::summary::DeviceStats>,
    /// A device's name from its `dev_t`.
    pub device: &'a dyn Fn(u32) -> String,
    /// A cgroup's path from its id, if the trace named it.
    pub cgroup: &'a dyn Fn(u64) -> Option<String>,
    /// A file by its id ([`IoRecord::file_id`]): file system, inode, and its path if the
    /// trace named it.
    pub file: &'a dyn Fn(u32) -> Option<(u32, u64, Option<String>)>,
    /// The md arrays over the traced disks, from the header.
    pub arrays: &'a [tracer_common::format::ArrayInfo],
    /// /proc/diskstats at the start (header) and the end (trailer) of the run; the end is
    /// empty for a file cut short.
    pub diskstats: (
        &'a [tracer_common::diskstats::DiskStats],
        &'a [tracer_common::diskstats::DiskStats],
    ),
}

/// Every section, in the order the reports show them.
pub const SECTIONS: &[SectionDef] = &[
    access::DEF,
    phases::DEF,
    shape::DEF,
    cgroups::DEF,
    files::DEF,
    arrays::DEF,
    hwqueues::DEF,
    heatmaps::DEF,
];

/// The stream of a read (0) or write (1) that carries data, which the access, shape and heatmap
/// sections follow; None for other ops and empty IOs.
#[inline]
fn read_or_write(r: &IoRecord) -> Option<usize> {
    match r.op {
        tracer_common::op::Op::Read if r.bytes != 0 => Some(0),
        tracer_common::op::Op::Write if r.bytes != 0 => Some(1),
        _ => None,
    }
}

/// A section's part of the HTML report from its template (analyzer/templates/sections/).
fn render_html(t: &impl askama::Template, h: &mut String) -> std::fmt::Result {
    t.render_into(h).map_err(|_| std::fmt::Error)
}

/// A new instance of every section.
pub fn start(opts: &Options, header: &TraceHeader) -> Vec<(&'static str, Box<dyn Section>)> {
    SECTIONS
        .iter()
        .map(|d| (d.name, (d.new)(opts, header)))
        .collect()
}
