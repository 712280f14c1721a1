//! Phase table, after blktrace's btt: per device and op, the time an IO spent queued in the OS
//! (Q2D: entering the queue to issue), at the device (D2C: issue to completion) and in all
//! (Q2C); per device the seek distance between consecutive IOs in submission order and the
//! time with at least one IO in the OS (active) against none (idle).
//!
//! Records arrive in completion order (nearly: CPUs race to the ring). Seeks and active time
//! want submission order, which a window of the last [`WINDOW`] IOs of each device restores:
//! an IO submitted before one already taken from the window is taken late, counted in
//! `out_of_order`, and its seek and idle time are as if it were submitted then.
//!
//! btt's merge ratio (bios queued per request) needs the bios, which the probe does not see:
//! the trace holds requests only, so it is not reported.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::{Op, StatGroup};

use super::{Names, Section, SectionDef};
use crate::html::escape;
use crate::series::Options;

pub const DEF: SectionDef = SectionDef {
    name: "phases",
    new,
    text,
    html,
};

/// IOs of a device held to restore submission order from completion order.
const WINDOW: usize = 64;

/// Why there is no merge ratio, in every output that would show one.
const NO_MERGES: &str = "merge ratio (bios per request): not measured, the trace records requests, not the bios merged into them";

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    /// IOs per device held to restore submission order.
    window: usize,
    /// Why btt's merge ratio is absent.
    merge_ratio: String,
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    ops: Vec<OpModel>,
    seek: SeekModel,
    /// From the first IO's entry to the last completion.
    span_s: f64,
    /// With at least one IO in the OS (entered, not completed).
    active_s: f64,
    idle_s: f64,
    pct_active: f64,
    /// IOs taken from the window after one submitted later (submission order not restored).
    out_of_order: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct OpModel {
    op: String,
    ios: u64,
    q2d_us: PhaseModel,
    d2c_us: PhaseModel,
    q2c_us: PhaseModel,
}

