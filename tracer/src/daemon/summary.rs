//! The end's summary on stdout: the whole run's coverage per device and op, what was lost and
//! why, and the trace written.

use std::io::Write;
use std::path::PathBuf;

use tracer_common::coverage::{DeviceCoverage, GroupCoverage, coverage, describe, thousands};
use tracer_common::format::{
    AggregateSnapshot, DiskStats, ProbeCounters, TraceHeader, TraceTrailer,
};
use tracer_common::op::StatGroup;

use super::Run;
use super::cuts::CUT_GRACE;
use super::stop::StopReason;
use crate::probe::ProbeMode;

/// The whole run's coverage, from its start's cut to its end's, whatever files it was
/// written to.
pub(super) fn run_coverage(
    run: &Run,
    diskstats_end: &[DiskStats],
    aggregates: &[AggregateSnapshot],
) -> Vec<tracer_common::coverage::DeviceCoverage> {
    let header = TraceHeader {
        diskstats_start: run.diskstats_at_run_start.clone(),
        aggregates_start: Vec::new(),
        ..TraceHeader::default()
    };
    let trailer = TraceTrailer {
        diskstats_end: diskstats_end.to_vec(),
        aggregates_end: aggregates.to_vec(),
        start_cut: run.start_cut.clone(),
        end_cut: run.end_cut.clone(),
        ..Default::default()
    };
    coverage(&header, &trailer)
}

/// The end's summary on stdout: the whole run's coverage per device and op, what was lost and
/// why, and the trace written.
pub(super) fn summary(
    run: &Run,
    diskstats_end: &[DiskStats],
    aggregates: &[AggregateSnapshot],
    counters: &ProbeCounters,
    closed: Option<&(PathBuf, u64, u64)>,
    reason: StopReason,
) -> std::io::Result<()> {
    let mut out = run.stdout.lock();
    let cov = run_coverage(run, diskstats_end, aggregates);
    let misses = counters.reported_misses();
    writeln!(out, "\nblkprof-trace: stopped ({reason})")?;
    for d in &cov {
        device(&mut out, run, d, misses)?;
    }
    records(&mut out, run, counters, aggregates)?;
    losses(&mut out, run, counters)?;
    if let Some(closed) = closed {
        written(&mut out, run, closed)?;
    }
    out.flush()
}

/// A device's table: per op, the IOs and bytes traced, the kernel's, and the records; then
/// the coverage and the mean queue size.
fn device(out: &mut impl Write, run: &Run, d: &DeviceCoverage, misses: u64) -> std::io::Result<()> {
    let any = d.groups.iter().any(GroupCoverage::any);
    if !any && run.cfg.devices.is_empty() {
        return Ok(());
    }
    writeln!(out, "{} ({}:{}):", d.name, d.major, d.minor)?;
    writeln!(
        out,
        "  {:<8} {:>12} {:>14} {:>12} {:>14} {:>12}",
        "op", "IOs", "bytes", "kernel IOs", "kernel bytes", "records"
    )?;
    let dev = tracer_common::dev_join(d.major, d.minor);
    for g in &d.groups {
        let grp = g.group.unwrap_or(StatGroup::Read);
        let rec = run
            .received
            .iter()
            .find(|(d, _)| *d == dev)
            .map(|(_, g)| g[grp as usize])
            .unwrap_or_default();
        writeln!(
            out,
            "  {:<8} {:>12} {:>14} {:>12} {:>14} {:>12}",
            grp.name(),
            thousands(g.aggregate_ios + g.not_accounted_ios),
            thousands(g.aggregate_bytes + g.not_accounted_bytes),
            thousands(g.kernel_at_cut_ios()),
            thousands(g.kernel_at_cut_bytes()),
            thousands(rec.0)
        )?;
    }
    for g in &d.groups {
        if g.any() {
            let gap = g.unaccounted(misses);
            let extra = g.excess();
            let not_seen = g
                .kernel_at_cut_ios()
                .saturating_sub(g.cut_during_read_end_ios)
                .saturating_sub(g.aggregate_ios);
            let note = if gap > 0 {
                format!("  <- {gap} IOs unaccounted")
            } else if not_seen > 0 {
                format!("  <- {not_seen} missed, reported below")
            } else if extra > 0 {
                format!("  <- {extra} more than the kernel counted")
            } else {
                String::new()
            };
            writeln!(out, "  coverage: {}{note}", describe(g))?;
        }
    }
    if !d.accounting_off() {
        writeln!(
            out,
            "  mean queue size (requests in OS): {:.3} traced, {:.3} by /proc/diskstats",
            d.aggregate_mean_queue, d.kernel_mean_queue
        )?;
    }
    Ok(())
}

