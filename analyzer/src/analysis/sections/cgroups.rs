//! cgroups: which control groups each device's IO is charged to. Where the trace has owners
//! (format version 5, the io controller on the unified hierarchy), as the block layer charges
//! it: the bio's blkcg, so written-back pages count for the cgroup that dirtied them (where
//! the kernel's cgroup writeback runs). Else the submitting task's cgroup v2 at submission
//! (from version 3): written-back pages count where the kernel's flusher runs (the root).

use std::collections::HashMap;
use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::StatGroup;

use super::{Names, Section, SectionDef};
use crate::analysis::labels::UnnamedCgroup;
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "cgroups",
    new,
    text,
    html,
};

/// Cgroups listed per device; the rest are summed in one line.
const TOP: usize = 10;

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    devices: Vec<DeviceModel>,
    /// "owner" when IOs are charged to the cgroup the block layer charged them to; absent
    /// (the submitter's) otherwise.
    #[serde(skip_serializing_if = "String::is_empty")]
    charged_to: String,
    /// Why written-back pages are not charged to the cgroup that dirtied them, when the trace
    /// says (the tracer's host had no cgroup writeback).
    #[serde(skip_serializing_if = "String::is_empty")]
    note: String,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    /// The top cgroups by IOs, then (when there are more) `path` "(others)".
    cgroups: Vec<CgroupModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct CgroupModel {
    path: String,
    id: u64,
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
    pct_ios: f64,
    pct_bytes: f64,
    /// p99 of the total latency (submission to completion), microseconds (HDR histogram,
    /// 3 significant digits).
    p99_total_us: f64,
    /// Of `ios` and `bytes`, those a task of another cgroup submitted for this one (pages it
    /// dirtied, written back by the kernel's flusher); with owners only.
    #[serde(skip_serializing_if = "is_zero")]
    on_behalf_ios: u64,
    #[serde(skip_serializing_if = "is_zero")]
    on_behalf_bytes: u64,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if signature"
)]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Default)]
struct Tally {
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
    on_behalf_ios: u64,
    on_behalf_bytes: u64,
    /// Total latencies in the HDR histogram's buckets (3 significant digits), counted on the
    /// per-record path without the histogram's own bookkeeping.
    total_ns: HdrCounts,
}

#[derive(Default)]
struct Cgroups {
    /// Per (device, cgroup): its tally's index.
    index: HashMap<(u32, u64), usize>,
    tallies: Vec<((u32, u64), Tally)>,
    /// The last record's key and tally: consecutive records mostly share them.
    last: Option<((u32, u64), usize)>,
    any_known: bool,
    /// The trace carries owners: charge IOs to them.
    owners: bool,
    note: String,
}

fn new(_: &Options, header: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    let owners = header.owner_cgroups.as_ref();
    Box::new(Cgroups {
        owners: owners.is_some_and(|o| o.tracked),
        note: owners
            .filter(|o| !o.writeback)
            .map(|o| o.reason.clone())
            .unwrap_or_default(),
        ..Cgroups::default()
    })
}

