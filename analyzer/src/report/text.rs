//! The terminal report.

use std::io::Write;

use tracer_common::coverage::{describe, thousands};
use tracer_common::op::StatGroup;

use crate::inputs::stress::StressRun;
use crate::report::format::{bytes, fmt_us};
use crate::report::model::{JsonDevice, JsonLatency, JsonReport, describe_labels, describe_queue};

fn lat(l: &JsonLatency) -> String {
    let f = |us: f64| {
        if us >= 1000.0 {
            format!("{:.1}ms", us / 1000.0)
        } else {
            format!("{us:.0}us")
        }
    };
    format!("{}/{}/{}/{}", f(l.p50), f(l.p99), f(l.p999), f(l.max))
}

pub fn write(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    header(out, j)?;
    for d in &j.devices {
        device_ops(out, d)?;
        device_rates(out, d)?;
        device_classes(out, j, d)?;
        device_bursts(out, d)?;
        device_coverage(out, d)?;
    }
    // A log off the trace's clock has no flush table: say why, where it would have been.
    for def in crate::analysis::sections::SECTIONS {
        if let Some(v) = j.sections.get(def.name) {
            (def.text)(v, out)?;
        }
    }
    for w in j.time_warnings.iter().filter(|w| w.kind == "app-log") {
        writeln!(out, "\nwarning: {}", w.message)?;
    }
    flush_matches(out, j)?;
    compaction_discards(out, j)?;
    markers(out, j)?;
    for run in &j.stress {
        stress_run(out, j, run)?;
    }
    losses(out, j)?;
    Ok(())
}

