//! `cargo xtask experiment raid-chunk`: a Cassandra node's traced IO replayed onto real md
//! RAID0 arrays of each chunk size in the VM lab, each array's members beside `blkprof
//! whatif`'s prediction from the source trace.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use super::{Arm, ExpOptions, Name, arm_options, read_seconds};
use crate::cassandra;
use crate::util::root;

/// Members of the arrays, and the guest disks' size: larger than the source's whole disk.
const RAID_MEMBERS: u32 = 4;

pub(super) fn raid_chunk(e: &ExpOptions, arms: &[Arm], out: &Path, started: Instant) -> Result<()> {
    let (source, origin) = source(e, out)?;
    let r = tracer_common::format::TraceReader::open(&source)
        .with_context(|| format!("reading {}", source.display()))?;
    let h = r.header();
    let [disk] = h.devices.as_slice() else {
        bail!(
            "{}: a single disk's trace is replayed; this one has {} devices",
            source.display(),
            h.devices.len()
        );
    };
    let disk = disk.name.clone();
    // The arrays must hold every offset of the source's disk.
    let disk_bytes = std::fs::read_to_string(format!("/sys/class/block/{disk}/size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|sectors| sectors * 512);
    let max_end = max_offset(&source)?;
    let need = disk_bytes.unwrap_or(0).max(max_end);
    let member_mb = (need.div_ceil(u64::from(RAID_MEMBERS)) >> 20) + 128;

    // --recompare: the arrays' traces are there; only the tables are made again.
    if !e.recompare {
        replay(&source, &disk, need, member_mb, arms, out)?;
    }

    // Per chunk: the real array's members (its trace's arrays section) beside whatif's.
    let source_empty: u64 = data_ios(&source)?.empty.values().sum();
    let mut table = String::new();
    writeln!(
        table,
        "source: {} ({disk}); fio replays reads, writes and syncs (not discards): compared are the\n\
         members' reads and writes that carry data (md sends each flush to each member as an empty\n\
         write with the device flush: the empty column; whatif counts it as the flush only)\n",
        source.display()
    )?;
    writeln!(
        table,
        "{:>6}  {:>6}  {:>9} {:>9} {:>7} {:>7}  {:>9} {:>9}  {:>8} {:>6} {:>6}  {:>9}  real sizes (top 3)",
        "chunk",
        "member",
        "real r+w",
        "whatif",
        "diff",
        "empty",
        "real MB",
        "mean KB",
        "qd mean",
        "qd max",
        "p99 ms",
        "split IOs",
    )?;
    let mut worst: f64 = 0.0;
    let mut summary = Vec::new();
    for arm in arms {
        summary.push(compare_chunk(
            arm,
            &source,
            &disk,
            source_empty,
            out,
            &mut table,
            &mut worst,
        )?);
        table.push('\n');
    }
    writeln!(
        table,
        "whatif's per-member reads+writes against the real arrays': worst {worst:.1}% (held to 5%)"
    )?;
    std::fs::write(out.join("compare.txt"), &table)?;
    write_page(out, &table, &summary, &origin)?;
    println!("{table}");
    for l in &summary {
        println!("{l}");
    }
    eprintln!(
        "experiment raid-chunk: done in {:.0} s; {} (README.md, compare.txt, vm/)",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    if worst > 5.0 {
        bail!("whatif's prediction is off the real arrays by up to {worst:.1}% (more than 5%)");
    }
    Ok(())
}

/// The source trace (--source, or the readahead experiment's 128 KB arm, traced first when
/// missing), kept in `out`; and where it came from, for the page.
fn source(e: &ExpOptions, out: &Path) -> Result<(PathBuf, String)> {
    // The source: a Cassandra node's disk, traced on this machine.
    let source = if let Some(s) = &e.source {
        s.canonicalize()
            .with_context(|| format!("--source {}", s.display()))?
    } else {
        let default = root().join("target/experiments/readahead/ra128/cassandra.blkp");
        if !default.exists() {
            eprintln!(
                "experiment raid-chunk: no {}: tracing a Cassandra node first (the readahead experiment's 128 KB arm)",
                default.display()
            );
            let ra = ExpOptions {
                name: Name::Readahead,
                out: None,
                recompare: false,
                resume: false,
                source: None,
                arms: vec![128],
                repeat: 1,
                ..*e
            };
            let arm = Arm {
                name: "ra128".into(),
                value: 128,
            };
            let dir = default.parent().expect("arm directory").to_path_buf();
            let java = cassandra::prepare()?;
            cassandra::run_node(&arm_options(&ra, "readahead", &arm, 0, &dir), &java)?;
        }
        default
    };
    // Kept with the experiment's results: the default source is rewritten by the next
    // readahead experiment.
    let kept = out.join("source.blkp");
    if source != kept && !e.recompare {
        std::fs::copy(&source, &kept)
            .with_context(|| format!("copying {} to {}", source.display(), kept.display()))?;
    }
    // Where the source came from, said on the page (also after --recompare).
    let origin_file = out.join("source-origin.txt");
    if !e.recompare {
        let o = source
            .strip_prefix(root())
            .unwrap_or(&source)
            .display()
            .to_string();
        std::fs::write(&origin_file, o)?;
    }
    let origin = std::fs::read_to_string(&origin_file)
        .map_or_else(|_| source.display().to_string(), |s| s.trim().to_string());
    let source = if kept.exists() { kept } else { source };
    Ok((source, origin))
}

/// The source's IO exported as an fio iolog and replayed in the VM lab onto an md RAID0 of
/// each chunk size, traced: the arrays' traces in `out`/vm.
fn replay(
    source: &Path,
    disk: &str,
    need: u64,
    member_mb: u64,
    arms: &[Arm],
    out: &Path,
) -> Result<()> {
    let blkprof = root().join("target/release/blkprof");
    let iolog = out.join("source.iolog");
    let exported = Command::new(&blkprof)
        .arg("export")
        .arg(source)
        .args(["--format", "iolog", "--target", "/dev/md0", "-o"])
        .arg(&iolog)
        .output()?;
    if !exported.status.success() {
        bail!(
            "blkprof export failed: {}",
            String::from_utf8_lossy(&exported.stderr)
        );
    }
    let chunks: Vec<String> = arms.iter().map(|a| a.value.to_string()).collect();
    eprintln!(
        "experiment raid-chunk: replaying {} ({disk}, {:.1} GB of address space) onto md RAID0 of {RAID_MEMBERS} NVMe disks of {member_mb} MiB in a 6.12 guest, chunks {} KB",
        source.display(),
        need as f64 / 1e9,
        chunks.join(", ")
    );
    let mut cmd = vec![
        "sh".to_string(),
        root()
            .join("xtask/scripts/raid-chunk-vm.sh")
            .display()
            .to_string(),
        // The guest writes only under the VM's own output directory.
        out.join("vm").display().to_string(),
        iolog.display().to_string(),
    ];
    cmd.extend(chunks.iter().cloned());
    let vm = crate::vm::run_vm(&crate::vm::Options {
        kernel: "6.12".into(),
        disks: RAID_MEMBERS,
        disk_mb: member_mb,
        cpus: 2,
        memory_mb: 2048,
        timeout: 3600,
        mttcg: false,
        out: Some(out.join("vm")),
        command: cmd,
        console: None,
    })?;
    if vm.code != 0 {
        bail!(
            "the replay failed in the VM (exit code {}); its output is in {}",
            vm.code,
            vm.out.display()
        );
    }
    eprintln!(
        "experiment raid-chunk: the VM replayed every chunk in {:.0} s",
        vm.seconds
    );
    std::fs::write(out.join("vm-seconds.txt"), format!("{:.0}", vm.seconds))?;
    Ok(())
}

/// One chunk size's rows of the table (a row per member: the real array's reads and writes
/// beside whatif's), `worst` raised to its largest difference; its line of the summary.
fn compare_chunk(
    arm: &Arm,
    source: &Path,
    disk: &str,
    source_empty: u64,
    out: &Path,
    table: &mut String,
    worst: &mut f64,
) -> Result<String> {
    let trace = out.join("vm").join(format!("md{}.blkp", arm.value));
    let report = analyzer::summary::summarize(&trace, &analyzer::series::Options::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", trace.display()))?
        .to_json();
    let real = report.sections["arrays"]["arrays"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "md0"))
        .cloned()
        .with_context(|| format!("{}: no md0 in its arrays section", trace.display()))?;
    let w = analyzer::whatif::whatif(
        source,
        &analyzer::whatif::Options {
            raid0: analyzer::whatif::Raid0::new(RAID_MEMBERS, u64::from(arm.value) * 1024)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            device: Some(disk.to_string()),
            offset_bytes: 0,
        },
    )
    .map_err(|e| anyhow::anyhow!("whatif on {}: {e}", source.display()))?;
    let predicted = serde_json::to_value(&w)?;
    let real_ios = data_ios(&trace)?;
    let (real_data, real_empty) = (&real_ios.data, &real_ios.empty);
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let fl = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let mut real_rw = Vec::new();
    for slot in 0..RAID_MEMBERS {
        let p = &predicted["array"]["members"][slot as usize];
        let m = real["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["slot"] == slot))
            .with_context(|| format!("{}: no member in slot {slot}", trace.display()))?;
        let disk_name = m["disk"].as_str().unwrap_or("?");
        let r_rw = real_data.get(disk_name).copied().unwrap_or(0);
        // whatif copies each empty request to every member: not data.
        let p_rw = (n(p, "read_ios") + n(p, "write_ios")).saturating_sub(source_empty);
        let diff = if r_rw == 0 {
            0.0
        } else {
            (p_rw as f64 - r_rw as f64) * 100.0 / r_rw as f64
        };
        *worst = worst.max(diff.abs());
        real_rw.push(r_rw);
        writeln!(
            table,
            "{:>5}K  {:>6}  {:>9} {:>9} {:>+6.1}% {:>7}  {:>9.1} {:>9.1}  {:>8.2} {:>6} {:>6}  {:>9}  {}",
            arm.value,
            disk_name,
            r_rw,
            p_rw,
            diff,
            real_empty.get(disk_name).copied().unwrap_or(0),
            fl(m, "bytes") / 1e6,
            fl(m, "mean_request_bytes") / 1024.0,
            fl(m, "queue_depth_mean"),
            n(m, "queue_depth_max"),
            m["p99_total_us"]
                .as_f64()
                .map_or("-".into(), |v| format!("{:.1}", v / 1e3)),
            if slot == 0 {
                format!("{:.1}%", fl(&predicted["splits"], "pct_split"))
            } else {
                String::new()
            },
            real_ios.top_sizes(disk_name),
        )?;
    }
    let most = real_rw.iter().copied().max().unwrap_or(0) as f64;
    let mean = real_rw.iter().sum::<u64>() as f64 / f64::from(RAID_MEMBERS);
    Ok(format!(
        "chunk {:>3} KB: members' reads+writes {}; busiest over mean {:.2} (whatif {:.2}); {:.1}% of the source's reads and writes split across members",
        arm.value,
        real_rw
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
        if mean > 0.0 { most / mean } else { 0.0 },
        w.imbalance_ios(),
        fl(&predicted["splits"], "pct_split"),
    ))
}

/// The experiment's page (README.md): how it was made, the summary, the table.
fn write_page(out: &Path, table: &str, summary: &[String], origin: &str) -> Result<()> {
    let took = read_seconds(&out.join("vm-seconds.txt"));
    let mut p = String::new();
    writeln!(
        p,
        "# md RAID0 chunk size under Cassandra's IO (seed 000)\n\n\
         Made by `cargo xtask experiment raid-chunk` (as root, from the repository) on this machine; \
         the nested VM (boot and the four arms' replays) took {} min {} s.\n\n\
         The source is a Cassandra node's data disk traced on this machine (`source.blkp`, \
         copied from `{}`: YCSB workload A, read_ahead_kb 128, the readahead experiment's \
         baseline arm). Its reads, writes and syncs are replayed \
         with their timing by fio (`blkprof export --format iolog`, then `fio --read_iolog`) onto a real \
         md RAID0 of {RAID_MEMBERS} emulated NVMe disks in a nested VM (stock Debian 6.12 kernel, \
         `cargo xtask vm`), once per chunk size, traced by blkprof-trace (`--device md0` traces the \
         members). Cassandra itself does not run in the VM: the guest's CPU is emulated (TCG, \
         about 3x slower than this host), and a JVM there would not keep up; replaying its IO \
         gives each chunk size the same requests in the same order. Discards are not replayed \
         (fio 3.33 does not replay trims). Latencies are the emulated disks' and say nothing \
         about real NVMe; the per-member counts, sizes and depths are the array's own.\n",
        took / 60,
        took % 60,
        origin
    )?;
    writeln!(p, "## Per chunk size\n")?;
    for l in summary {
        writeln!(p, "- {l}")?;
    }
    writeln!(
        p,
        "\n## Per member: the real array beside `blkprof whatif --raid0 {RAID_MEMBERS} --chunk C` on the source\n"
    )?;
    writeln!(p, "```\n{table}```")?;
    std::fs::write(out.join("README.md"), p)?;
    Ok(())
}

/// Per disk of a trace: its reads and writes that carry data (and their sizes), and its empty
/// ones (not the flush machinery's own flushes).
#[derive(Default)]
struct DataIos {
    data: std::collections::BTreeMap<String, u64>,
    empty: std::collections::BTreeMap<String, u64>,
    sizes: std::collections::BTreeMap<String, std::collections::BTreeMap<u32, u64>>,
}

impl DataIos {
    /// The disk's three commonest request sizes with their shares: "4K 62% 16K 21% 8K 9%".
    fn top_sizes(&self, disk: &str) -> String {
        let Some(m) = self.sizes.get(disk) else {
            return "-".into();
        };
        let total: u64 = m.values().sum();
        let mut v: Vec<(u32, u64)> = m.iter().map(|(&b, &n)| (b, n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.iter()
            .take(3)
            .map(|&(b, n)| {
                let size = if b % 1024 == 0 {
                    format!("{}K", b / 1024)
                } else {
                    format!("{b}B")
                };
                let pct = n as f64 * 100.0 / total.max(1) as f64;
                if pct < 1.0 {
                    format!("{size} <1%")
                } else {
                    format!("{size} {pct:.0}%")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn data_ios(path: &Path) -> Result<DataIos> {
    use tracer_common::op::StatGroup;
    let mut r = tracer_common::format::TraceReader::open(path)?;
    let names: std::collections::HashMap<u32, String> = r
        .header()
        .devices
        .iter()
        .map(|d| (d.dev(), d.name.clone()))
        .collect();
    let mut d = DataIos::default();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            if !matches!(rec.stat_group(), StatGroup::Read | StatGroup::Write) {
                continue;
            }
            let name = names
                .get(&rec.dev)
                .cloned()
                .unwrap_or_else(|| rec.dev.to_string());
            if rec.bytes > 0 {
                *d.sizes
                    .entry(name.clone())
                    .or_default()
                    .entry(rec.bytes)
                    .or_insert(0) += 1;
                *d.data.entry(name).or_insert(0) += 1;
            } else {
                *d.empty.entry(name).or_insert(0) += 1;
            }
        }
    }
    Ok(d)
}

/// The end of the furthest read, write or discard in the trace, bytes.
fn max_offset(path: &Path) -> Result<u64> {
    let mut r = tracer_common::format::TraceReader::open(path)?;
    let mut buf = Vec::new();
    let mut end = 0u64;
    while r.next_chunk(&mut buf)? {
        // Data IOs only: a flush carries no address.
        for rec in buf.iter().filter(|r| {
            matches!(
                r.op,
                tracer_common::op::Op::Read
                    | tracer_common::op::Op::Write
                    | tracer_common::op::Op::Discard
            ) && r.bytes > 0
        }) {
            end = end.max(
                rec.sector
                    .saturating_mul(512)
                    .saturating_add(u64::from(rec.bytes)),
            );
        }
    }
    Ok(end)
}