impl Section for Cgroups {
    fn chunk(&mut self, records: &[IoRecord]) {
        let owners = self.owners;
        let charged = |r: &IoRecord| {
            if owners { r.charged_cgroup() } else { r.cgroup }
        };
        // By runs of one (device, cgroup) (consecutive records mostly share them): the tally
        // is found once per run.
        for run in records.chunk_by(|a, b| a.dev == b.dev && charged(a) == charged(b)) {
            let Some(first) = run.first() else { continue };
            let cgroup = charged(first);
            self.any_known |= cgroup != 0;
            let key = (first.dev, cgroup);
            let i = match self.last {
                Some((k, i)) if k == key => i,
                _ => {
                    let n = self.tallies.len();
                    let i = *self.index.entry(key).or_insert(n);
                    if i == n {
                        self.tallies.push((key, Tally::default()));
                    }
                    self.last = Some((key, i));
                    i
                }
            };
            let t = &mut self.tallies[i].1;
            for r in run {
                t.ios += 1;
                t.bytes += u64::from(r.bytes);
                if cgroup != r.cgroup {
                    t.on_behalf_ios += 1;
                    t.on_behalf_bytes += u64::from(r.bytes);
                }
                match r.stat_group() {
                    StatGroup::Read => t.read_ios += 1,
                    StatGroup::Write => t.write_ios += 1,
                    _ => {}
                }
                t.total_ns.record(r.total_ns().max(1));
            }
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        if !self.any_known {
            return Value::Null;
        }
        let mut per_dev: HashMap<u32, Vec<(u64, Tally)>> = HashMap::new();
        for ((dev, id), t) in self.tallies {
            per_dev.entry(dev).or_default().push((id, t));
        }
        let mut devices: Vec<DeviceModel> = per_dev
            .into_iter()
            .map(|(dev, mut list)| {
                let (ios, bytes) = list
                    .iter()
                    .fold((0, 0), |a, (_, t)| (a.0 + t.ios, a.1 + t.bytes));
                list.sort_by(|a, b| b.1.ios.cmp(&a.1.ios).then(a.0.cmp(&b.0)));
                let pct = |a: u64, b: u64| {
                    if b == 0 {
                        0.0
                    } else {
                        a as f64 * 100.0 / b as f64
                    }
                };
                let row = |path: String, id: u64, t: &Tally, h: &Histogram<u64>| CgroupModel {
                    path,
                    id,
                    ios: t.ios,
                    bytes: t.bytes,
                    read_ios: t.read_ios,
                    write_ios: t.write_ios,
                    pct_ios: pct(t.ios, ios),
                    pct_bytes: pct(t.bytes, bytes),
                    p99_total_us: if h.is_empty() {
                        0.0
                    } else {
                        h.value_at_quantile(0.99) as f64 / 1e3
                    },
                    on_behalf_ios: t.on_behalf_ios,
                    on_behalf_bytes: t.on_behalf_bytes,
                };
                let new_hist = || Histogram::<u64>::new(3).expect("3 significant digits");
                let mut rows = Vec::new();
                let mut rest = Tally::default();
                let mut rest_h = new_hist();
                let n = list.len();
                for (i, (id, mut t)) in list.into_iter().enumerate() {
                    if i < TOP || n == TOP + 1 {
                        let path = match id {
                            0 => "(unknown: submitted before tracing or by an older tracer)".into(),
                            _ => (cx.cgroup)(id).unwrap_or_else(|| UnnamedCgroup(id).to_string()),
                        };
                        let mut h = new_hist();
                        t.total_ns.drain_into(&mut h);
                        rows.push(row(path, id, &t, &h));
                    } else {
                        rest.ios += t.ios;
                        rest.bytes += t.bytes;
                        rest.read_ios += t.read_ios;
                        rest.write_ios += t.write_ios;
                        rest.on_behalf_ios += t.on_behalf_ios;
                        rest.on_behalf_bytes += t.on_behalf_bytes;
                        t.total_ns.drain_into(&mut rest_h);
                    }
                }
                if rest.ios > 0 {
                    rows.push(row(format!("({} others)", n - TOP), 0, &rest, &rest_h));
                }
                DeviceModel {
                    name: (cx.device)(dev),
                    cgroups: rows,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            devices,
            charged_to: if self.owners {
                "owner".into()
            } else {
                String::new()
            },
            note: self.note,
        })
        .unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(out, "\ncgroups ({}):", heading(&m))?;
    for d in &m.devices {
        for c in &d.cgroups {
            write!(
                out,
                "  {:<12} {:<40} {:>12} IOs {:>5.1}%  {:>10} {:>5.1}%  p99 {}",
                d.name,
                c.path,
                tracer_common::coverage::thousands(c.ios),
                c.pct_ios,
                crate::report::format::bytes(c.bytes),
                c.pct_bytes,
                crate::report::format::fmt_us(c.p99_total_us)
            )?;
            if c.on_behalf_bytes > 0 {
                write!(
                    out,
                    "  ({} submitted for it by other cgroups, as writeback)",
                    crate::report::format::bytes(c.on_behalf_bytes)
                )?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// How the table charges IOs, in a phrase.
fn heading(m: &Model) -> String {
    match (m.charged_to.as_str(), m.note.as_str()) {
        ("owner", "") => "as the block layer charges them (v2): written-back pages to the cgroup that dirtied them".into(),
        ("owner", note) => format!("as the block layer charges them (v2); {note}"),
        (_, "") => "of the submitting task, v2; written-back pages count where the kernel's flusher runs".into(),
        (_, note) => format!("of the submitting task, v2; written-back pages count where the kernel's flusher runs: {note}"),
    }
}

#[derive(askama::Template)]
#[template(path = "sections/cgroups.html")]
struct Html<'a> {
    m: &'a Model,
    /// The table's caption: how it charges IOs.
    para: String,
    /// Some cgroup had pages written back for it: a column for them.
    on_behalf: bool,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(
        &Html {
            m: &m,
            para: match (m.charged_to.as_str(), m.note.as_str()) {
                ("", "") => "Of the submitting task (cgroup v2); written-back pages count where the kernel's flusher runs.".into(),
                _ => format!("Charged {}.", heading(&m)),
            },
            on_behalf: m
                .devices
                .iter()
                .flat_map(|d| &d.cgroups)
                .any(|c| c.on_behalf_bytes > 0),
        },
        h,
    )
}