/// The trace line, its labels and what its integrity says.
fn header(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    let dur = j.duration_s;
    writeln!(
        out,
        "trace {} (host {}, kernel {}, started {}{})",
        j.traces.join(", "),
        j.host,
        j.kernel,
        j.start,
        dur.map(|d| format!(", {d:.1} s")).unwrap_or_default()
    )?;
    if !j.labels.is_empty() {
        writeln!(out, "labels: {}", describe_labels(&j.labels))?;
    }
    if let Some(stopped) = &j.integrity.stopped {
        writeln!(out, "warning: {}: {stopped}", j.traces.join(", "))?;
    }
    for n in &j.integrity.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

/// A device's title, its queue settings and its ops table.
fn device_ops(out: &mut dyn Write, d: &JsonDevice) -> std::io::Result<()> {
    writeln!(
        out,
        "\n{} ({}:{})  {} .. {}",
        d.name, d.major, d.minor, d.start, d.end
    )?;
    if let Some(q) = d.queue.as_ref().and_then(describe_queue) {
        writeln!(out, "  queue: {q}")?;
    }
    writeln!(
        out,
        "  {:<8} {:>12} {:>7} {:>10} {:>8}  {:<34} {:<30} {:<30}",
        "op",
        "IOs",
        "%IOs",
        "bytes",
        "%volume",
        "block sizes",
        "device lat p50/p99/p99.9/max",
        "total lat p50/p99/p99.9/max"
    )?;
    // The stat groups first, in their order, then the other ops by name.
    let groups = StatGroup::ALL.map(StatGroup::name);
    for k in groups.into_iter().chain(
        d.ops
            .keys()
            .map(String::as_str)
            .filter(|k| !groups.contains(k)),
    ) {
        let Some(o) = d.ops.get(k) else { continue };
        let mix: Vec<String> = o
            .block_sizes
            .iter()
            .take(2)
            .map(|z| format!("{:.0}% {}", z.pct_ios, z.class))
            .collect();
        let mix = if o.ios == 0 {
            "-".to_string()
        } else {
            mix.join(", ")
        };
        let (dl, tl) = if o.ios == 0 {
            ("-".into(), "-".into())
        } else {
            (lat(&o.device_latency_us), lat(&o.total_latency_us))
        };
        writeln!(
            out,
            "  {:<8} {:>12} {:>6.1}% {:>10} {:>7.1}%  {:<34} {:<30} {:<30}",
            k,
            thousands(o.ios),
            o.pct_ios,
            bytes(o.bytes),
            o.pct_bytes,
            mix,
            dl,
            tl
        )?;
    }
    if d.absorbed_flushes > 0 {
        writeln!(
            out,
            "  + {} empty flush requests absorbed by the flush machinery (the kernel counts them as 0-byte reads)",
            thousands(d.absorbed_flushes)
        )?;
    }
    if let Some(r) = d.ops.get("read")
        && r.readahead_bytes > 0
    {
        writeln!(
            out,
            "  read-ahead: {:.1}% of read bytes",
            r.readahead_bytes as f64 * 100.0 / r.bytes.max(1) as f64
        )?;
    }
    Ok(())
}

/// A device's throughput, queue depth, latency peaks and queue-depth spikes.
fn device_rates(out: &mut dyn Write, d: &JsonDevice) -> std::io::Result<()> {
    let t = &d.throughput;
    writeln!(
        out,
        "  throughput per {}s interval, mean / max:",
        d.series.interval_s
    )?;
    for (k, r) in [
        ("read", &t.read),
        ("write", &t.write),
        ("discard", &t.discard),
        ("flush", &t.flush),
    ] {
        if r.max_iops > 0.0 {
            writeln!(
                out,
                "    {k:<8} {:>9.1} / {:>9.1} MB/s   {:>9.0} / {:>9.0} IOPS",
                r.mean_mb_per_s, r.max_mb_per_s, r.mean_iops, r.max_iops
            )?;
        }
    }
    writeln!(
        out,
        "  queue depth (requests in the OS): mean {:.1}, max {}",
        t.queue_depth_mean, t.queue_depth_max
    )?;
    // Latency peaks: the intervals with the worst read and write latency.
    for (k, maxes) in [
        ("read", &d.series.read_max_us),
        ("write", &d.series.write_max_us),
    ] {
        let mut idx: Vec<usize> = (0..maxes.len()).filter(|&i| maxes[i] > 0.0).collect();
        idx.sort_by(|&a, &b| maxes[b].total_cmp(&maxes[a]));
        let peaks: Vec<String> = idx
            .iter()
            .take(3)
            .map(|&i| {
                format!(
                    "{} at +{:.0}s",
                    fmt_us(maxes[i]),
                    i as f64 * d.series.interval_s
                )
            })
            .collect();
        if !peaks.is_empty() {
            writeln!(out, "  {k} latency peaks: {}", peaks.join(", "))?;
        }
    }
    if !d.queue_depth_spikes.is_empty() {
        writeln!(
            out,
            "  queue-depth spikes ({}; baseline {:.1}):",
            d.queue_depth_spikes.len(),
            d.queue_depth_spikes[0].baseline_depth
        )?;
        for sp in d.queue_depth_spikes.iter().take(10) {
            writeln!(
                out,
                "    {}  +{:.1}s  {:.1}s  mean depth up to {:.0}, {} in flight at peak",
                sp.start, sp.start_s, sp.duration_s, sp.peak_mean_depth, sp.peak_inflight
            )?;
        }
    }
    Ok(())
}

/// A device's IO classes table, when a profile is in force.
fn device_classes(out: &mut dyn Write, j: &JsonReport, d: &JsonDevice) -> std::io::Result<()> {
    if !d.classes.is_empty() {
        writeln!(
            out,
            "  IO classes (profile {}: each IO by its file and thread; --classes):",
            j.class_profile.as_deref().unwrap_or("?")
        )?;
        writeln!(
            out,
            "    {:<14} {:>10} {:>6} {:>10} {:>6} {:>10} {:>10} {:<18} {:>9} {:>9}",
            "class", "IOs", "%", "bytes", "%", "read", "written", "top size", "p50", "p99"
        )?;
        for c in &d.classes {
            let top = c.block_sizes.first().map_or_else(
                || "-".to_string(),
                |z| format!("{:.0}% {}", z.pct_ios, z.class),
            );
            writeln!(
                out,
                "    {:<14} {:>10} {:>6.1} {:>10} {:>6.1} {:>10} {:>10} {:<18} {:>9} {:>9}",
                c.class,
                thousands(c.ios),
                c.pct_ios,
                bytes(c.bytes),
                c.pct_bytes,
                bytes(c.read_bytes),
                bytes(c.write_bytes),
                top,
                fmt_us(c.p50_us),
                fmt_us(c.p99_us),
            )?;
        }
    }
    Ok(())
}

/// A device's write bursts and its reads inside and outside them.
fn device_bursts(out: &mut dyn Write, d: &JsonDevice) -> std::io::Result<()> {
    if !d.bursts.is_empty() {
        let b0 = &d.bursts;
        let classed = b0.iter().any(|b| !b.class.is_empty());
        writeln!(out, "  write bursts ({}):", b0.len())?;
        writeln!(
            out,
            "    {:<24} {:>8} {:>7} {:>10} {:>10} {:<16} {:>9} {:>9} {:<22} {}written by",
            "start",
            "+s",
            "dur s",
            "written",
            "peak MB/s",
            "write size",
            "read p99",
            "qd mean",
            "discards after",
            if classed {
                format!("{:<18} ", "class")
            } else {
                String::new()
            },
        )?;
        for b in b0.iter().take(20) {
            let disc = if b.discards_after > 0 {
                format!(
                    "{} ({}) +{:.1}s",
                    b.discards_after,
                    bytes(b.discard_bytes_after),
                    b.first_discard_after_s.unwrap_or(0.0)
                )
            } else {
                "-".into()
            };
            let class = if classed {
                format!(
                    "{:<18} ",
                    b.classes
                        .first()
                        .map_or_else(|| "-".to_string(), |c| format!("{} {:.0}%", c.class, c.pct))
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "    {:<24} {:>8.1} {:>7.1} {:>10} {:>10.0} {:<16} {:>9} {:>9.1} {:<22} {class}{}",
                b.start,
                b.start_s,
                b.duration_s,
                bytes(b.write_bytes),
                b.peak_mb_per_s,
                format!(
                    "{:.0}% {}",
                    b.dominant_write_size_pct, b.dominant_write_size
                ),
                fmt_us(b.read_p99_us),
                b.queue_depth_mean,
                disc,
                crate::analysis::bursts::writers_text(&b.writers[..b.writers.len().min(2)])
            )?;
        }
        let r = &d.reads_during_bursts;
        writeln!(
            out,
            "  reads during bursts: {} IOs, p50 {} p99 {} max {}, queue {:.1}; outside: {} IOs, p50 {} p99 {} max {}, queue {:.1}",
            thousands(r.inside_ios),
            fmt_us(r.inside_p50_us),
            fmt_us(r.inside_p99_us),
            fmt_us(r.inside_max_us),
            r.inside_queue_depth_mean,
            thousands(r.outside_ios),
            fmt_us(r.outside_p50_us),
            fmt_us(r.outside_p99_us),
            fmt_us(r.outside_max_us),
            r.outside_queue_depth_mean
        )?;
    }
    Ok(())
}

/// A device's coverage against /proc/diskstats.
fn device_coverage(out: &mut dyn Write, d: &JsonDevice) -> std::io::Result<()> {
    match &d.coverage {
        Some(c) => {
            for g in c.groups.iter().filter(|g| g.any()) {
                writeln!(out, "  coverage: {}", describe(g))?;
            }
            if !c.accounting_off() {
                writeln!(
                    out,
                    "  mean queue size (requests in the OS): {:.2} traced, {:.2} by /proc/diskstats",
                    c.aggregate_mean_queue, c.kernel_mean_queue
                )?;
            }
        }
        None => writeln!(
            out,
            "  coverage: unknown (no trailer: the trace did not end cleanly)"
        )?,
    }
    Ok(())
}

/// Write bursts matched with the application log's flushes, per device.
fn flush_matches(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    for (dev, m) in &j.flush_match {
        writeln!(
            out,
            "\n{dev}: write bursts vs flushes in the application log (a burst matches a flush it overlaps, {:.0} s tolerance; {} flushes under 1 MiB left out):",
            m.tolerance_s, m.small_flushes_ignored
        )?;
        writeln!(
            out,
            "  flushes matched {} of {} (recall {:.2}); bursts matched {} of {} (precision {:.2})",
            m.flushes_matched, m.flushes, m.recall, m.bursts_matched, m.bursts, m.precision
        )?;
        let other = m.bursts - m.bursts_matched;
        if other > 0 {
            writeln!(
                out,
                "  of the {other} bursts that match no flush, {} overlap a compaction (\"Compacting\" .. \"Compacted\" in the log):",
                m.unmatched_in_compactions
            )?;
            for b in m
                .burst_rows
                .iter()
                .filter(|b| b.matched != "flush")
                .take(40)
            {
                writeln!(
                    out,
                    "    burst at {}  {:<10}  written by {}",
                    b.start, b.matched, b.writers
                )?;
            }
            // By main writer: which tasks' bursts are the flushes.
            let mut by: std::collections::BTreeMap<&str, (usize, usize)> =
                std::collections::BTreeMap::new();
            for b in &m.burst_rows {
                let e = by.entry(b.main_writer.as_str()).or_default();
                e.0 += 1;
                e.1 += usize::from(b.matched == "flush");
            }
            let list: Vec<String> = by
                .iter()
                .map(|(w, (n, f))| format!("{w} {f} of {n}"))
                .collect();
            writeln!(
                out,
                "  bursts matching a flush, by main writer: {} (--burst-comm NAME finds bursts among one writer's IOs)",
                list.join(", ")
            )?;
        }
        if let Some(a) = &m.classes {
            class_agreement(a, out)?;
        }
        for (table, start, end, hit) in m.rows.iter().take(40) {
            writeln!(
                out,
                "    {table:<24} {start} .. {}  {}",
                end.get(11..).unwrap_or(end),
                hit.as_deref()
                    .map_or("NO BURST".to_string(), |b| format!("burst at {b}"))
            )?;
        }
    }
    Ok(())
}

/// The discards that followed the log's compactions, per device.
fn compaction_discards(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    for (dev, c) in &j.compaction_discards {
        writeln!(
            out,
            "\n{dev}: compactions in the application log and the discards that follow (completing within {:.0} s of \"Compacted\", before the next): {} of {} compactions followed by discards; {} discards, {}",
            c.window_s,
            c.followed_by_discards,
            c.compactions,
            thousands(c.discards),
            bytes(c.discard_bytes)
        )?;
        for r in c.rows.iter().take(30) {
            writeln!(
                out,
                "    compaction {} .. {}  {}",
                r.start,
                r.end.get(11..).unwrap_or(&r.end),
                match r.first_discard_after_s {
                    Some(f) => format!(
                        "{} discards ({}), first +{f:.1}s",
                        r.discards,
                        bytes(r.discard_bytes)
                    ),
                    None => "no discards".into(),
                }
            )?;
        }
    }
    Ok(())
}

/// The application log's markers.
fn markers(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    let markers = &j.markers;
    if !markers.is_empty() {
        let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for m in markers {
            *kinds.entry(m.kind.as_str()).or_default() += 1;
        }
        let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        writeln!(out, "\napplication log markers: {}", list.join(", "))?;
    }
    Ok(())
}

/// A stress run's results.
fn stress_run(out: &mut dyn Write, j: &JsonReport, run: &StressRun) -> std::io::Result<()> {
    writeln!(
        out,
        "\n{} ({}): {} status lines",
        run.path,
        run.tool,
        run.status.len()
    )?;
    if let Some(o) = run.summary.get("OVERALL") {
        if let Some(rate) = o.get("Op rate (op/s)") {
            // cassandra-stress's Results block.
            let ms = |k: &str| o.get(k).map_or("-".to_string(), |v| fmt_us(v * 1000.0));
            writeln!(
                out,
                "  overall: {rate:.0} ops/s over {:.0} s; latency mean {}, p99 {}, p99.9 {}, max {}; {:.0} errors",
                o.get("Total operation time").copied().unwrap_or(0.0),
                ms("Latency mean (ms)"),
                ms("Latency 99th percentile (ms)"),
                ms("Latency 99.9th percentile (ms)"),
                ms("Latency max (ms)"),
                o.get("Total errors").copied().unwrap_or(0.0)
            )?;
        } else {
            writeln!(
                out,
                "  overall: {:.0} ops/s over {:.1} s",
                o.get("Throughput(ops/sec)").copied().unwrap_or(0.0),
                o.get("RunTime(ms)").copied().unwrap_or(0.0) / 1e3
            )?;
        }
    }
    for (op, m) in &run.summary {
        if let (Some(n), Some(p99)) = (m.get("Operations"), m.get("99thPercentileLatency(us)")) {
            writeln!(
                out,
                "  {op:<8} {n:>10.0} ops, avg {}, p95 {}, p99 {}, max {}",
                fmt_us(m.get("AverageLatency(us)").copied().unwrap_or(0.0)),
                fmt_us(m.get("95thPercentileLatency(us)").copied().unwrap_or(0.0)),
                fmt_us(*p99),
                fmt_us(m.get("MaxLatency(us)").copied().unwrap_or(0.0))
            )?;
        }
    }
    // Client and disk on one wall-clock axis; when the status lines are off the trace's
    // clock, why, where the table would have been.
    for w in j
        .time_warnings
        .iter()
        .filter(|w| w.kind == "stress" && w.path == run.path)
    {
        writeln!(out, "  warning: {}", w.message)?;
    }
    if let Some(c) = j.client_vs_disk.iter().find(|c| c.path == run.path) {
        writeln!(
            out,
            "  client vs {} at each status line (disk figures over the preceding status interval):",
            c.device
        )?;
        writeln!(
            out,
            "    {:<24} {:>9} {:>12} {:>11} {:>10} {:>9} {:>12}",
            "time", "ops/s", "client p99", "disk wMB/s", "disk rIOPS", "disk qd", "disk read p99"
        )?;
        for r in &c.rows {
            match &r.disk {
                None => writeln!(
                    out,
                    "    {:<24} {:>9.0} {:>12} {:>11} {:>10} {:>9} {:>12}",
                    r.time,
                    r.ops_per_s,
                    fmt_us(r.client_p99_us),
                    "-",
                    "-",
                    "-",
                    "(outside trace)"
                )?,
                Some(w) => writeln!(
                    out,
                    "    {:<24} {:>9.0} {:>12} {:>11.1} {:>10.0} {:>9.1} {:>12}",
                    r.time,
                    r.ops_per_s,
                    fmt_us(r.client_p99_us),
                    w.write_mb_per_s,
                    w.read_iops,
                    w.queue_depth,
                    fmt_us(w.read_p99_us)
                )?,
            }
        }
    }
    Ok(())
}

/// What the trace missed.
fn losses(out: &mut dyn Write, j: &JsonReport) -> std::io::Result<()> {
    let l = &j.lost;
    if j.integrity.losses_from == "none" {
        writeln!(
            out,
            "\nlost: unknown (the file was cut short before its first stats frame)"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "\nlost: {}{} IOs ({} ring drops, {} missed completions, {} kernel-skipped runs, {} untracked, {} unaccounted){}",
        if j.integrity.losses_from == "last stats frame" {
            "at least "
        } else {
            ""
        },
        thousands(l.total),
        thousands(l.ring_drops),
        thousands(l.missed_completions),
        thousands(l.recursion_misses),
        thousands(l.untracked),
        thousands(l.unaccounted),
        if l.filtered_out > 0 {
            format!(
                "; {} filtered out by --pid/--comm/--cgroup/--op",
                thousands(l.filtered_out)
            )
        } else {
            String::new()
        }
    )?;
    Ok(())
}

/// The trace's IO classes against the application's log (under the flush match).
fn class_agreement(
    a: &crate::inputs::stress::ClassAgreement,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "  IO classes from the trace alone (profile {}) vs the log, {} bursts: the log explains {} as flushes, {} labelled flush; {} as compactions, {} labelled compaction ({} bursts overlap both: the log's flush sizes decide); {} overlap neither{}",
        a.profile,
        a.bursts,
        a.log_flush,
        a.log_flush_labelled_flush,
        a.log_compaction,
        a.log_compaction_labelled_compaction,
        a.log_both,
        a.log_none,
        if a.log_none_labels.is_empty() {
            String::new()
        } else {
            let l: Vec<String> = a
                .log_none_labels
                .iter()
                .map(|(c, n)| format!("{n} {}", if c.is_empty() { "-" } else { c }))
                .collect();
            format!(" (labelled {})", l.join(", "))
        }
    )?;
    writeln!(
        out,
        "  SSTables made during the trace and named in the log: {} ({} flushed, {} written by compactions); the trace's class agrees for {}{}; {} made in the trace only, {} in the log only",
        a.sstables_compared,
        a.sstables_flushed,
        a.sstables_compacted,
        a.sstables_agree,
        if a.sstables_disagree.is_empty() {
            String::new()
        } else {
            format!(", not for {}", a.sstables_compared - a.sstables_agree)
        },
        a.sstables_trace_only,
        a.sstables_log_only,
    )?;
    for (path, log, trace) in &a.sstables_disagree {
        writeln!(out, "    {path}: the log says {log}, the trace {trace}")?;
    }
    Ok(())
}
