//! md arrays: how an array's IO spread over its member disks (the trace header records the
//! layout when the traced disks belong to one). md itself issues no requests; its members
//! do, so the members' records are the array's IO as the disks saw it.

use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::{IoRecord, TraceHeader};
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::StatGroup;

use super::{Names, Section, SectionDef};
use crate::analysis::per_device::index;
use crate::analysis::series::Options;

pub(crate) const DEF: SectionDef = SectionDef {
    name: "arrays",
    new,
    text,
    html,
};

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    arrays: Vec<ArrayModel>,
}

/// One array and its members: the section's model, and `blkprof whatif`'s ([`crate::analysis::whatif`]), so
/// that a modelled array reads as a traced one.
#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
pub(crate) struct ArrayModel {
    pub name: String,
    pub level: String,
    pub chunk_bytes: u64,
    pub ios: u64,
    pub bytes: u64,
    /// The busiest member's IOs over the members' mean: 1.00 when the IO spread evenly.
    pub imbalance_ios: f64,
    pub members: Vec<MemberModel>,
}

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(crate) struct MemberModel {
    pub disk: String,
    pub slot: Option<u32>,
    pub ios: u64,
    pub bytes: u64,
    pub read_ios: u64,
    pub write_ios: u64,
    pub pct_ios: f64,
    pub pct_bytes: f64,
    pub mean_request_bytes: f64,
    /// Requests in the OS at each IO's issue (this one included): mean and most.
    pub queue_depth_mean: f64,
    pub queue_depth_max: u32,
    /// Total latency (submission to completion), microseconds; none where nothing measured
    /// it (a modelled array).
    pub p99_total_us: Option<f64>,
}

impl ArrayModel {
    /// The array of these members (their counts filled in): the totals, each member's share
    /// and the imbalance.
    pub(crate) fn new(
        name: String,
        level: String,
        chunk_bytes: u64,
        mut members: Vec<MemberModel>,
    ) -> ArrayModel {
        let ios: u64 = members.iter().map(|m| m.ios).sum();
        let bytes: u64 = members.iter().map(|m| m.bytes).sum();
        for m in &mut members {
            m.pct_ios = if ios == 0 {
                0.0
            } else {
                m.ios as f64 * 100.0 / ios as f64
            };
            m.pct_bytes = if bytes == 0 {
                0.0
            } else {
                m.bytes as f64 * 100.0 / bytes as f64
            };
            m.mean_request_bytes = if m.ios == 0 {
                0.0
            } else {
                m.bytes as f64 / m.ios as f64
            };
        }
        let most = members.iter().map(|m| m.ios).max().unwrap_or(0);
        let mean = ios as f64 / members.len().max(1) as f64;
        ArrayModel {
            name,
            level,
            chunk_bytes,
            ios,
            bytes,
            imbalance_ios: if mean > 0.0 { most as f64 / mean } else { 0.0 },
            members,
        }
    }
}

#[derive(Default)]
struct Tally {
    dev: u32,
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
    inflight_sum: u64,
    inflight_max: u32,
    total_ns: HdrCounts,
}

/// Per device (few): a short list searched from the last one used.
#[derive(Default)]
struct Arrays {
    devs: Vec<Tally>,
    last: usize,
}

fn new(_: &Options, header: &TraceHeader) -> Box<dyn Section> {
    if header.arrays.is_empty() {
        // Nothing to group: no per-record work.
        return Box::new(NoArrays);
    }
    Box::<Arrays>::default()
}

/// A trace without md arrays.
struct NoArrays;

impl Section for NoArrays {
    fn chunk(&mut self, _: &[IoRecord]) {}
    fn finish(self: Box<Self>, _: &Names) -> Value {
        Value::Null
    }
}

impl Section for Arrays {
    fn chunk(&mut self, records: &[IoRecord]) {
        for r in records {
            let i = index(
                &mut self.devs,
                &mut self.last,
                r.dev,
                |t| t.dev,
                || Tally {
                    dev: r.dev,
                    ..Tally::default()
                },
            );
            let t = &mut self.devs[i];
            t.ios += 1;
            t.bytes += u64::from(r.bytes);
            match r.stat_group() {
                StatGroup::Read => t.read_ios += 1,
                StatGroup::Write => t.write_ios += 1,
                _ => {}
            }
            t.inflight_sum += u64::from(r.os_inflight);
            t.inflight_max = t.inflight_max.max(r.os_inflight);
            t.total_ns.record(r.total_ns().max(1));
        }
    }

