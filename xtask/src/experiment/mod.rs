//! `cargo xtask experiment NAME`: one of the seeds' A/B experiments, for real. Each arm is a
//! fresh Cassandra node under YCSB workload A (`cargo xtask cassandra` with the arm's setting),
//! everything else equal; then `blkprof compare` over the arms' reports, and one page that puts
//! them side by side (README.md in the output directory).
//!
//! Arms run one after the other on the same machine; with `--repeat N` each round starts one
//! arm later than the one before (A B C, B C A, C A B), so that no arm always runs first on a
//! cold machine or last on a warm one.

mod raid_chunk;

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
        return raid_chunk::raid_chunk(e, &arms, &out, started);
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
