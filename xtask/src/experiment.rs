//! `cargo xtask experiment NAME`: one of the seeds' A/B experiments, for real. Each arm is a
//! fresh Cassandra node under YCSB workload A (`cargo xtask cassandra` with the arm's setting),
//! everything else equal; then `blkprof compare` over the arms' reports, and one page that puts
//! them side by side (README.md in the output directory).
//!
//! Arms run one after the other on the same machine; with `--repeat N` each round starts one
//! arm later than the one before (A B C, B C A, C A B), so that no arm always runs first on a
//! cold machine or last on a warm one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use crate::cassandra::{self, Options};
use crate::util::{output, root};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[expect(
    clippy::doc_markdown,
    reason = "clap help text: backticks would show in --help"
)]
pub(crate) enum Name {
    /// Seed 002: read_ahead_kb 4096 (a CentOS default) vs 128 (the kernel's) vs 8 (the usual
    /// Cassandra advice) on the data disk.
    Readahead,
    /// Seed 001: documents of 2, 4, 8, 16 and 32 KB (10 fields of 205 to 3,277 bytes; updates
    /// write the whole document).
    Docsize,
    /// Seed 000: md RAID0 chunk size 4, 64, 256 and 512 KB on 4 disks. A Cassandra node's
    /// traced IO (the readahead experiment's 128 KB arm, or --source) is replayed with fio,
    /// with its timing, onto a real md RAID0 of four NVMe disks in the nested-VM lab, once per
    /// chunk size, traced; beside each, `blkprof whatif`'s prediction from the source trace.
    RaidChunk,
}

#[derive(clap::Args)]
pub(crate) struct ExpOptions {
    /// Which experiment.
    #[arg(value_enum)]
    pub name: Name,
    /// Seconds of YCSB workload A per arm (the traced run phase).
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// YCSB records per arm. Default: 400,000 for readahead (about 440 MB, twice the
    /// node's page cache); 20,000 for docsize
    /// (40 MB at 2 KB to 650 MB at 32 KB: the same documents, as the seed's fixed key range).
    #[arg(long)]
    pub records: Option<u64>,
    /// YCSB client threads.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Run every arm this many times, rotating the order each round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub repeat: u32,
    /// Only these arms (the experiment's values, comma-separated: 4096,8 or 2,32).
    #[arg(long, value_delimiter = ',')]
    pub arms: Vec<u32>,
    /// raid-chunk: the trace to replay onto the arrays (a single disk's, as blkprof-trace
    /// wrote it). Default: target/experiments/readahead/ra128/cassandra.blkp, made by a
    /// Cassandra run first when missing.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// Page cache (MiB) the node may use during the run (as `cargo xtask cassandra`).
    #[arg(long, default_value_t = 64)]
    pub page_cache_mib: u64,
    /// Output directory. Default: target/experiments/NAME.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run no node: report each arm's trace in the output directory again, compare them and
    /// rewrite the page (after a change to the analyzer).
    #[arg(long)]
    pub recompare: bool,
    /// Keep the arms already run to the end in the output directory (their trace and report
    /// are there); run only the others.
    #[arg(long)]
    pub resume: bool,
}

/// One arm: its name, its labels and how it sets the node up.
struct Arm {
    name: String,
    value: u32,
}

fn arms(e: &ExpOptions) -> Result<(&'static str, Vec<Arm>)> {
    let (exp, all): (&str, &[u32]) = match e.name {
        Name::Readahead => ("readahead", &[4096, 128, 8]),
        Name::Docsize => ("docsize", &[2, 4, 8, 16, 32]),
        Name::RaidChunk => ("raid-chunk", &[4, 64, 256, 512]),
    };
    let chosen: Vec<u32> = if e.arms.is_empty() {
        all.to_vec()
    } else {
        for a in &e.arms {
            if !all.contains(a) {
                bail!("{exp} has no arm {a}: its arms are {all:?}");
            }
        }
        e.arms.clone()
    };
    if chosen.len() < 2 {
        bail!("an experiment needs at least two arms");
    }
    let arms = chosen
        .into_iter()
        .map(|v| Arm {
            name: match e.name {
                Name::Readahead => format!("ra{v}"),
                Name::Docsize => format!("doc{v}k"),
                Name::RaidChunk => format!("chunk{v}k"),
            },
            value: v,
        })
        .collect();
    Ok((exp, arms))
}