    fn finish(mut self: Box<Self>, cx: &Names) -> Value {
        if cx.arrays.is_empty() {
            return Value::Null;
        }
        let mut arrays = Vec::new();
        for a in cx.arrays {
            let mut members: Vec<MemberModel> = Vec::new();
            for m in &a.members {
                let t = self.devs.iter_mut().find(|t| (cx.device)(t.dev) == m.disk);
                let mut row = MemberModel {
                    disk: m.disk.clone(),
                    slot: m.slot,
                    ..MemberModel::default()
                };
                if let Some(t) = t {
                    let mut h = Histogram::<u64>::new(3).expect("3 significant digits");
                    t.total_ns.drain_into(&mut h);
                    row.ios = t.ios;
                    row.bytes = t.bytes;
                    row.read_ios = t.read_ios;
                    row.write_ios = t.write_ios;
                    if t.ios > 0 {
                        row.queue_depth_mean = t.inflight_sum as f64 / t.ios as f64;
                        row.p99_total_us = Some(h.value_at_quantile(0.99) as f64 / 1e3);
                    }
                    row.queue_depth_max = t.inflight_max;
                }
                members.push(row);
            }
            arrays.push(ArrayModel::new(
                a.name.clone(),
                a.level.clone(),
                a.chunk_bytes,
                members,
            ));
        }
        serde_json::to_value(Model { arrays }).unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.arrays.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    for a in &m.arrays {
        write_text(out, a)?;
    }
    Ok(())
}

/// An array's lines in the terminal report (also `blkprof whatif`'s): volumes as the report
/// gives them (decimal units), request sizes as block sizes are quoted.
pub(crate) fn write_text(out: &mut dyn Write, a: &ArrayModel) -> std::io::Result<()> {
    writeln!(
        out,
        "\narray {} ({}, chunk {}): {} IOs, {} over {} members; busiest member {:.2}x the mean",
        a.name,
        a.level,
        crate::analysis::sizes::human(a.chunk_bytes),
        tracer_common::coverage::thousands(a.ios),
        crate::report::format::bytes(a.bytes),
        a.members.len(),
        a.imbalance_ios
    )?;
    for mb in &a.members {
        writeln!(
            out,
            "  {:<12} slot {:<4} {:>12} IOs {:>5.1}%  {:>10} {:>5.1}%  mean {:>8}  queue {:.1} (max {})  p99 {}",
            mb.disk,
            mb.slot.map_or_else(|| "-".to_string(), |s| s.to_string()),
            tracer_common::coverage::thousands(mb.ios),
            mb.pct_ios,
            crate::report::format::bytes(mb.bytes),
            mb.pct_bytes,
            crate::analysis::sizes::human(crate::numeric::f64_to_u64_saturating(
                mb.mean_request_bytes
            )),
            mb.queue_depth_mean,
            mb.queue_depth_max,
            p99(mb)
        )?;
    }
    Ok(())
}

fn p99(mb: &MemberModel) -> String {
    mb.p99_total_us
        .map_or_else(|| "-".to_string(), crate::report::format::fmt_us)
}

#[derive(askama::Template)]
#[template(path = "sections/arrays.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::format::{ArrayInfo, ArrayMember};
    use tracer_common::op::Op;

    #[test]
    fn members_are_grouped_in_slot_order_with_their_share() {
        let (a, b, other) = (
            tracer_common::dev_join(259, 1),
            tracer_common::dev_join(259, 2),
            tracer_common::dev_join(8, 0),
        );
        let with_md = TraceHeader {
            arrays: vec![ArrayInfo::default()],
            ..TraceHeader::default()
        };
        let mut s = new(&Options::default(), &with_md);
        let rec = |dev, op, bytes, q| IoRecord {
            dev,
            op,
            bytes,
            os_inflight: q,
            enter_ns: 1_000,
            issue_ns: 2_000,
            complete_ns: 101_000,
            ..IoRecord::default()
        };
        let mut rs = Vec::new();
        for i in 0..300u32 {
            rs.push(rec(a, Op::Read, 65536, 1 + i % 3));
        }
        for _ in 0..100 {
            rs.push(rec(b, Op::Write, 131_072, 4));
        }
        rs.push(rec(other, Op::Read, 4096, 1));
        s.chunk(&rs);
        let name = |d: u32| match tracer_common::dev_split(d) {
            (259, m) => format!("nvme{m}n1"),
            _ => "sda".to_string(),
        };
        let arrays = [ArrayInfo {
            name: "md0".into(),
            level: "raid0".into(),
            chunk_bytes: 65536,
            members: vec![
                ArrayMember {
                    disk: "nvme2n1".into(),
                    partition: None,
                    slot: Some(0),
                },
                ArrayMember {
                    disk: "nvme1n1".into(),
                    partition: None,
                    slot: Some(1),
                },
            ],
        }];
        let v = s.finish(&Names {
            devices: &std::collections::BTreeMap::default(),
            diskstats: (&[], &[]),
            device: &name,
            cgroup: &|_| None,
            file: &|_| None,
            arrays: &arrays,
        });
        let m = model(&v).unwrap();
        let md = &m.arrays[0];
        assert_eq!((md.ios, md.bytes), (400, 300 * 65536 + 100 * 131_072));
        assert_eq!(md.imbalance_ios, 1.5, "300 of a mean 200");
        let rows: Vec<(&str, u64, f64)> = md
            .members
            .iter()
            .map(|m| (m.disk.as_str(), m.ios, m.pct_ios))
            .collect();
        assert_eq!(rows, [("nvme2n1", 100, 25.0), ("nvme1n1", 300, 75.0)]);
        assert_eq!(md.members[1].queue_depth_mean, 2.0);
        assert_eq!(md.members[1].queue_depth_max, 3);
        assert_eq!(md.members[0].mean_request_bytes, 131_072.0);
        assert!((md.members[0].p99_total_us.unwrap() - 100.0).abs() < 0.1);
        let mut t = Vec::new();
        text(&v, &mut t).unwrap();
        let t = String::from_utf8(t).unwrap();
        assert!(t.contains("array md0 (raid0, chunk 64KB)"), "{t}");
        let mut h = String::new();
        html(&v, &mut h).unwrap();
        assert!(h.contains("<h3>Array md0"));
        // No arrays in the header: no section.
        let s = new(&Options::default(), &with_md);
        assert!(
            s.finish(&Names {
                devices: &std::collections::BTreeMap::default(),
                diskstats: (&[], &[]),
                device: &name,
                cgroup: &|_| None,
                file: &|_| None,
                arrays: &[]
            })
            .is_null()
        );
    }
}