/// Microseconds; quantiles from an HDR histogram (3 significant digits), the rest exact.
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct PhaseModel {
    /// IOs with this phase (Q2D and D2C: those issued to the device).
    ios: u64,
    min: f64,
    avg: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct SeekModel {
    /// Pairs of consecutive IOs with data (flushes have none).
    seeks: u64,
    /// |start - end of the IO before|, in 512-byte sectors.
    mean_sectors: f64,
    /// HDR histogram (exact below 2048 sectors, 3 significant digits above).
    median_sectors: f64,
    /// Seeks of 0 sectors: the IO starts where the one submitted before it ended.
    pct_zero: f64,
}

struct Phase {
    ios: u64,
    sum_ns: u64,
    min_ns: u64,
    max_ns: u64,
    counts: HdrCounts,
}

impl Default for Phase {
    fn default() -> Self {
        Phase {
            ios: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            counts: HdrCounts::default(),
        }
    }
}

impl Phase {
    #[inline]
    fn record(&mut self, ns: u64) {
        self.ios += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.counts.record(ns.max(1));
    }

    fn model(mut self) -> PhaseModel {
        if self.ios == 0 {
            return PhaseModel::default();
        }
        let mut h = Histogram::<u64>::new(3).expect("3 significant digits");
        self.counts.drain_into(&mut h);
        let us = |ns: u64| ns as f64 / 1e3;
        PhaseModel {
            ios: self.ios,
            min: us(self.min_ns),
            avg: self.sum_ns as f64 / self.ios as f64 / 1e3,
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(self.max_ns),
        }
    }
}

#[derive(Default)]
struct OpPhases {
    q2d: Phase,
    d2c: Phase,
    q2c: Phase,
}

#[derive(Clone, Copy)]
struct Pending {
    enter_ns: u64,
    complete_ns: u64,
    sector: u64,
    sectors: u64,
}

struct Device {
    dev: u32,
    /// Per [`StatGroup`] (read, write, discard, flush).
    ops: [OpPhases; 4],
    /// The latest IOs, by entry time.
    window: VecDeque<Pending>,
    last_enter_ns: u64,
    out_of_order: u64,
    /// The active run being extended, and the active time of those before it.
    run: Option<(u64, u64)>,
    active_ns: u64,
    first_ns: u64,
    last_ns: u64,
    /// End sector of the IO with data taken before.
    prev_end: Option<u64>,
    seeks: u64,
    seek_sum: u128,
    seek_zero: u64,
    seek_counts: HdrCounts,
}

impl Device {
    fn new(dev: u32) -> Device {
        Device {
            dev,
            ops: Default::default(),
            window: VecDeque::with_capacity(WINDOW + 1),
            last_enter_ns: 0,
            out_of_order: 0,
            run: None,
            active_ns: 0,
            first_ns: u64::MAX,
            last_ns: 0,
            prev_end: None,
            seeks: 0,
            seek_sum: 0,
            seek_zero: 0,
            seek_counts: HdrCounts::default(),
        }
    }

    /// Take an IO in submission order.
    fn take(&mut self, p: Pending) {
        if p.enter_ns < self.last_enter_ns {
            self.out_of_order += 1;
        }
        self.last_enter_ns = self.last_enter_ns.max(p.enter_ns);
        self.run = Some(match self.run {
            Some((s, e)) if p.enter_ns <= e => (s.min(p.enter_ns), e.max(p.complete_ns)),
            Some((s, e)) => {
                self.active_ns = self.active_ns.saturating_add(e - s);
                (p.enter_ns, p.complete_ns)
            }
            None => (p.enter_ns, p.complete_ns),
        });
        if p.sectors > 0 {
            if let Some(prev) = self.prev_end {
                let d = p.sector.abs_diff(prev);
                self.seeks += 1;
                self.seek_sum += u128::from(d);
                self.seek_zero += u64::from(d == 0);
                self.seek_counts.record(d);
            }
            self.prev_end = Some(p.sector.saturating_add(p.sectors));
        }
    }
}

#[derive(Default)]
struct Phases {
    devices: Vec<Device>,
    last: usize,
}

fn new(_: &Options) -> Box<dyn Section> {
    Box::<Phases>::default()
}

impl Section for Phases {
    fn chunk(&mut self, records: &[IoRecord]) {
        for r in records {
            let g = r.stat_group();
            // An empty flush the flush machinery absorbed never reached the device (the
            // report's `flush-absorbed`).
            if r.op == Op::Flush && g != StatGroup::Flush {
                continue;
            }
            if self.devices.get(self.last).is_none_or(|d| d.dev != r.dev) {
                self.last = match self.devices.iter().position(|d| d.dev == r.dev) {
                    Some(i) => i,
                    None => {
                        self.devices.push(Device::new(r.dev));
                        self.devices.len() - 1
                    }
                };
            }
            let d = &mut self.devices[self.last];
            let o = &mut d.ops[g as usize];
            o.q2c.record(r.total_ns());
            if r.issue_ns != 0 {
                o.q2d.record(r.issue_ns.saturating_sub(r.enter_ns));
                o.d2c.record(r.device_ns());
            }
            d.first_ns = d.first_ns.min(r.enter_ns);
            d.last_ns = d.last_ns.max(r.complete_ns);
            let p = Pending {
                enter_ns: r.enter_ns,
                complete_ns: r.complete_ns.max(r.enter_ns),
                sector: r.sector,
                sectors: u64::from(r.bytes).div_ceil(512),
            };
            // Insert by entry time, from the back: usually at the back itself.
            let mut i = d.window.len();
            while i > 0 && d.window[i - 1].enter_ns > p.enter_ns {
                i -= 1;
            }
            d.window.insert(i, p);
            if d.window.len() > WINDOW
                && let Some(first) = d.window.pop_front()
            {
                d.take(first);
            }
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let mut devices: Vec<DeviceModel> = self
            .devices
            .into_iter()
            .map(|mut d| {
                while let Some(p) = d.window.pop_front() {
                    d.take(p);
                }
                if let Some((s, e)) = d.run {
                    d.active_ns = d.active_ns.saturating_add(e - s);
                }
                let span_ns = d.last_ns.saturating_sub(d.first_ns);
                let active_ns = d.active_ns.min(span_ns);
                let mut seek_h = Histogram::<u64>::new(3).expect("3 significant digits");
                d.seek_counts.drain_into(&mut seek_h);
                let pct = |a: u64, b: u64| {
                    if b == 0 {
                        0.0
                    } else {
                        a as f64 * 100.0 / b as f64
                    }
                };
                let ops = StatGroup::ALL
                    .iter()
                    .zip(d.ops)
                    .filter(|(_, o)| o.q2c.ios > 0)
                    .map(|(g, o)| OpModel {
                        op: g.name().to_string(),
                        ios: o.q2c.ios,
                        q2d_us: o.q2d.model(),
                        d2c_us: o.d2c.model(),
                        q2c_us: o.q2c.model(),
                    })
                    .collect();
                DeviceModel {
                    name: (cx.device)(d.dev),
                    ops,
                    seek: SeekModel {
                        seeks: d.seeks,
                        mean_sectors: if d.seeks == 0 {
                            0.0
                        } else {
                            d.seek_sum as f64 / d.seeks as f64
                        },
                        median_sectors: if d.seeks == 0 {
                            0.0
                        } else {
                            seek_h.value_at_quantile(0.5) as f64
                        },
                        pct_zero: pct(d.seek_zero, d.seeks),
                    },
                    span_s: span_ns as f64 / 1e9,
                    active_s: active_ns as f64 / 1e9,
                    idle_s: (span_ns - active_ns) as f64 / 1e9,
                    pct_active: pct(active_ns, span_ns),
                    out_of_order: d.out_of_order,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            window: WINDOW,
            merge_ratio: NO_MERGES.into(),
            devices,
        })
        .unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn us(v: f64) -> String {
    crate::text::fmt_us(v)
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(
        out,
        "\nphases (btt: Q2D queued in the OS, D2C at the device, Q2C in all; min / avg / p50 / p99 / max):"
    )?;
    for d in &m.devices {
        for o in &d.ops {
            let p = |p: &PhaseModel| {
                if p.ios == 0 {
                    "-".to_string()
                } else {
                    format!(
                        "{} / {} / {} / {} / {}",
                        us(p.min),
                        us(p.avg),
                        us(p.p50),
                        us(p.p99),
                        us(p.max)
                    )
                }
            };
            writeln!(
                out,
                "  {:<12} {:<7} {:>10} IOs  Q2D {}  D2C {}  Q2C {}",
                d.name,
                o.op,
                tracer_common::coverage::thousands(o.ios),
                p(&o.q2d_us),
                p(&o.d2c_us),
                p(&o.q2c_us)
            )?;
        }
        writeln!(
            out,
            "  {:<12} seeks in submission order: mean {:.0} sectors, median {:.0}, {:.1}% none (sequential share: see access pattern); active {:.3} s, idle {:.3} s ({:.1}% active)",
            d.name,
            d.seek.mean_sectors,
            d.seek.median_sectors,
            d.seek.pct_zero,
            d.active_s,
            d.idle_s,
            d.pct_active
        )?;
    }
    writeln!(out, "  {}", m.merge_ratio)?;
    Ok(())
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    h.push_str(
        "<h3>Phases</h3><p>After btt: Q2D is the time queued in the OS (entering the queue to issue), D2C at the device (issue to completion), Q2C in all. Microseconds.</p>\
<table><tr><th class='l'>device</th><th class='l'>op</th><th>IOs</th>",
    );
    for ph in ["Q2D", "D2C", "Q2C"] {
        for s in ["min", "avg", "p50", "p99", "max"] {
            write!(h, "<th>{ph} {s}</th>")?;
        }
    }
    h.push_str("</tr>");
    for d in &m.devices {
        for o in &d.ops {
            write!(
                h,
                "<tr><td class='l'>{}</td><td class='l'>{}</td><td>{}</td>",
                escape(&d.name),
                escape(&o.op),
                o.ios
            )?;
            for p in [&o.q2d_us, &o.d2c_us, &o.q2c_us] {
                for x in [p.min, p.avg, p.p50, p.p99, p.max] {
                    if p.ios == 0 {
                        h.push_str("<td>-</td>");
                    } else {
                        write!(h, "<td>{x:.1}</td>")?;
                    }
                }
            }
            h.push_str("</tr>");
        }
    }
    h.push_str(
        "</table><table><tr><th class='l'>device</th><th>seeks</th><th>mean seek (sectors)</th><th>median seek</th><th>no seek %</th><th>active s</th><th>idle s</th><th>active %</th></tr>",
    );
    for d in &m.devices {
        write!(
            h,
            "<tr><td class='l'>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.1}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}</td></tr>",
            escape(&d.name),
            d.seek.seeks,
            d.seek.mean_sectors,
            d.seek.median_sectors,
            d.seek.pct_zero,
            d.active_s,
            d.idle_s,
            d.pct_active
        )?;
    }
    write!(
        h,
        "</table><p>Seeks: |start - end of the IO submitted before| between consecutive IOs of the device in submission order. Sequential share: see Access pattern. {}.</p>",
        escape(&m.merge_ratio)
    )
}
