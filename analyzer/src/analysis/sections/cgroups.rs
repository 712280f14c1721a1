//! cgroups: which control groups submitted each device's IO (the submitting task's cgroup v2
//! at submission, as the tracer recorded it from trace format version 3 on). Written-back
//! pages are submitted by kernel threads, so they count where those threads are (the root).

use std::collections::HashMap;
use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::StatGroup;

use super::{Names, Section, SectionDef};
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
}

#[derive(Default)]
struct Tally {
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
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
}

fn new(_: &Options, _: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    Box::<Cgroups>::default()
}

impl Section for Cgroups {
    fn chunk(&mut self, records: &[IoRecord]) {
        for r in records {
            self.any_known |= r.cgroup != 0;
            let key = (r.dev, r.cgroup);
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
            t.ios += 1;
            t.bytes += u64::from(r.bytes);
            match r.stat_group() {
                StatGroup::Read => t.read_ios += 1,
                StatGroup::Write => t.write_ios += 1,
                _ => {}
            }
            t.total_ns.record(r.total_ns().max(1));
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
                            _ => (cx.cgroup)(id).unwrap_or_else(|| format!("(id {id})")),
                        };
                        let mut h = new_hist();
                        t.total_ns.drain_into(&mut h);
                        rows.push(row(path, id, &t, &h));
                    } else {
                        rest.ios += t.ios;
                        rest.bytes += t.bytes;
                        rest.read_ios += t.read_ios;
                        rest.write_ios += t.write_ios;
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
        serde_json::to_value(Model { devices }).unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(
        out,
        "\ncgroups (of the submitting task, v2; written-back pages count where the kernel's flusher runs):"
    )?;
    for d in &m.devices {
        for c in &d.cgroups {
            writeln!(
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
        }
    }
    Ok(())
}

#[derive(askama::Template)]
#[template(path = "sections/cgroups.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}
