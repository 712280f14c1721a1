//! The terminal report.

use std::io::Write;

use tracer_common::coverage::{describe, thousands};
use tracer_common::format::Ending;

use crate::sizes::human;
use crate::summary::{JsonLatency, Summary};

fn bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i < U.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 { format!("{b} B") } else { format!("{v:.1} {}", U[i]) }
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 { format!("{:.1}ms", us / 1000.0) } else { format!("{us:.0}us") }
}

fn lat(l: &JsonLatency) -> String {
    let f = |us: f64| if us >= 1000.0 { format!("{:.1}ms", us / 1000.0) } else { format!("{us:.0}us") };
    format!("{}/{}/{}/{}", f(l.p50), f(l.p99), f(l.p999), f(l.max))
}

pub fn write(out: &mut dyn Write, s: &Summary) -> std::io::Result<()> {
    let j = s.to_json();
    let dur = s.trailer.as_ref().map(|t| t.monotonic_end_ns.saturating_sub(s.header.monotonic_base_ns) as f64 / 1e9);
    writeln!(
        out,
        "trace {} (host {}, kernel {}, started {}{})",
        j.traces.join(", "),
        j.host,
        j.kernel,
        j.start,
        dur.map(|d| format!(", {d:.1} s")).unwrap_or_default()
    )?;
    for (p, e) in &s.endings {
        match e {
            Ending::Complete => {}
            Ending::Truncated { intact_bytes, trailing_bytes } => writeln!(
                out,
                "warning: {} ends without a trailer after {} intact bytes ({} trailing bytes dropped): the tracer did not stop cleanly; reporting what is intact",
                p.display(), thousands(*intact_bytes), thousands(*trailing_bytes)
            )?,
            Ending::Corrupt { frame, offset, reason } => writeln!(
                out,
                "warning: {} is corrupt at frame {frame} (byte {offset}): {reason}; reporting the frames before it",
                p.display()
            )?,
            Ending::Unread => {}
        }
    }
    for d in &j.devices {
        writeln!(out, "\n{} ({}:{})  {} .. {}", d.name, d.major, d.minor, d.start, d.end)?;
        writeln!(
            out,
            "  {:<8} {:>12} {:>7} {:>10} {:>8}  {:<34} {:<30} {:<30}",
            "op", "IOs", "%IOs", "bytes", "%volume", "block sizes", "device lat p50/p99/p99.9/max", "total lat p50/p99/p99.9/max"
        )?;
        for k in ["read", "write", "discard", "flush"].into_iter().chain(d.ops.keys().map(String::as_str).filter(|k| !matches!(*k, "read" | "write" | "discard" | "flush"))) {
            let Some(o) = d.ops.get(k) else { continue };
            let mix: Vec<String> = o.block_sizes.iter().take(2).map(|z| format!("{:.0}% {}", z.pct_ios, z.class)).collect();
            let mix = if o.ios == 0 { "-".to_string() } else { mix.join(", ") };
            let (dl, tl) = if o.ios == 0 { ("-".into(), "-".into()) } else { (lat(&o.device_latency_us), lat(&o.total_latency_us)) };
            writeln!(
                out,
                "  {:<8} {:>12} {:>6.1}% {:>10} {:>7.1}%  {:<34} {:<30} {:<30}",
                k, thousands(o.ios), o.pct_ios, bytes(o.bytes), o.pct_bytes, mix, dl, tl
            )?;
        }
        if d.absorbed_flushes > 0 {
            writeln!(out, "  + {} empty flush requests absorbed by the flush machinery (the kernel counts them as 0-byte reads)", thousands(d.absorbed_flushes))?;
        }
        if let Some(r) = d.ops.get("read") {
            if r.readahead_bytes > 0 {
                writeln!(out, "  read-ahead: {:.1}% of read bytes", r.readahead_bytes as f64 * 100.0 / r.bytes.max(1) as f64)?;
            }
        }
        let t = &d.throughput;
        writeln!(out, "  throughput per {}s interval, mean / max:", d.series.interval_s)?;
        for (k, r) in [("read", &t.read), ("write", &t.write), ("discard", &t.discard), ("flush", &t.flush)] {
            if r.max_iops > 0.0 {
                writeln!(
                    out,
                    "    {k:<8} {:>9.1} / {:>9.1} MB/s   {:>9.0} / {:>9.0} IOPS",
                    r.mean_mb_per_s, r.max_mb_per_s, r.mean_iops, r.max_iops
                )?;
            }
        }
        writeln!(out, "  queue depth (requests in the OS): mean {:.1}, max {}", t.queue_depth_mean, t.queue_depth_max)?;
        // Latency peaks: the intervals with the worst read and write latency.
        for (k, maxes) in [("read", &d.series.read_max_us), ("write", &d.series.write_max_us)] {
            let mut idx: Vec<usize> = (0..maxes.len()).filter(|&i| maxes[i] > 0.0).collect();
            idx.sort_by(|&a, &b| maxes[b].total_cmp(&maxes[a]));
            let peaks: Vec<String> = idx
                .iter()
                .take(3)
                .map(|&i| format!("{} at +{:.0}s", fmt_us(maxes[i]), i as f64 * d.series.interval_s))
                .collect();
            if !peaks.is_empty() {
                writeln!(out, "  {k} latency peaks: {}", peaks.join(", "))?;
            }
        }
        if !d.queue_depth_spikes.is_empty() {
            writeln!(out, "  queue-depth spikes ({}; baseline {:.1}):", d.queue_depth_spikes.len(), d.queue_depth_spikes[0].baseline_depth)?;
            for sp in d.queue_depth_spikes.iter().take(10) {
                writeln!(out, "    {}  +{:.1}s  {:.1}s  mean depth up to {:.0}, {} in flight at peak", sp.start, sp.start_s, sp.duration_s, sp.peak_mean_depth, sp.peak_inflight)?;
            }
        }
        if !d.bursts.is_empty() {
            let b0 = &d.bursts;
            writeln!(out, "  write bursts ({}):", b0.len())?;
            writeln!(out, "    {:<24} {:>8} {:>7} {:>10} {:>10} {:<16} {:>9} {:>9} {:>14}", "start", "+s", "dur s", "written", "peak MB/s", "write size", "read p99", "qd mean", "discards after")?;
            for b in b0.iter().take(20) {
                let disc = if b.discards_after > 0 {
                    format!("{} ({}) +{:.1}s", b.discards_after, bytes(b.discard_bytes_after), b.first_discard_after_s.unwrap_or(0.0))
                } else {
                    "-".into()
                };
                writeln!(
                    out,
                    "    {:<24} {:>8.1} {:>7.1} {:>10} {:>10.0} {:<16} {:>9} {:>9.1} {:>14}",
                    b.start, b.start_s, b.duration_s, bytes(b.write_bytes), b.peak_mb_per_s,
                    format!("{:.0}% {}", b.dominant_write_size_pct, b.dominant_write_size), fmt_us(b.read_p99_us), b.queue_depth_mean, disc
                )?;
            }
            let r = &d.reads_during_bursts;
            writeln!(
                out,
                "  reads during bursts: {} IOs, p50 {} p99 {} max {}, queue {:.1}; outside: {} IOs, p50 {} p99 {} max {}, queue {:.1}",
                thousands(r.inside_ios), fmt_us(r.inside_p50_us), fmt_us(r.inside_p99_us), fmt_us(r.inside_max_us), r.inside_queue_depth_mean,
                thousands(r.outside_ios), fmt_us(r.outside_p50_us), fmt_us(r.outside_p99_us), fmt_us(r.outside_max_us), r.outside_queue_depth_mean
            )?;
        }
        match &d.coverage {
            Some(c) => {
                for g in c.groups.iter().filter(|g| g.kernel_ios > 0 || g.aggregate_ios > 0) {
                    writeln!(out, "  coverage: {}", describe(g))?;
                }
                writeln!(out, "  mean queue size (requests in the OS): {:.2} traced, {:.2} by /proc/diskstats", c.aggregate_mean_queue, c.kernel_mean_queue)?;
            }
            None => writeln!(out, "  coverage: unknown (no trailer: the trace did not end cleanly)")?,
        }
    }
    let l = &j.lost;
    writeln!(
        out,
        "\nlost: {} IOs ({} ring drops, {} missed completions, {} kernel-skipped runs, {} untracked, {} unaccounted){}",
        thousands(l.total),
        thousands(l.ring_drops),
        thousands(l.missed_completions),
        thousands(l.recursion_misses),
        thousands(l.untracked),
        thousands(l.unaccounted),
        if l.filtered_out > 0 { format!("; {} filtered out by --pid/--comm/--op", thousands(l.filtered_out)) } else { String::new() }
    )?;
    let _ = human;
    Ok(())
}
