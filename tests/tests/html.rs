//! The HTML report as a person sees it: rendered by a real browser (headless Chromium).

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::process::Command;

use analyzer::synth::{cassandra_like, write_trace};
use blkprof_e2e::{TestDir, bin};

#[test]
fn html_report_renders_in_chromium_without_console_errors() {
    let scratch = TestDir::new();
    let dir = scratch.join("html");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("planted.blkp");
    let mut ios = cassandra_like(40, 1500, &[(10.0, 2.0, 1500.0), (25.0, 3.0, 2500.0)]);
    write_trace(&trace, &mut ios).unwrap();
    let out = dir.join("report");
    let o = Command::new(bin("blkprof"))
        .arg("report")
        .arg(&trace)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = out.join("planted.html");
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(
        !text.contains("http://") || text.contains("http://www.w3.org/2000/svg"),
        "no network references"
    );
    assert!(!text.contains("<script"), "no scripts");

    let shot = out.join("planted.png");
    let c = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1100,2400",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium is installed (cargo xtask setup)");
    let log = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{log}");
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 50_000,
        "a real screenshot"
    );

    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("Write bursts"),
        "the bursts table is in the rendered page"
    );
    assert_eq!(
        dom.matches("<svg").count(),
        9,
        "for one device: five charts (throughput, discards, IOPS, latency, queue depth), the workload shape's IOs by offset and three heatmaps (latency, size, offset)"
    );
    // The heatmaps, as the browser parsed them: each a chart whose cells are one embedded
    // PNG, with a panel per op (reads and writes).
    for id in ["heatmap-latency", "heatmap-size", "heatmap-offset"] {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id} is missing from the rendered page"));
        let div = &dom[at..at + dom[at..].find("</div>").expect("closed")];
        assert_eq!(
            div.matches("<image").count(),
            2,
            "{id}: one bitmap of cells per op"
        );
        assert!(div.contains("data:image/png;base64,"), "{id}: cells inline");
        assert!(div.contains(": read (IOs per cell") && div.contains(": write (IOs per cell"));
    }
}