/// The node options of one arm: everything but the arm's own setting equal across arms.
fn arm_options(e: &ExpOptions, exp: &str, arm: &Arm, round: u32, out: &Path) -> Options {
    let mut o = Options {
        duration: e.duration,
        records: e.records.unwrap_or(match e.name {
            Name::Docsize => 20_000,
            _ => 400_000,
        }),
        threads: e.threads,
        out: out.to_path_buf(),
        disk_gib: 8,
        page_cache_mib: e.page_cache_mib,
        read_ahead_kb: Some(128),
        field_count: 10,
        field_length: 100,
        write_all_fields: false,
        labels: vec![
            format!("experiment={exp}"),
            format!("arm={}", arm.name),
            format!("round={round}"),
        ],
        raid0: None,
        chunk_kb: 64,
        in_vm: false,
    };
    match e.name {
        Name::Readahead => {
            o.read_ahead_kb = Some(arm.value);
            o.labels.push(format!("read_ahead_kb={}", arm.value));
        }
        Name::Docsize => {
            // 10 fields: 2 KB = 10 x 205 bytes (2,050), as the seed's 5 x 409.
            o.field_length = (arm.value * 1024).div_ceil(10);
            o.write_all_fields = true;
            o.labels
                .push(format!("document_bytes={}", o.field_length * o.field_count));
        }
        Name::RaidChunk => unreachable!("refused in arms()"),
    }
    o
}

