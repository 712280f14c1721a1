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
    let out = output(Command::new("fio").args([
        "--name=bench",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=json",
    ]))?;
    let start = out.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&out[start..])?;
    v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio JSON has no read iops")
}

/// fio reading `dev` at `rate` IOPS for `seconds` (iodepth 8), for a load at a fixed rate.
pub(super) fn fio_at_rate(dev: &str, rate: u64, seconds: u64) -> Result<()> {
    output(Command::new("fio").args([
        "--name=agent",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        &format!("--rate_iops={rate}"),
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=json",
    ]))?;
    Ok(())
}
