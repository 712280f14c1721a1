//! One self-contained HTML report: inline SVG charts, tables, no scripts, no network. The page
//! is `templates/report.html`: askama escapes every value put into it, except the charts' SVG
//! and the sections' HTML, which come rendered (and escaped) already.

use askama::Template;
use tracer_common::op::StatGroup;

use crate::analysis::bursts::Burst;
use crate::report::model::{JsonDevice, JsonOp, JsonReport, describe_labels, describe_queue};

/// The SVG that plotters wrote contains text we passed in (device names, titles): it is
/// escaped by plotters' SVG backend; embed it as is, after dropping the XML declaration.
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    j: &'a JsonReport,
    traces: String,
    labels: String,
    stopped: &'a str,
    devices: Vec<Device<'a>>,
    /// What the registered sections render, in their order.
    sections: String,
    lost_prefix: &'static str,
}

struct Device<'a> {
    d: &'a JsonDevice,
    queue: Option<String>,
    ops: Vec<OpRow<'a>>,
    charts: Vec<String>,
    /// (element id, SVG) of each heatmap.
    heatmaps: Vec<(String, String)>,
    /// Each burst with the tasks that wrote it and its IO classes, as the text report says
    /// them.
    bursts: Vec<(&'a Burst, String, String)>,
    /// Whether the bursts are split by IO class (a column then).
    classed: bool,
    /// The kernel's counters' groups that counted anything, described; None without coverage.
    coverage: Option<Vec<String>>,
}

struct OpRow<'a> {
    name: &'static str,
    o: &'a JsonOp,
    /// The three commonest block sizes: `90% 4KB, 10% 8KB`.
    mix: String,
}

fn device<'a>(j: &JsonReport, d: &'a JsonDevice) -> Device<'a> {
    let ops = StatGroup::ALL
        .map(StatGroup::name)
        .into_iter()
        .filter_map(|name| {
            let o = d.ops.get(name).filter(|o| o.ios > 0)?;
            let mix: Vec<String> = o
                .block_sizes
                .iter()
                .take(3)
                .map(|z| format!("{:.0}% {}", z.pct_ios, z.class))
                .collect();
            Some(OpRow {
                name,
                o,
                mix: mix.join(", "),
            })
        })
        .collect();
    Device {
        d,
        queue: d.queue.as_ref().and_then(describe_queue),
        ops,
        charts: crate::report::plots::charts(j, d)
            .iter()
            .map(|c| inline_svg(&c.svg()).to_string())
            .collect(),
        heatmaps: crate::report::plots::heatmaps(j, d)
            .iter()
            .map(|m| (m.name.clone(), inline_svg(&m.svg()).to_string()))
            .collect(),
        bursts: d
            .bursts
            .iter()
            .map(|b| {
                (
                    b,
                    crate::analysis::bursts::writers_text(&b.writers),
                    crate::analysis::bursts::classes_text(&b.classes),
                )
            })
            .collect(),
        classed: d.bursts.iter().any(|b| !b.classes.is_empty()),
        coverage: d.coverage.as_ref().map(|c| {
            c.groups
                .iter()
                .filter(|g| g.any())
                .map(tracer_common::coverage::describe)
                .collect()
        }),
    }
}

/// The report as one HTML page.
///
/// # Panics
///
/// Not in practice: the sections and the template write into a String, which does not fail,
/// and format only the model's values, with no fallible filter (the tests render every
/// section and the page).
pub fn render(j: &JsonReport) -> String {
    let mut sections = String::new();
    for def in crate::analysis::sections::SECTIONS {
        if let Some(v) = j.sections.get(def.name) {
            (def.html)(v, &mut sections).expect("writing into a String does not fail");
        }
    }
    let page = Page {
        j,
        traces: j.traces.join(", "),
        labels: describe_labels(&j.labels),
        stopped: j
            .integrity
            .stopped
            .as_deref()
            .unwrap_or("truncated or corrupt"),
        devices: j.devices.iter().map(|d| device(j, d)).collect(),
        sections,
        lost_prefix: match j.integrity.losses_from.as_str() {
            "none" => "unknown (cut short before the first stats frame); at least ",
            "last stats frame" => "at least ",
            _ => "",
        },
    };
    let mut h = page
        .render()
        .expect("the report's template renders into a String");
    h.push('\n');
    h
}

#[cfg(test)]
mod tests {
    use crate::report::model::{JsonDevice, JsonReport, JsonTask, TimeWarning};

    /// Every string a trace or a log controls goes through the template's escaper: a task or
    /// device name cannot add markup to the page.
    #[test]
    fn strings_from_the_trace_are_escaped() {
        let h = "<b>&'\"";
        let mut j = JsonReport {
            traces: vec![format!("t{h}")],
            host: format!("host{h}"),
            kernel: format!("kernel{h}"),
            devices: vec![JsonDevice {
                name: format!("dev{h}"),
                ..Default::default()
            }],
            top_tasks: vec![JsonTask {
                pid: 7,
                comm: format!("comm{h}"),
                ios: 1,
            }],
            time_warnings: vec![TimeWarning {
                message: format!("warn{h}"),
                ..Default::default()
            }],
            ..Default::default()
        };
        j.labels.insert("k".into(), format!("v{h}"));
        j.integrity.notes.push(format!("note{h}"));
        j.integrity.stopped = Some(format!("stopped{h}"));
        let page = super::render(&j);
        assert!(!page.contains("<b>"), "{page}");
        let e = "&lt;b&gt;&amp;&#39;&quot;";
        for s in [
            "<title>blkprof report: t",
            "host host",
            "kernel kernel",
            "<h2>dev",
            "<p>labels: k=v",
            "<p class='warn'>note",
            "did not end cleanly: stopped",
            "<p>comm",
            "warning: warn",
        ] {
            assert!(page.contains(&format!("{s}{e}")), "{s}: {page}");
        }
        assert!(page.ends_with("</body></html>\n"));
    }
}