pub(crate) fn experiment(e: &ExpOptions) -> Result<()> {
    let started = Instant::now();
    let (exp, arms) = arms(e)?;
    let out = e
        .out
        .clone()
        .unwrap_or_else(|| root().join("target/experiments").join(exp));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let out = out.canonicalize()?;
    if e.name == Name::RaidChunk {
        return raid_chunk(e, &arms, &out, started);
    }
    let n = arms.len();
    let mut runs: Vec<(String, PathBuf)> = Vec::new();
    let took_file = out.join("took-seconds.txt");
    if e.recompare {
        for round in 0..e.repeat {
            for arm in &arms {
                let dir = run_dir(&out, arm, round, e.repeat);
                if !dir.join("cassandra.blkp").exists() {
                    bail!(
                        "--recompare: no {} (run the experiment with the same --arms and --repeat first)",
                        dir.join("cassandra.blkp").display()
                    );
                }
                let r = cassandra::report(&dir)?;
                runs.push((arm.name.clone(), r.report_json));
            }
        }
    } else {
        let java = cassandra::prepare()?;
        for round in 0..e.repeat {
            for k in 0..n {
                let arm = &arms[(k + round as usize) % n];
                let dir = run_dir(&out, arm, round, e.repeat);
                let o = arm_options(e, exp, arm, round, &dir);
                if e.resume && dir.join("report/cassandra.json").exists() {
                    eprintln!("experiment {exp}: arm {} already run: kept", arm.name);
                    runs.push((arm.name.clone(), cassandra::report(&dir)?.report_json));
                    continue;
                }
                eprintln!(
                    "experiment {exp}: arm {} (round {} of {}, run {} of {}), {:.0} s in",
                    arm.name,
                    round + 1,
                    e.repeat,
                    round as usize * n + k + 1,
                    n * e.repeat as usize,
                    started.elapsed().as_secs_f64()
                );
                let r = cassandra::run_node(&o, &java)
                    .with_context(|| format!("experiment {exp}, arm {}", arm.name))?;
                runs.push((arm.name.clone(), r.report_json));
            }
        }
        // Resumed: the arms kept took their time in the earlier run.
        let before: u64 = if e.resume {
            read_seconds(&took_file)
        } else {
            0
        };
        std::fs::write(
            &took_file,
            (before + started.elapsed().as_secs()).to_string(),
        )?;
    }
    let took_s = read_seconds(&took_file);
    // Arms in their own order for the comparison (the first is the baseline), rounds together.
    runs.sort_by_key(|(name, p)| {
        (
            arms.iter()
                .position(|a| &a.name == name)
                .unwrap_or(usize::MAX),
            p.clone(),
        )
    });
    let blkprof = root().join("target/release/blkprof");
    let reports: Vec<&PathBuf> = runs.iter().map(|(_, p)| p).collect();
    let text = output(Command::new(&blkprof).arg("compare").args(&reports))?;
    std::fs::write(out.join("compare.txt"), &text)?;
    let json = output(
        Command::new(&blkprof)
            .arg("compare")
            .args(&reports)
            .arg("--json"),
    )?;
    std::fs::write(out.join("compare.json"), &json)?;
    let page = readme(e, exp, &arms, &runs, &out, &text, took_s)?;
    std::fs::write(out.join("README.md"), page)?;
    println!("{text}");
    eprintln!(
        "experiment {exp}: {} runs in {:.0} s; {} (README.md, compare.txt, one directory per arm)",
        runs.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// The whole seconds a run wrote into `path` (`took-seconds.txt`, `vm-seconds.txt`); 0 when
/// the file is missing or not a number (a run from before it was kept).
fn read_seconds(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn run_dir(out: &Path, arm: &Arm, round: u32, repeat: u32) -> PathBuf {
    if repeat > 1 {
        out.join(format!("{}-r{round}", arm.name))
    } else {
        out.join(&arm.name)
    }
}

/// The experiment's page: what was run, how to rerun it, the comparison, the arms' reports.
fn readme(
    e: &ExpOptions,
    exp: &str,
    arms: &[Arm],
    runs: &[(String, PathBuf)],
    out: &Path,
    compare: &str,
    took_s: u64,
) -> Result<String> {
    let o = arm_options(e, exp, &arms[0], 0, out);
    let mut p = String::new();
    let (title, what) = match e.name {
        Name::Readahead => (
            "Read-ahead: read_ahead_kb 4096 vs 128 vs 8 under Cassandra (seed 002)",
            "Each arm sets the data disk's `read_ahead_kb` before the node starts; nothing else differs.",
        ),
        _ => (
            "Document size: 2 to 32 KB documents under Cassandra (seed 001)",
            "Each arm stores documents of 10 fields of the arm's size / 10 bytes (YCSB `fieldlength`), \
             and updates write the whole document (`writeallfields=true`, as the seed's writes); \
             the same number of records in every arm, so larger documents make a larger data set, \
             as in the seed's fixed key range.",
        ),
    };
    let mut cmd = format!("cargo xtask experiment {exp}");
    if e.duration != 60 {
        write!(cmd, " --duration {}", e.duration)?;
    }
    if let Some(r) = e.records {
        write!(cmd, " --records {r}")?;
    }
    if e.repeat != 1 {
        write!(cmd, " --repeat {}", e.repeat)?;
    }
    if !e.arms.is_empty() {
        let a: Vec<String> = e.arms.iter().map(u32::to_string).collect();
        write!(cmd, " --arms {}", a.join(","))?;
    }
    if let Some(o) = &e.out {
        write!(
            cmd,
            " --out {}",
            o.strip_prefix(root()).unwrap_or(o).display()
        )?;
    }
    writeln!(p, "# {title}\n")?;
    writeln!(
        p,
        "Made by `{cmd}` (as root, from the repository) in {} min {} s on this machine.\n",
        took_s / 60,
        took_s % 60
    )?;
    writeln!(
        p,
        "{what}\n\nPer arm, a fresh Cassandra 5.0.4 node (heap 2 GiB, 16 MiB memtables) on its own \
         ext4 loop device (8 GiB, direct IO to a sparse file), {records} YCSB records loaded, then \
         YCSB workload A (50% reads, 50% updates, zipfian) for {dur} s with {threads} client \
         threads, traced by blkprof-trace; the node's page cache held to about {pc} MiB by a \
         memory cgroup, so that reads reach the disk as on a node whose data is larger than \
         memory. Scaled to this machine (2 CPUs shared by node and client): the seeds ran \
         clusters of 6-8 nodes with 128-thread clients for hours; absolute ops/s and latencies \
         are this machine's, the differences between arms are the experiment.\n",
        records = o.records,
        dur = o.duration,
        threads = o.threads,
        pc = o.page_cache_mib + 128,
    )?;
    // compare's findings first, then its whole table.
    if let Some(i) = compare.find("\nFindings") {
        writeln!(p, "## What differs (`blkprof compare`'s findings)\n")?;
        writeln!(p, "```\n{}\n```\n", compare[i + 1..].trim_end())?;
    }
    writeln!(
        p,
        "## The arms side by side (`blkprof compare`, the first arm is the baseline)\n"
    )?;
    writeln!(p, "```\n{compare}```\n")?;
    writeln!(p, "## Each arm's report\n")?;
    for (name, json) in runs {
        // The arm's directory: the JSON report is in its report/.
        let dir = json.parent().and_then(Path::parent).unwrap_or(out);
        let rel = dir.strip_prefix(out).unwrap_or(dir).display().to_string();
        // The charts are named after the traced disk (loop0, loop1, ...).
        let disk = std::fs::read(json)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|j| j["devices"][0]["name"].as_str().map(str::to_string))
            .unwrap_or_else(|| "loop0".into());
        writeln!(
            p,
            "- **{name}**: [report.txt]({rel}/report.txt), [HTML]({rel}/report/cassandra.html) \
             (self-contained, every chart), \
             [block sizes over time]({rel}/report/cassandra-{disk}-heatmap-size.png); \
             YCSB's [output]({rel}/ycsb-run.txt)"
        )?;
    }
    Ok(p)
}

/// Members of the arrays, and the guest disks' size: larger than the source's whole disk.
const RAID_MEMBERS: u32 = 4;

#[expect(
    clippy::many_single_char_names,
    reason = "a long driver's short-lived values: e the options, r and h the reader and its header, w whatif's prediction, n a count read from JSON, p and m a predicted and a real member"
)]
fn raid_chunk(e: &ExpOptions, arms: &[Arm], out: &Path, started: Instant) -> Result<()> {
    let blkprof = root().join("target/release/blkprof");
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
        let iolog = out.join("source.iolog");
        let exported = Command::new(&blkprof)
            .arg("export")
            .arg(&source)
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
            &source,
            &analyzer::whatif::Options {
                raid0: analyzer::whatif::Raid0::new(RAID_MEMBERS, u64::from(arm.value) * 1024)
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
                device: Some(disk.clone()),
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
            worst = worst.max(diff.abs());
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
        summary.push(format!(
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
        ));
        table.push('\n');
    }
    writeln!(
        table,
        "whatif's per-member reads+writes against the real arrays': worst {worst:.1}% (held to 5%)"
    )?;
    std::fs::write(out.join("compare.txt"), &table)?;
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
    for l in &summary {
        writeln!(p, "- {l}")?;
    }
    writeln!(
        p,
        "\n## Per member: the real array beside `blkprof whatif --raid0 {RAID_MEMBERS} --chunk C` on the source\n"
    )?;
    writeln!(p, "```\n{table}```")?;
    std::fs::write(out.join("README.md"), p)?;
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