/// The records received, dropped, filtered out, and the IOs missed; or, without records,
/// what the aggregates lack.
fn records(
    out: &mut impl Write,
    run: &Run,
    counters: &ProbeCounters,
    aggregates: &[AggregateSnapshot],
) -> std::io::Result<()> {
    if run.probe.mode == ProbeMode::Records {
        writeln!(
            out,
            "records: {} received, {} dropped (ring full), {} filtered out; missed IOs: {} completions not seen by the probe, {} program runs skipped by the kernel (BPF recursion), {} untracked (request map full)",
            thousands(run.received_total),
            thousands(counters.ring_drops),
            thousands(run.filtered_out),
            thousands(counters.missed_completions),
            thousands(counters.recursion_misses()),
            thousands(counters.request_map_full)
        )?;
        if counters.lost_unnamed > 0 {
            writeln!(
                out,
                "note: {} halves lost to the full ring could not be named to the join (the ring of lost marks was full too): the completions not seen by the probe are an upper bound, lost records among them; a larger --ring-size avoids it",
                thousands(counters.lost_unnamed),
            )?;
        }
    } else {
        writeln!(
            out,
            "records: none (--no-records: the exact in-kernel aggregates only){}",
            if counters.recursion_misses() > 0 {
                format!(
                    "; {} program runs skipped by the kernel (BPF recursion)",
                    thousands(counters.recursion_misses())
                )
            } else {
                String::new()
            }
        )?;
        if let Some(a) = aggregates.iter().find(|a| a.ios > 0 && a.timed < a.ios) {
            writeln!(
                out,
                "note: {} of {} IOs have no latency: the kernel stamps the start only of requests it accounts (iostats on)",
                thousands(a.ios - a.timed),
                thousands(a.ios)
            )?;
        }
        if aggregates
            .iter()
            .any(|a| a.timed > 0 && a.device_latency.iter().all(|&c| c == 0))
        {
            writeln!(
                out,
                "note: no device latency: the kernel stamps the issue only where the queue collects statistics (e.g. with write-back throttling on: /sys/block/NAME/queue/wbt_lat_usec)"
            )?;
        }
    }
    Ok(())
}

/// What was lost, and why.
fn losses(out: &mut impl Write, run: &Run, counters: &ProbeCounters) -> std::io::Result<()> {
    if counters.aggregate_map_full > 0 {
        writeln!(
            out,
            "warning: {} IOs were recorded but left out of the exact aggregates (aggregate map full): the coverage check counts them as missed",
            thousands(counters.aggregate_map_full)
        )?;
    }
    if counters.submitters_lost > 0 && !run.source.is_halves() {
        writeln!(
            out,
            "note: {} submitters seen at block_getrq were not taken up by their requests (this kernel has no block_io_start): those IOs, if they completed, show no submitter",
            thousands(counters.submitters_lost)
        )?;
    }
    if counters.missed_completions > 0 {
        let [partial, issued, queued] = counters.missed_stage;
        writeln!(
            out,
            "missed completions by what the probe had seen of the request: {partial} completing (partially or inside a flush sequence), {issued} issued, {queued} never issued"
        )?;
    }
    if let Some(c) = &run.end_cut
        && c.in_flight > 0
    {
        writeln!(
            out,
            "stop: the run was cut at one instant; {} IOs in flight then completed after it and are not part of it{}",
            thousands(c.in_flight),
            if c.never_completed > 0 {
                format!(
                    "; {} more had not completed {} s later: counted as missed completions",
                    c.never_completed,
                    CUT_GRACE.as_secs()
                )
            } else {
                String::new()
            }
        )?;
    }
    if counters.started_before_attach > 0 {
        writeln!(
            out,
            "note: {} IOs were submitted before tracing started (no submitter or queue time)",
            counters.started_before_attach
        )?;
    }
    if run.malformed > 0 {
        writeln!(out, "warning: {} malformed ring records", run.malformed)?;
    }
    if let Some(st) = run.source.join_stats() {
        writeln!(
            out,
            "half records: {} joined, {} started before the attach, {} without their start half, {} closed by a lost last half, {} behind the sweep, {} malformed, {} open at the end",
            thousands(st.joined),
            thousands(st.started_before_attach),
            thousands(st.starts_lost),
            thousands(st.gone),
            thousands(st.late),
            thousands(st.malformed),
            thousands(st.open_at_end),
        )?;
        let c = counters;
        if c.half_drops + c.merge_half_drops + c.submitters_lost + c.lost_unnamed > 0 {
            writeln!(
                out,
                "half records lost (ring full): {} start halves (records without a submitter), {} issue, requeue or partial-completion halves (records short of an instant or bytes), {} merge halves; {} of them not named to the join",
                thousands(c.submitters_lost),
                thousands(c.half_drops),
                thousands(c.merge_half_drops),
                thousands(c.lost_unnamed),
            )?;
        }
    }
    Ok(())
}

/// The trace written.
fn written(
    out: &mut impl Write,
    run: &Run,
    (path, records, bytes): &(PathBuf, u64, u64),
) -> std::io::Result<()> {
    let per_io = if *records > 0 {
        *bytes as f64 / *records as f64
    } else {
        0.0
    };
    writeln!(
        out,
        "trace: {} ({} records, {} bytes, {per_io:.1} bytes/IO); histograms: {}",
        path.display(),
        thousands(*records),
        thousands(*bytes),
        path.with_extension("hlog").display()
    )?;
    if run.files.len() > 1 {
        writeln!(out, "rotated files kept: {}", run.files.len())?;
    }
    Ok(())
}
