//! The stress tool's output and the application's logs (`--stress`, `--app-log`), for `report`
//! and `export --format perfetto`.

use std::path::PathBuf;

use analyzer::summary::Context;
use analyzer::zone::Zone;

/// The files given and the zones to read their local times in (`None`: the trace's zone).
pub(crate) struct AppInputs {
    pub(crate) stress: Vec<PathBuf>,
    pub(crate) stress_start: Option<analyzer::stress::StartTime>,
    pub(crate) stress_tz: Option<Zone>,
    pub(crate) app_logs: Vec<PathBuf>,
    pub(crate) app_log_tz: Option<Zone>,
}

impl AppInputs {
    /// Read them all, local times in the zones given or else in `trace_zone`; `notes`: also say
    /// on stderr what a file lacks (once, not per trace).
    pub(crate) fn read(&self, trace_zone: &Zone, notes: bool) -> Result<Context, String> {
        let stress_zone = self.stress_tz.as_ref().unwrap_or(trace_zone);
        let app_log_zone = self.app_log_tz.as_ref().unwrap_or(trace_zone);
        let mut context = Context::default();
        for p in &self.stress {
            let mut r =
                analyzer::stress::read_stress_in(p, stress_zone).map_err(|e| e.to_string())?;
            if let Some(start) = self.stress_start {
                let t = start
                    .unix_ns(stress_zone)
                    .ok_or("--stress-start: the time is out of range")?;
                analyzer::stress::anchor(&mut r, t);
            }
            context.stress.push(r);
        }
        for p in &self.app_logs {
            let l =
                analyzer::stress::read_app_log_in(p, app_log_zone).map_err(|e| e.to_string())?;
            if notes && l.flushes.is_empty() {
                eprintln!(
                    "blkprof: warning: {} has no flush lines (\"Enqueuing flush\" / \"Completed flushing\"): no flush markers to match",
                    p.display()
                );
            }
            context.logs.push(l);
        }
        Ok(context)
    }
}
