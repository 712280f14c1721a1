//! The YCSB client: workload A through the project's CQL binding.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::run::Run;
use super::scratch::{Scratch, wait_child};
use super::{CQL_PORT, Options, VM_SLOWDOWN, tail};
use crate::util::interrupted;

pub(super) const WORKLOAD_A: &str = "\
# YCSB core workload A (update heavy: 50% reads, 50% updates, zipfian), as shipped by YCSB.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0
requestdistribution=zipfian
";

/// The driver's request timeout: its default 10 s, longer on the VM lab's emulated CPU
/// (where creating the schema alone took more than 10 s).
pub(super) fn cql_timeout_ms(o: &Options) -> u64 {
    if o.in_vm {
        10_000 * u64::from(VM_SLOWDOWN)
    } else {
        10_000
    }
}

/// YCSB's phase `word` ("load", or "run" for its transactions) with `extra` properties, its
/// output in --out (ycsb-WORD.txt and .err); waited for up to `timeout`.
pub(super) fn phase(
    s: &mut Scratch,
    r: &Run,
    word: &str,
    extra: &[String],
    timeout: Duration,
) -> Result<()> {
    let flag = if word == "load" { "-load" } else { "-t" };
    let mut c = ycsb(r.java, &r.jars.client_cp, flag, r.o, &r.workload, extra);
    let err = r.out.join(format!("ycsb-{word}.err"));
    c.stdout(std::fs::File::create(
        r.out.join(format!("ycsb-{word}.txt")),
    )?)
    .stderr(std::fs::File::create(&err)?);
    let what = format!("ycsb {word}");
    s.spawn(&what, &mut c, Duration::from_secs(10))?;
    let st = wait_child(s, &what, timeout)?;
    if !st.success() {
        bail!(
            "YCSB {word} failed ({st}); the end of its output:\n{}",
            tail(&err, 20)
        );
    }
    Ok(())
}

/// YCSB's `phase` (`-load` or `-t`) against the node, with `extra` properties.
fn ycsb(
    java: &Path,
    client_cp: &str,
    phase: &str,
    o: &Options,
    workload: &Path,
    extra: &[String],
) -> Command {
    let mut c = Command::new(java);
    c.args([
        "-Xmx1G",
        "-Duser.timezone=UTC",
        "-cp",
        client_cp,
        "site.ycsb.Client",
    ])
    .arg(phase)
    .args(["-db", "blkprof.ycsb.CqlDb", "-P"])
    .arg(workload)
    .args([
        "-s",
        "-threads",
        &o.threads.to_string(),
        "-p",
        &format!("recordcount={}", o.records),
        "-p",
        &format!("cql.port={CQL_PORT}"),
        "-p",
        &format!("fieldcount={}", o.field_count),
        "-p",
        &format!("fieldlength={}", o.field_length),
        "-p",
        &format!("writeallfields={}", o.write_all_fields),
        "-p",
        &format!("cql.timeout_ms={}", cql_timeout_ms(o)),
    ]);
    for e in extra {
        c.args(["-p", e]);
    }
    c
}

/// The CQL binding's own test (`CqlBindingIT`), against the node.
pub(super) fn binding_test(r: &Run) -> Result<()> {
    let it_out = r.out.join("binding-test.txt");
    let st = Command::new(r.java)
        .args(["-Duser.timezone=UTC", "-cp", &r.jars.test_cp])
        .arg("-Dcql.host=127.0.0.1")
        .arg(format!("-Dcql.port={CQL_PORT}"))
        .arg(format!("-Dcql.timeout_ms={}", cql_timeout_ms(r.o)))
        .args(["org.junit.runner.JUnitCore", "blkprof.ycsb.CqlBindingIT"])
        .stdout(std::fs::File::create(&it_out)?)
        .stderr(Stdio::inherit())
        .process_group(0)
        .status()?;
    interrupted()?;
    if !st.success() {
        bail!(
            "the CQL binding's test against the node failed:\n{}",
            tail(&it_out, 40)
        );
    }
    eprintln!(
        "cassandra: binding test passed against the node ({})",
        it_out.display()
    );
    Ok(())
}

/// YCSB's load phase: `--records` documents, the schema created first.
pub(super) fn load(s: &mut Scratch, r: &Run) -> Result<()> {
    let t = Instant::now();
    eprintln!(
        "cassandra: loading {} YCSB records ({} threads)",
        r.o.records, r.o.threads
    );
    phase(
        s,
        r,
        "load",
        &[
            "cql.create_schema=true".into(),
            format!("operationcount={}", r.o.records),
            "status.interval=5".into(),
        ],
        Duration::from_secs(1800 * u64::from(r.slow)),
    )?;
    eprintln!("cassandra: loaded in {:.0} s", t.elapsed().as_secs_f64());
    Ok(())
}
