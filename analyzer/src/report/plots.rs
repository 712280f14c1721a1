//! Charts of the time series, drawn with plotters as SVG (no font files needed: plotters
//! estimates text size, and the browser renders the text).

use plotters::prelude::*;

use crate::numeric::{f64_to_u8_saturating, f64_to_usize_saturating};
use crate::report::model::{JsonDevice, JsonReport};

pub struct Line<'a> {
    pub label: &'a str,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// Register the bundled font once: PNG output needs glyphs, and text layout needs metrics.
/// False if it could not be registered: then no chart can lay out its text.
fn fonts() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        // DejaVu Sans (free license, analyzer/assets/DejaVuSans.LICENSE): no system fonts needed.
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../../assets/DejaVuSans.ttf"),
        )
        .is_ok()
    })
}

/// Whether a chart was drawn whole; a chart that was not is replaced by [`svg_error`] (or its
/// PNG is an error), never shown with parts missing.
type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// One chart: lines over seconds since the trace start, shaded spans (bursts) and vertical
/// markers (application log events).
pub struct Chart<'a> {
    pub name: String,
    pub title: String,
    pub y_label: &'a str,
    pub lines: Vec<Line<'a>>,
    pub spans: Vec<(f64, f64)>,
    pub marks: Vec<f64>,
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &Chart<'_>,
) -> Drawn<DB> {
    if !fonts() {
        // Without the font no text can be laid out.
        return Err(DrawingAreaErrorKind::LayoutError);
    }
    root.fill(&WHITE)?;
    let x_max = c
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let y_max = c
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.08;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since trace start")
        .y_desc(c.y_label)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for &(a, b) in &c.spans {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, y_max)],
            RGBColor(255, 200, 120).mix(0.35).filled(),
        )))?;
    }
    for &m in &c.marks {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(m, 0.0), (m, y_max)],
            RGBColor(120, 120, 220).mix(0.5),
        )))?;
    }
    for l in &c.lines {
        let color = l.color;
        chart
            .draw_series(LineSeries::new(
                l.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(l.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()
}

impl Chart<'_> {
    pub fn svg(&self) -> String {
        let mut svg = String::new();
        let drawn = draw(
            &SVGBackend::with_string(&mut svg, (960, 280)).into_drawing_area(),
            self,
        );
        if drawn.is_ok() {
            svg
        } else {
            svg_error(&self.title)
        }
    }

    pub fn png(&self, path: &std::path::Path) -> std::io::Result<()> {
        draw(
            &BitMapBackend::new(path, (960, 280)).into_drawing_area(),
            self,
        )
        .map_err(|e| drawing_failed(path, &e))
    }
}

/// A line chart as SVG.
pub fn line_chart(
    title: &str,
    y_label: &str,
    lines: &[Line<'_>],
    spans: &[(f64, f64)],
    marks: &[f64],
) -> String {
    Chart {
        name: String::new(),
        title: title.into(),
        y_label,
        lines: lines
            .iter()
            .map(|l| Line {
                label: l.label,
                color: l.color,
                points: l.points.clone(),
            })
            .collect(),
        spans: spans.to_vec(),
        marks: marks.to_vec(),
    }
    .svg()
}

fn svg_error(title: &str) -> String {
    format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='40'><text x='10' y='25'>{}: no data</text></svg>",
        crate::report::format::escape(title)
    )
}

const READ: RGBColor = RGBColor(31, 119, 180);
const WRITE: RGBColor = RGBColor(214, 39, 40);
const DISCARD: RGBColor = RGBColor(44, 160, 44);
const OTHER: RGBColor = RGBColor(148, 103, 189);
/// The IO classes' lines, in the profile's order (Cassandra: commit log, flush, compaction,
/// query reads, fs metadata, discard, other).
const CLASS_COLORS: [RGBColor; 7] = [
    RGBColor(44, 160, 44),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(127, 127, 127),
    RGBColor(140, 86, 75),
    RGBColor(148, 103, 189),
];

/// What every chart of device `d` shows over its data, in seconds since the trace start: the
/// write bursts (spans) and the application log's completed flushes and compactions (marks)
/// up to `x_max`.
fn overlays(j: &JsonReport, d: &JsonDevice, x_max: f64) -> (Vec<(f64, f64)>, Vec<f64>) {
    let spans = d
        .bursts
        .iter()
        .map(|b| (b.start_s, b.start_s + b.duration_s))
        .collect();
    let marks = j
        .markers
        .iter()
        .filter(|m| m.kind == "flush-completed" || m.kind == "compaction-completed")
        .map(|m| (m.time_ns - j.start_unix_ns) as f64 / 1e9)
        .filter(|&x| x >= 0.0 && x <= x_max)
        .collect();
    (spans, marks)
}

/// The charts of device `d` of report `j`.
#[expect(
    clippy::too_many_lines,
    reason = "the charts, one after the other in the page's order"
)]
pub fn charts<'a>(j: &JsonReport, d: &'a JsonDevice) -> Vec<Chart<'a>> {
    let ser = &d.series;
    // Each value is plotted at the middle of its interval.
    let t = |i: usize| (i as f64 + 0.5) * ser.interval_s;
    let pts = |v: &[f64]| {
        v.iter()
            .enumerate()
            .map(|(i, &y)| (t(i), y))
            .collect::<Vec<_>>()
    };
    let wall0 = j.start_unix_ns;
    let (spans, marks) = overlays(j, d, t(ser.read_iops.len()));
    let chart = |name: &str, title: String, y_label: &'static str, lines: Vec<Line<'a>>| Chart {
        name: name.to_string(),
        title,
        y_label,
        lines,
        spans: spans.clone(),
        marks: marks.clone(),
    };
    let ms = |v: &[f64]| pts(&v.iter().map(|x| x / 1e3).collect::<Vec<_>>());
    // Writes at the resolution of burst detection (100 ms by default): per interval, a flush
    // of 2.5 MB in 0.1 s reads as 2.5 MB/s and hides exactly what this chart is for.
    let fine_s = ser.fine_interval_s;
    let fine_writes: Vec<(f64, f64)> = ser
        .fine_write_mb_per_s
        .iter()
        .enumerate()
        .map(|(i, &v)| ((i as f64 + 0.5) * fine_s, v))
        .collect();
    let fine_label: &'static str = if (fine_s - 0.1).abs() < 1e-9 {
        "write per 100 ms"
    } else {
        "write per detection bin"
    };
    let mut out = vec![
        chart(
            "throughput",
            format!(
                "{}: throughput (bursts shaded, log flushes/compactions as lines)",
                d.name
            ),
            "MB/s",
            vec![
                Line {
                    label: "read",
                    color: READ,
                    points: pts(&ser.read_mb_per_s),
                },
                Line {
                    label: "write",
                    color: WRITE,
                    points: pts(&ser.write_mb_per_s),
                },
                Line {
                    label: fine_label,
                    color: OTHER,
                    points: fine_writes,
                },
            ],
        ),
        // Discards get their own scale: a discard of a whole free block group is GB/s "throughput".
        chart(
            "discards",
            format!("{}: discards", d.name),
            "MB/s",
            vec![Line {
                label: "discard",
                color: DISCARD,
                points: pts(&ser.discard_mb_per_s),
            }],
        ),
        chart(
            "iops",
            format!("{}: IOPS", d.name),
            "IO/s",
            vec![
                Line {
                    label: "read",
                    color: READ,
                    points: pts(&ser.read_iops),
                },
                Line {
                    label: "write",
                    color: WRITE,
                    points: pts(&ser.write_iops),
                },
            ],
        ),
        chart(
            "latency",
            format!("{}: latency per interval (OS queue + device)", d.name),
            "ms",
            vec![
                Line {
                    label: "read p99",
                    color: READ,
                    points: ms(&ser.read_p99_us),
                },
                Line {
                    label: "read max",
                    color: OTHER,
                    points: ms(&ser.read_max_us),
                },
                Line {
                    label: "write p99",
                    color: WRITE,
                    points: ms(&ser.write_p99_us),
                },
            ],
        ),
        chart(
            "queue",
            format!("{}: queue depth (requests in the OS)", d.name),
            "requests",
            vec![
                Line {
                    label: "mean",
                    color: READ,
                    points: pts(&ser.queue_depth_mean),
                },
                Line {
                    label: "max at issue",
                    color: WRITE,
                    points: pts(&ser
                        .queue_depth_max
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect::<Vec<_>>()),
                },
            ],
        ),
    ];
    // Writes by IO class at the same resolution: which activity each burst is.
    if !ser.fine_class_write_mb_per_s.is_empty() {
        let lines = ser
            .fine_class_write_mb_per_s
            .iter()
            .zip(CLASS_COLORS.iter().cycle())
            .map(|(c, &color)| Line {
                label: &c.class,
                color,
                points: c
                    .mb_per_s
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| ((i as f64 + 0.5) * fine_s, v))
                    .collect(),
            })
            .collect();
        out.insert(
            1,
            chart(
                "classes",
                format!(
                    "{}: writes by IO class ({}; bursts shaded)",
                    d.name,
                    fine_label.trim_start_matches("write ")
                ),
                "MB/s",
                lines,
            ),
        );
    }
    for run in &j.stress {
        let timed: Vec<_> = run
            .status
            .iter()
            .filter_map(|p| Some(((p.time_ns? - wall0) as f64 / 1e9, p)))
            .filter(|(x, _)| *x >= 0.0)
            .collect();
        if timed.is_empty() {
            continue;
        }
        let ops: Vec<(f64, f64)> = timed
            .iter()
            .map(|(x, p)| (*x, p.ops_per_s.unwrap_or(0.0)))
            .collect();
        let p99: Vec<(f64, f64)> = timed
            .iter()
            .map(|(x, p)| {
                (
                    *x,
                    p.latencies
                        .iter()
                        .filter_map(|l| l.p99_us.or(l.avg_us))
                        .fold(0.0, f64::max)
                        / 1e3,
                )
            })
            .collect();
        out.push(chart(
            "client-ops",
            format!("client ({}): operations per second", run.tool),
            "ops/s",
            vec![Line {
                label: "ops/s",
                color: READ,
                points: ops,
            }],
        ));
        out.push(chart(
            "client-latency",
            format!("client ({}): p99 latency (worst op)", run.tool),
            "ms",
            vec![Line {
                label: "p99",
                color: WRITE,
                points: p99,
            }],
        ));
    }
    out
}

