//! Importers into the trace format. MSR Cambridge / SNIA block traces (CSV):
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, with Timestamp in Windows
//! FILETIME (100 ns ticks since 1601) when the IO was issued, Offset and Size in bytes, and
//! ResponseTime in 100 ns ticks. Field mapping and what the format cannot know:
//! docs/importers.md.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use tracer_common::format::{DeviceInfo, IoRecord, TraceHeader, TraceTrailer, TraceWriter};
use tracer_common::op::{Op, flags};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: {what} (expected Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime with Type Read or Write and numbers elsewhere); use --skip-bad to skip such lines")]
    Malformed { path: PathBuf, line: u64, what: String },
    #[error("{path}: no IO lines")]
    Empty { path: PathBuf },
    #[error(transparent)]
    Write(#[from] tracer_common::format::FormatError),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportStats {
    pub records: u64,
    pub skipped: u64,
    pub first_skipped: Option<String>,
}

/// Windows FILETIME epoch (1601) to Unix epoch, in 100 ns ticks.
const FILETIME_UNIX_OFFSET: u64 = 116_444_736_000_000_000;

pub fn import_msr(input: &Path, output: &Path, skip_bad: bool) -> Result<ImportStats, ImportError> {
    let f = std::fs::File::open(input).map_err(|source| ImportError::Read { path: input.to_owned(), source })?;
    let mut stats = ImportStats::default();
    let mut writer: Option<TraceWriter> = None;
    let mut devices: Vec<(String, u32)> = Vec::new();
    let mut base = 0u64;
    let mut last_ns = 0u64;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| ImportError::Read { path: input.to_owned(), source })?;
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parse_msr_line(&line);
        let (ts, host, disk, op, off, size, resp) = match parsed {
            Ok(v) => v,
            Err(what) => {
                if !skip_bad {
                    return Err(ImportError::Malformed { path: input.to_owned(), line: n, what });
                }
                stats.skipped += 1;
                stats.first_skipped.get_or_insert(format!("line {n}: {what}"));
                continue;
            }
        };
        let issue_ns = ts.saturating_sub(FILETIME_UNIX_OFFSET) * 100;
        let name = format!("{host}_{disk}");
        let minor = match devices.iter().position(|d| d.0 == name) {
            Some(p) => devices[p].1,
            None => {
                let m = devices.len() as u32;
                devices.push((name.clone(), m));
                if let Some(w) = writer.as_mut() {
                    w.write_device(&DeviceInfo { name: name.clone(), major: 0, minor: m, logical_block_size: 512 })?;
                }
                m
            }
        };
        if writer.is_none() {
            base = issue_ns;
            let header = TraceHeader {
                tracer_version: format!("blkprof import msr {}", env!("CARGO_PKG_VERSION")),
                host: host.to_string(),
                kernel: "unknown (imported from an MSR Cambridge trace)".into(),
                wall_clock_start_ns: issue_ns as i64,
                monotonic_base_ns: issue_ns,
                devices: vec![DeviceInfo { name: name.clone(), major: 0, minor, logical_block_size: 512 }],
                ..Default::default()
            };
            writer = Some(TraceWriter::create(output, &header)?);
        }
        let complete = issue_ns + resp * 100;
        last_ns = last_ns.max(complete);
        let r = IoRecord {
            complete_ns: complete,
            enter_ns: issue_ns,
            issue_ns,
            sector: off / 512,
            bytes: size,
            dev: tracer_common::dev_join(0, minor),
            op,
            // Unknown in this format: submitter, queue depth, OS queue time, flags.
            flags: flags::STARTED_BEFORE,
            ..Default::default()
        };
        writer.as_mut().expect("created above").push(&r, &[0; 16])?;
        stats.records += 1;
    }
    let Some(w) = writer else { return Err(ImportError::Empty { path: input.to_owned() }) };
    w.finish(&TraceTrailer {
        wall_clock_end_ns: last_ns as i64,
        monotonic_end_ns: last_ns,
        reason: "import".into(),
        records_in_file: stats.records,
        ..Default::default()
    })?;
    let _ = base;
    Ok(stats)
}

type MsrLine<'a> = (u64, &'a str, &'a str, Op, u64, u32, u64);

fn parse_msr_line(line: &str) -> Result<MsrLine<'_>, String> {
    let f: Vec<&str> = line.trim().split(',').collect();
    if f.len() != 7 {
        return Err(format!("{} fields instead of 7", f.len()));
    }
    let num = |i: usize, what: &str| f[i].trim().parse::<u64>().map_err(|_| format!("{what} {:?} is not a number", f[i]));
    let op = match f[3].trim() {
        "Read" | "read" | "R" => Op::Read,
        "Write" | "write" | "W" => Op::Write,
        other => return Err(format!("Type {other:?} is neither Read nor Write")),
    };
    let size = u32::try_from(num(5, "Size")?).map_err(|_| format!("Size {:?} is too large", f[5]))?;
    Ok((num(0, "Timestamp")?, f[1].trim(), f[2].trim(), op, num(4, "Offset")?, size, num(6, "ResponseTime")?))
}
