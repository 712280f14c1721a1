//! Charts of the time series, drawn with plotters as SVG (no font files needed: plotters
//! estimates text size, and the browser renders the text).

use plotters::prelude::*;

use crate::summary::{JsonDevice, JsonReport};

pub struct Line<'a> {
    pub label: &'a str,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// Register the bundled font once: PNG output needs glyphs, and text layout needs metrics.
fn fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans (free license, analyzer/assets/DejaVuSans.LICENSE): no system fonts needed.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../assets/DejaVuSans.ttf"),
        );
    });
}

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

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, c: &Chart<'_>) -> bool {
    let _ = root.fill(&WHITE);
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
    let Ok(mut chart) = ChartBuilder::on(&root)
        .caption(&c.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
    else {
        return false;
    };
    let _ = chart
        .configure_mesh()
        .x_desc("seconds since trace start")
        .y_desc(c.y_label)
        .light_line_style(RGBColor(235, 235, 235))
        .draw();
    for &(a, b) in &c.spans {
        let _ = chart.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, y_max)],
            RGBColor(255, 200, 120).mix(0.35).filled(),
        )));
    }
    for &m in &c.marks {
        let _ = chart.draw_series(std::iter::once(PathElement::new(
            vec![(m, 0.0), (m, y_max)],
            RGBColor(120, 120, 220).mix(0.5),
        )));
    }
    for l in &c.lines {
        let color = l.color;
        if let Ok(s) = chart.draw_series(LineSeries::new(
            l.points.iter().copied(),
            color.stroke_width(2),
        )) {
            s.label(l.label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
    }
    let _ = chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw();
    root.present().is_ok()
}

impl Chart<'_> {
    pub fn svg(&self) -> String {
        fonts();
        let mut svg = String::new();
        let ok = draw(
            SVGBackend::with_string(&mut svg, (960, 280)).into_drawing_area(),
            self,
        );
        if ok { svg } else { svg_error(&self.title) }
    }

    pub fn png(&self, path: &std::path::Path) -> std::io::Result<()> {
        fonts();
        if draw(
            BitMapBackend::new(path, (960, 280)).into_drawing_area(),
            self,
        ) {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "drawing {} failed",
                path.display()
            )))
        }
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
        crate::html::escape(title)
    )
}

const READ: RGBColor = RGBColor(31, 119, 180);
const WRITE: RGBColor = RGBColor(214, 39, 40);
const DISCARD: RGBColor = RGBColor(44, 160, 44);
const OTHER: RGBColor = RGBColor(148, 103, 189);

/// The charts of device `d` of report `j`.
pub fn charts(j: &JsonReport, d: &JsonDevice) -> Vec<Chart<'static>> {
    let ser = &d.series;
    // Each value is plotted at the middle of its interval.
    let t = |i: usize| (i as f64 + 0.5) * ser.interval_s;
    let pts = |v: &[f64]| {
        v.iter()
            .enumerate()
            .map(|(i, &y)| (t(i), y))
            .collect::<Vec<_>>()
    };
    let spans: Vec<(f64, f64)> = d
        .bursts
        .iter()
        .map(|b| (b.start_s, b.start_s + b.duration_s))
        .collect();
    let wall0 = j.start_unix_ns;
    let marks: Vec<f64> = j
        .markers
        .iter()
        .filter(|m| m.kind == "flush-completed" || m.kind == "compaction-completed")
        .map(|m| (m.time_ns - wall0) as f64 / 1e9)
        .filter(|&x| x >= 0.0 && x <= t(ser.read_iops.len()))
        .collect();
    let chart =
        |name: &str, title: String, y_label: &'static str, lines: Vec<Line<'static>>| Chart {
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