/// A heatmap: IOs per cell of time (x) and a value's row (y), one panel per op, colour on a
/// log scale shared by the panels; the device's bursts (orange, in a strip above the cells and
/// outlined over them) and the log's markers (vertical lines) on top.
pub struct Heatmap {
    pub name: String,
    pub title: String,
    pub column_s: f64,
    /// Labels of the row edges (rows + 1), lowest first.
    pub edges: Vec<String>,
    /// (op, counts[row][column]).
    pub panels: Vec<(String, Vec<Vec<u64>>)>,
    pub spans: Vec<(f64, f64)>,
    pub marks: Vec<f64>,
}

const HEAT_PANEL_H: u32 = 210;
/// Height, in rows, of the strip above the cells where bursts are marked.
const BURST_STRIP: f64 = 0.08;

/// Colour of a cell of `x` IOs, the busiest cell holding `max`: white for none, then pale
/// yellow to dark red by log(x) / log(max).
fn heat_color(x: u64, max: u64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 4] = [
        [255.0, 237.0, 160.0],
        [254.0, 178.0, 76.0],
        [240.0, 59.0, 32.0],
        [128.0, 0.0, 38.0],
    ];
    if x == 0 {
        return [255, 255, 255];
    }
    let t = if max <= 1 {
        1.0
    } else {
        ((x as f64).ln() / (max as f64).ln()).clamp(0.0, 1.0)
    };
    let p = t * (STOPS.len() - 1) as f64;
    let i = f64_to_usize_saturating(p.floor()).min(STOPS.len() - 2);
    let f = p - i as f64;
    let mix = |k: usize| {
        f64_to_u8_saturating((STOPS[i][k] + (STOPS[i + 1][k] - STOPS[i][k]) * f).round())
    };
    [mix(0), mix(1), mix(2)]
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    h: &Heatmap,
) -> Drawn<DB> {
    if !fonts() {
        return Err(DrawingAreaErrorKind::LayoutError);
    }
    root.fill(&WHITE)?;
    let cols = h
        .panels
        .iter()
        .flat_map(|(_, m)| m.iter().map(Vec::len))
        .max()
        .unwrap_or(0);
    let rows = h.edges.len().saturating_sub(1);
    if cols == 0 || rows == 0 || h.panels.is_empty() {
        // Nothing to lay out.
        return Err(DrawingAreaErrorKind::LayoutError);
    }
    let max = h
        .panels
        .iter()
        .flat_map(|(_, m)| m.iter().flatten().copied())
        .max()
        .unwrap_or(0);
    let x_max = cols as f64 * h.column_s;
    let y_top = rows as f64 * (1.0 + BURST_STRIP);
    let areas = root.split_evenly((h.panels.len(), 1));
    for (area, (op, m)) in areas.iter().zip(&h.panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{}: {op} (IOs per cell, log colour scale: pale 1 .. dark {max})",
                    h.title
                ),
                ("sans-serif", 14),
            )
            .margin(6)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_top)?;
        let edge_label = |y: &f64| {
            let r = y.round();
            let i = f64_to_usize_saturating(r);
            if (y - r).abs() < 1e-6 && r >= 0.0 && i <= rows {
                h.edges[i].clone()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds since trace start")
            .y_labels(12)
            .y_label_formatter(&edge_label)
            .draw()?;
        // The cells, as one bitmap over the plotting area's pixels.
        let (x0, y0) = chart.backend_coord(&(0.0, rows as f64));
        let (x1, y1) = chart.backend_coord(&(x_max, 0.0));
        let (w_px, ht_px) = (
            (x1 - x0).max(1).unsigned_abs(),
            (y1 - y0).max(1).unsigned_abs(),
        );
        let (w, ht) = (w_px as usize, ht_px as usize);
        let mut buf = vec![0u8; w * ht * 3];
        for py in 0..ht {
            let row = rows - 1 - (py * rows / ht).min(rows - 1);
            let line = m.get(row);
            for px in 0..w {
                let col = px * cols / w;
                let x = line.and_then(|l| l.get(col)).copied().unwrap_or(0);
                let i = (py * w + px) * 3;
                buf[i..i + 3].copy_from_slice(&heat_color(x, max));
            }
        }
        if let Some(img) = BitMapElement::with_owned_buffer((0.0, rows as f64), (w_px, ht_px), buf)
        {
            chart.draw_series(std::iter::once(img))?;
        }
        let burst = RGBColor(255, 140, 0);
        for &(a, b) in &h.spans {
            chart.draw_series([
                Rectangle::new([(a, rows as f64), (b, y_top)], burst.filled()),
                Rectangle::new([(a, 0.0), (b, rows as f64)], burst.mix(0.6).stroke_width(1)),
            ])?;
        }
        for &t in &h.marks {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(t, 0.0), (t, y_top)],
                RGBColor(60, 60, 200).mix(0.6),
            )))?;
        }
    }
    root.present()
}

