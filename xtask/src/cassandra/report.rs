//! The report of a run: `blkprof report` over the trace, YCSB's output and the node's log.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::RunOutput;
use crate::util::{output, root};

/// The report of a run in `out` (its trace, YCSB's output, the node's log): report.txt and
/// report/ (HTML, JSON, charts). Run again on a finished run after a change to the analyzer.
pub(crate) fn report(out: &Path) -> Result<RunOutput> {
    let trace = out.join("cassandra.blkp");
    let logs = out.join("cassandra-logs");
    let report_dir = out.join("report");
    let mut rep = Command::new(root().join("target/release/blkprof"));
    rep.arg("report")
        .arg(&trace)
        .arg("--stress")
        .arg(out.join("ycsb-run.txt"))
        .arg("--stress")
        .arg(out.join("ycsb-run.err"))
        .arg("--app-log")
        .arg(logs.join("system.log"))
        // Node and client run with -Duser.timezone=UTC, whatever the host's zone (which
        // the trace records and the report would otherwise read their logs in).
        .args(["--app-log-tz", "UTC", "--stress-tz", "UTC"])
        .arg("-o")
        .arg(&report_dir);
    let text = output(&mut rep)?;
    let report_txt = out.join("report.txt");
    std::fs::write(&report_txt, &text)?;
    // -o writes the JSON report beside the HTML, named after the trace.
    let report_json = report_dir.join("cassandra.json");
    Ok(RunOutput {
        report_json,
        report_txt,
    })
}
