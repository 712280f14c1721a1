//! One self-contained HTML report: inline SVG charts, tables, no scripts, no network.

use std::fmt::Write as _;

use crate::report::format::escape;
use crate::report::model::JsonReport;

/// The SVG that plotters wrote contains text we passed in (device names, titles): it is
/// escaped by plotters' SVG backend; embed it as is, after dropping the XML declaration.
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

pub fn render(j: &JsonReport) -> String {
    let mut h = String::new();
    render_into(&mut h, j).expect("writing into a String does not fail");
    h
}

fn render_into(h: &mut String, j: &JsonReport) -> std::fmt::Result {
    write!(
        h,
        "<!doctype html><html><head><meta charset='utf-8'><title>blkprof report: {}</title><style>\
body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:8px 0 16px}} \
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} th{{background:#f3f3f3}} td.l,th.l{{text-align:left}} \
.warn{{color:#a40}} h2{{margin-top:32px}} svg{{display:block;margin:8px 0}}</style></head><body>",
        escape(&j.traces.join(", "))
    )?;
    write!(
        h,
        "<h1>blkprof report</h1><p>trace {} &middot; host {} &middot; kernel {} &middot; started {}</p>",
        escape(&j.traces.join(", ")),
        escape(&j.host),
        escape(&j.kernel),
        escape(&j.start)
    )?;
    if !j.labels.is_empty() {
        write!(
            h,
            "<p>labels: {}</p>",
            escape(&crate::report::model::describe_labels(&j.labels))
        )?;
    }
    if !j.complete {
        write!(
            h,
            "<p class='warn'>The trace did not end cleanly: {}. This report covers what is intact.</p>",
            escape(
                j.integrity
                    .stopped
                    .as_deref()
                    .unwrap_or("truncated or corrupt")
            )
        )?;
    }
    for n in &j.integrity.notes {
        write!(h, "<p class='warn'>{}</p>", escape(n))?;
    }
    for d in &j.devices {
        write!(
            h,
            "<h2>{} ({}:{})</h2><p>{} .. {}</p>",
            escape(&d.name),
            d.major,
            d.minor,
            escape(&d.start),
            escape(&d.end)
        )?;
        if let Some(q) = d
            .queue
            .as_ref()
            .and_then(crate::report::model::describe_queue)
        {
            write!(h, "<p>queue: {}</p>", escape(&q))?;
        }
        write!(
            h,
            "<table><tr><th class='l'>op</th><th>IOs</th><th>% IOs</th><th>bytes</th><th>% volume</th><th class='l'>block sizes</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>"
        )?;
        for k in ["read", "write", "discard", "flush"] {
            let Some(o) = d.ops.get(k).filter(|o| o.ios > 0) else {
                continue;
            };
            let mix: Vec<String> = o
                .block_sizes
                .iter()
                .take(3)
                .map(|z| format!("{:.0}% {}", z.pct_ios, z.class))
                .collect();
            let l = &o.total_latency_us;
            write!(
                h,
                "<tr><td class='l'>{k}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td><td class='l'>{}</td><td>{:.0} us</td><td>{:.0} us</td><td>{:.0} us</td><td>{:.0} us</td></tr>",
                o.ios,
                o.pct_ios,
                o.bytes,
                o.pct_bytes,
                escape(&mix.join(", ")),
                l.p50,
                l.p99,
                l.p999,
                l.max
            )?;
        }
        h.push_str("</table>");
        for c in crate::report::plots::charts(j, d) {
            h.push_str(inline_svg(&c.svg()));
        }
        let heat = crate::report::plots::heatmaps(j, d);
        if !heat.is_empty() {
            h.push_str("<h3>Heatmaps</h3><p>IOs per cell of time (x, by completion) and total latency, request size or offset on the device (y); colour on a log scale, white for none. Write bursts: orange (a bar above the cells, outlined over them); application flushes and compactions: blue lines.</p>");
            for m in heat {
                write!(
                    h,
                    "<div class='heatmap' id='{}'>{}</div>",
                    escape(&m.name),
                    inline_svg(&m.svg())
                )?;
            }
        }
        if !d.bursts.is_empty() {
            write!(
                h,
                "<h3>Write bursts</h3><table><tr><th class='l'>start</th><th>duration s</th><th>written bytes</th><th>peak MB/s</th><th class='l'>write size</th><th>read p99 us</th><th>queue mean</th><th>discards after</th><th class='l'>written by</th></tr>"
            )?;
            for b in &d.bursts {
                write!(
                    h,
                    "<tr><td class='l'>{}</td><td>{:.1}</td><td>{}</td><td>{:.0}</td><td class='l'>{:.0}% {}</td><td>{:.0}</td><td>{:.1}</td><td>{} ({} bytes)</td><td class='l'>{}</td></tr>",
                    escape(&b.start),
                    b.duration_s,
                    b.write_bytes,
                    b.peak_mb_per_s,
                    b.dominant_write_size_pct,
                    escape(&b.dominant_write_size),
                    b.read_p99_us,
                    b.queue_depth_mean,
                    b.discards_after,
                    b.discard_bytes_after,
                    escape(&crate::analysis::bursts::writers_text(&b.writers))
                )?;
            }
            let r = &d.reads_during_bursts;
            write!(
                h,
                "</table><p>Reads during bursts: {} IOs, p99 {:.0} us, queue {:.1}; outside: {} IOs, p99 {:.0} us, queue {:.1}.</p>",
                r.inside_ios,
                r.inside_p99_us,
                r.inside_queue_depth_mean,
                r.outside_ios,
                r.outside_p99_us,
                r.outside_queue_depth_mean
            )?;
        }
        if !d.queue_depth_spikes.is_empty() {
            write!(
                h,
                "<h3>Queue-depth spikes</h3><table><tr><th class='l'>start</th><th>duration s</th><th>peak mean depth</th><th>peak in flight</th></tr>"
            )?;
            for sp in &d.queue_depth_spikes {
                write!(
                    h,
                    "<tr><td class='l'>{}</td><td>{:.1}</td><td>{:.0}</td><td>{}</td></tr>",
                    escape(&sp.start),
                    sp.duration_s,
                    sp.peak_mean_depth,
                    sp.peak_inflight
                )?;
            }
            h.push_str("</table>");
        }
        if let Some(c) = &d.coverage {
            h.push_str("<h3>Coverage of the kernel's own counters</h3><ul>");
            for g in c.groups.iter().filter(|g| g.any()) {
                write!(
                    h,
                    "<li>{}</li>",
                    escape(&tracer_common::coverage::describe(g))
                )?;
            }
            h.push_str("</ul>");
        }
    }
    for def in crate::analysis::sections::SECTIONS {
        if let Some(v) = j.sections.get(def.name) {
            (def.html)(v, h)?;
        }
    }
    // Submitting tasks are user-controlled strings (a comm can be anything): escaped.
    let tasks = j
        .top_tasks
        .iter()
        .map(|t| format!("{} ({})", escape(&t.comm), t.pid))
        .collect::<Vec<_>>();
    if !tasks.is_empty() {
        write!(h, "<h3>Submitting tasks</h3><p>{}</p>", tasks.join(", "))?;
    }
    // Logs and stress output off the trace's clock: why their sections are missing.
    for w in &j.time_warnings {
        write!(h, "<p class='warn'>warning: {}</p>", escape(&w.message))?;
    }
    for (dev, m) in &j.flush_match {
        write!(
            h,
            "<h3>{}: write bursts vs application flushes</h3><p>flushes matched {} of {} (recall {:.2}); bursts matched {} of {} (precision {:.2}); tolerance {:.0} s</p>",
            escape(dev),
            m.flushes_matched,
            m.flushes,
            m.recall,
            m.bursts_matched,
            m.bursts,
            m.precision,
            m.tolerance_s
        )?;
        write!(
            h,
            "<table><tr><th class='l'>burst start</th><th class='l'>matches</th><th class='l'>written by</th></tr>"
        )?;
        for b in &m.burst_rows {
            write!(
                h,
                "<tr><td class='l'>{}</td><td class='l'>{}</td><td class='l'>{}</td></tr>",
                escape(&b.start),
                escape(&b.matched),
                escape(&b.writers)
            )?;
        }
        write!(
            h,
            "</table><table><tr><th class='l'>flush ({} under 1 MiB left out)</th><th class='l'>enqueued</th><th class='l'>completed</th><th class='l'>burst</th></tr>",
            m.small_flushes_ignored
        )?;
        for (table, start, end, hit) in &m.rows {
            write!(
                h,
                "<tr><td class='l'>{}</td><td class='l'>{}</td><td class='l'>{}</td><td class='l'>{}</td></tr>",
                escape(table),
                escape(start),
                escape(end),
                escape(hit.as_deref().unwrap_or("NO BURST"))
            )?;
        }
        h.push_str("</table>");
    }
    for (dev, c) in &j.compaction_discards {
        write!(
            h,
            "<h3>{}: compactions and the discards that follow</h3><p>{} of {} compactions followed by discards (completing within {:.0} s of \"Compacted\", before the next): {} discards, {} bytes</p><table><tr><th class='l'>compaction start</th><th class='l'>end</th><th>discards</th><th>bytes</th><th>first after s</th></tr>",
            escape(dev),
            c.followed_by_discards,
            c.compactions,
            c.window_s,
            c.discards,
            c.discard_bytes
        )?;
        for r in &c.rows {
            write!(
                h,
                "<tr><td class='l'>{}</td><td class='l'>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&r.start),
                escape(&r.end),
                r.discards,
                r.discard_bytes,
                r.first_discard_after_s
                    .map_or("-".to_string(), |f| format!("{f:.1}"))
            )?;
        }
        h.push_str("</table>");
    }
    let l = &j.lost;
    write!(
        h,
        "<p>Lost: {}{} IOs ({} ring drops, {} missed completions, {} kernel-skipped runs, {} untracked, {} unaccounted).</p>",
        match j.integrity.losses_from.as_str() {
            "none" => "unknown (cut short before the first stats frame); at least ",
            "last stats frame" => "at least ",
            _ => "",
        },
        l.total,
        l.ring_drops,
        l.missed_completions,
        l.recursion_misses,
        l.untracked,
        l.unaccounted
    )?;
    h.push_str("</body></html>\n");
    Ok(())
}