impl Heatmap {
    fn size(&self) -> (u32, u32) {
        let panels = u32::try_from(self.panels.len().max(1)).unwrap_or(u32::MAX);
        (960, HEAT_PANEL_H.saturating_mul(panels))
    }

    pub fn svg(&self) -> String {
        let mut svg = String::new();
        let drawn = draw_heatmap(
            &SVGBackend::with_string(&mut svg, self.size()).into_drawing_area(),
            self,
        );
        // plotters 0.3.7 writes the bitmap's media type as "png", which is no media type.
        if drawn.is_ok() {
            svg.replace("href=\"data:png;base64,", "href=\"data:image/png;base64,")
        } else {
            svg_error(&self.title)
        }
    }

    pub fn png(&self, path: &std::path::Path) -> std::io::Result<()> {
        draw_heatmap(
            &BitMapBackend::new(path, self.size()).into_drawing_area(),
            self,
        )
        .map_err(|e| drawing_failed(path, &e))
    }
}

fn drawing_failed(path: &std::path::Path, e: &dyn std::error::Error) -> std::io::Error {
    std::io::Error::other(format!("drawing {} failed: {e}", path.display()))
}

/// A latency as people write it, two significant digits: 96ns, 1.5us, 12ms, 3.0s.
fn short_ns(ns: u64) -> String {
    if ns == 0 {
        return "0".into();
    }
    let v = ns as f64;
    let (x, unit) = if v >= 1e9 {
        (v / 1e9, "s")
    } else if v >= 1e6 {
        (v / 1e6, "ms")
    } else if v >= 1e3 {
        (v / 1e3, "us")
    } else {
        (v, "ns")
    };
    if x >= 10.0 {
        format!("{x:.0}{unit}")
    } else {
        format!("{x:.1}{unit}")
    }
}

