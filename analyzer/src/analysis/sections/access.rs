//! Access pattern: how much of each op's IO on a device is sequential. An IO is sequential
//! when it starts where one of the last [`RECENT`] IOs of the same op on the device ended, or
//! up to [`GAP_SECTORS`] after: several interleaved streams, and IOs that complete in another
//! order than they were submitted (at a queue depth of a few, the next IO of a stream often
//! completes before the one it follows), still count as sequential; everything else is
//! random.

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::op::Op;

use super::{Section, SectionDef};
use crate::analysis::per_device::index;
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "access_pattern",
    new,
    text,
    html,
};

/// How many recent IO ends an IO may continue.
const RECENT: usize = 4;
/// How far after a recent IO's end an IO may start and still continue it: 64 KiB.
const GAP_SECTORS: u64 = 128;

/// The ops told apart (discards and flushes are not a pattern anyone tunes for).
const OPS: [(Op, &str); 2] = [(Op::Read, "read"), (Op::Write, "write")];

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    /// Sequential: starts where one of the previous `recent` IOs of the op on the device ended,
    /// or up to `gap_bytes` after.
    recent: usize,
    gap_bytes: u64,
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    ops: Vec<OpModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct OpModel {
    op: String,
    ios: u64,
    bytes: u64,
    sequential_ios: u64,
    sequential_bytes: u64,
    pct_sequential_ios: f64,
    pct_sequential_bytes: f64,
}

struct Stream {
    /// End sectors of the last IOs, a ring; [`NO_END`] where there was none yet.
    ends: [u64; RECENT],
    next: usize,
    ios: u64,
    bytes: u64,
    sequential_ios: u64,
    sequential_bytes: u64,
}

/// An end no IO continues (a sector this far up does not exist).
const NO_END: u64 = u64::MAX / 2;

impl Default for Stream {
    fn default() -> Self {
        Stream {
            ends: [NO_END; RECENT],
            next: 0,
            ios: 0,
            bytes: 0,
            sequential_ios: 0,
            sequential_bytes: 0,
        }
    }
}

struct Access {
    /// (dev, one stream per op of [`OPS`]).
    devices: Vec<(u32, [Stream; 2])>,
    last: usize,
}

fn new(_: &Options, _: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    Box::new(Access {
        devices: Vec::new(),
        last: 0,
    })
}

impl Access {
    /// The streams of device `dev`, made when first needed.
    fn streams(&mut self, dev: u32) -> &mut [Stream; 2] {
        let i = index(
            &mut self.devices,
            &mut self.last,
            dev,
            |d| d.0,
            || (dev, Default::default()),
        );
        &mut self.devices[i].1
    }
}

impl Section for Access {
    fn chunk(&mut self, records: &[IoRecord]) {
        // By runs of one device (records of a device mostly come together): its streams are
        // found once per run, when a read or write needs them.
        for run in records.chunk_by(|a, b| a.dev == b.dev) {
            let Some(first) = run.iter().position(|r| super::read_or_write(r).is_some()) else {
                continue;
            };
            let streams = self.streams(run[first].dev);
            for r in &run[first..] {
                let Some(k) = super::read_or_write(r) else {
                    continue;
                };
                let s = &mut streams[k];
                let bytes = u64::from(r.bytes);
                s.ios += 1;
                s.bytes += bytes;
                // The latest end first (a stream continuing itself), then all of them, without
                // an early exit, which the compiler unrolls.
                let latest = s.ends[(s.next + RECENT - 1) % RECENT];
                let continues = r.sector.wrapping_sub(latest) <= GAP_SECTORS
                    || s.ends.iter().fold(false, |c, &end| {
                        c | (r.sector.wrapping_sub(end) <= GAP_SECTORS)
                    });
                if continues {
                    s.sequential_ios += 1;
                    s.sequential_bytes += bytes;
                }
                s.ends[s.next] = r.sector.wrapping_add(bytes.div_ceil(512));
                s.next = (s.next + 1) % RECENT;
            }
        }
    }

    fn finish(self: Box<Self>, cx: &super::Names) -> Value {
        let name = cx.device;
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        let mut devices: Vec<DeviceModel> = self
            .devices
            .iter()
            .map(|(dev, streams)| DeviceModel {
                name: name(*dev),
                ops: OPS
                    .iter()
                    .zip(streams)
                    .filter(|(_, s)| s.ios > 0)
                    .map(|((_, op), s)| OpModel {
                        op: (*op).to_string(),
                        ios: s.ios,
                        bytes: s.bytes,
                        sequential_ios: s.sequential_ios,
                        sequential_bytes: s.sequential_bytes,
                        pct_sequential_ios: pct(s.sequential_ios, s.ios),
                        pct_sequential_bytes: pct(s.sequential_bytes, s.bytes),
                    })
                    .collect(),
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            recent: RECENT,
            gap_bytes: GAP_SECTORS * 512,
            devices,
        })
        .unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(
        out,
        "\naccess pattern (sequential: an IO that starts where one of the {} before it of its op ended, or up to {} after):",
        m.recent,
        crate::analysis::sizes::human(m.gap_bytes)
    )?;
    for d in &m.devices {
        let ops: Vec<String> = d
            .ops
            .iter()
            .map(|o| {
                format!(
                    "{} {:.1}% sequential ({:.1}% of bytes)",
                    o.op, o.pct_sequential_ios, o.pct_sequential_bytes
                )
            })
            .collect();
        writeln!(out, "  {:<12} {}", d.name, ops.join(", "))?;
    }
    Ok(())
}

#[derive(askama::Template)]
#[template(path = "sections/access.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}
