//! The run phase: blkprof-trace recording the data device while YCSB runs workload A.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::run::Run;
use super::scratch::Scratch;
use super::ycsb::phase;
use crate::util::{interrupted, root, sleep};

/// blkprof-trace on `devname` (with the files of each IO, and `labels`) for YCSB's run phase of
/// --duration seconds; the trace in --out.
pub(super) fn traced_run(s: &mut Scratch, r: &Run, devname: &str, labels: &[String]) -> Result<()> {
    let trace = r.out.join("cassandra.blkp");
    let trace_out = r.out.join("trace-summary.txt");
    let mut tracer = Command::new(root().join("target/release/blkprof-trace"));
    tracer
        // The files of each IO: SSTable components, the commit log, metadata.
        .args(["--device", devname, "--files", "--quiet", "--output"])
        .arg(&trace)
        .args(labels.iter().flat_map(|l| ["--label", l.as_str()]))
        .stdout(std::fs::File::create(&trace_out)?)
        .stderr(Stdio::piped());
    s.spawn("blkprof-trace", &mut tracer, Duration::from_secs(30))?;
    wait_attached(s)?;
    let t = Instant::now();
    eprintln!(
        "cassandra: tracing {devname}; YCSB workload A for {} s ({} threads)",
        r.o.duration, r.o.threads
    );
    phase(
        s,
        r,
        "run",
        &[
            // Stopped by maxexecutiontime; YCSB runs nothing with operationcount=0.
            "operationcount=2000000000".into(),
            format!("maxexecutiontime={}", r.o.duration),
            "status.interval=1".into(),
        ],
        Duration::from_secs(r.o.duration + 300 * u64::from(r.slow)),
    )?;
    sleep(Duration::from_secs(1))?;
    let st = s.stop("blkprof-trace");
    if !st.is_some_and(|st| st.success()) {
        bail!(
            "blkprof-trace did not end cleanly ({st:?}); see {}",
            trace_out.display()
        );
    }
    eprintln!(
        "cassandra: run phase traced for {:.0} s -> {}",
        t.elapsed().as_secs_f64(),
        trace.display()
    );
    Ok(())
}

/// blkprof-trace says "tracing ..." on stderr once the probe is attached.
fn wait_attached(s: &mut Scratch) -> Result<()> {
    let c = s.child("blkprof-trace").context("tracer not running")?;
    let mut err = c.stderr.take().context("tracer stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut seen = String::new();
        let mut sent = false;
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
            eprint!("{chunk}");
            seen.push_str(&chunk);
            if !sent && seen.contains("tracing ") {
                sent = true;
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "the receiver stops listening once it has given up waiting; then there is no one to tell"
                )]
                let _ = tx.send(());
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        interrupted()?;
        if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        let c = s.child("blkprof-trace").context("tracer not running")?;
        if let Some(st) = c.try_wait()? {
            bail!("blkprof-trace exited ({st}) before attaching (its messages are above)");
        }
        if Instant::now() > end {
            bail!("blkprof-trace did not attach within 60 s");
        }
    }
}