/// An offset on the device, as short as its axis needs: 0, 640MB, 5.6GB, 1.8TB.
fn offset_label(bytes: u64) -> String {
    const G: f64 = (1u64 << 30) as f64;
    let b = bytes as f64;
    if b >= 1024.0 * G {
        format!("{:.1}TB", b / (1024.0 * G))
    } else if b >= G {
        format!("{:.1}GB", b / G)
    } else {
        crate::analysis::sizes::human(bytes)
    }
}

/// The heatmaps of device `d` of report `j` (none unless the report was made with them).
pub fn heatmaps(j: &JsonReport, d: &JsonDevice) -> Vec<Heatmap> {
    // (file name, what y is, the map, how its row edges read)
    type Kind<'a> = (
        &'a str,
        &'a str,
        &'a crate::analysis::sections::heatmaps::Map,
        fn(u64) -> String,
    );
    let Some(m) = j
        .sections
        .get(crate::analysis::sections::heatmaps::DEF.name)
        .and_then(crate::analysis::sections::heatmaps::model)
    else {
        return Vec::new();
    };
    let Some(hd) = m.devices.iter().find(|x| x.name == d.name) else {
        return Vec::new();
    };
    let column_s = m.column_ns as f64 / 1e9;
    let x_max = hd.columns as f64 * column_s;
    let (spans, marks) = overlays(j, d, x_max);
    let maps: [Kind; 3] = [
        (
            "heatmap-latency",
            "total latency (OS queue + device)",
            &hd.latency,
            short_ns,
        ),
        (
            "heatmap-size",
            "request size",
            &hd.size,
            crate::analysis::sizes::human,
        ),
        (
            "heatmap-offset",
            "offset on the device",
            &hd.offset,
            offset_label,
        ),
    ];
    maps.into_iter()
        .filter(|(_, _, map, _)| !map.ops.is_empty())
        .map(|(name, what, map, label)| Heatmap {
            name: name.to_string(),
            title: format!("{}: {what}", d.name),
            column_s,
            edges: map.row_edges.iter().map(|&e| label(e)).collect(),
            panels: map.ops.iter().map(|o| (o.op.clone(), o.matrix())).collect(),
            spans: spans.clone(),
            marks: marks.clone(),
        })
        .collect()
}
