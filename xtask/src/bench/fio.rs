//! The fio runs: 4 KB random direct reads on a device, as fast as it goes (iodepth 32) or at
//! a fixed rate.

use std::process::Command;

use anyhow::{Context as _, Result};

use super::accounting::cpu_jiffies;
use crate::util::output;

/// fio's IOPS and the share of the machine's CPU time that was busy meanwhile.
pub(super) fn fio_iops_busy(dev: &str, seconds: u64) -> Result<(f64, f64)> {
    let (b0, a0) = cpu_jiffies();
    let iops = fio_iops(dev, seconds)?;
    let (b1, a1) = cpu_jiffies();
    Ok((iops, (b1 - b0) as f64 / (a1 - a0).max(1) as f64))
}

/// fio's IOPS for `seconds` of 4 KB random direct reads at iodepth 32.
pub(super) fn fio_iops(dev: &str, seconds: u64) -> Result<f64> {
    let out = randread("bench", dev, 32, None, seconds)?;
    let start = out.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&out[start..])?;
    v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio JSON has no read iops")
}

/// fio reading `dev` at `rate` IOPS for `seconds` (iodepth 8), for a load at a fixed rate.
pub(super) fn fio_at_rate(dev: &str, rate: u64, seconds: u64) -> Result<()> {
    randread("agent", dev, 8, Some(rate), seconds)?;
    Ok(())
}

/// fio job `name`: 4 KB random direct reads of `dev` (libaio, `iodepth`), at `rate` IOPS or as
/// fast as they go, for `seconds`; its JSON output.
fn randread(
    name: &str,
    dev: &str,
    iodepth: u32,
    rate: Option<u64>,
    seconds: u64,
) -> Result<String> {
    let mut args = vec![
        format!("--name={name}"),
        format!("--filename={dev}"),
        "--rw=randread".into(),
        "--bs=4k".into(),
        "--direct=1".into(),
        "--ioengine=libaio".into(),
        format!("--iodepth={iodepth}"),
    ];
    args.extend(rate.map(|r| format!("--rate_iops={r}")));
    args.extend([
        format!("--runtime={seconds}"),
        "--time_based".into(),
        "--output-format=json".into(),
    ]);
    output(Command::new("fio").args(&args))
}
