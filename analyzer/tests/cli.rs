//! The CLI as a user runs it: exit codes and messages.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::path::PathBuf;
use std::process::Command;

fn blkprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blkprof"))
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

#[test]
fn check_exits_0_on_pass_1_on_fail_2_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let o = blkprof()
        .arg("report")
        .arg(golden("cassandra-shaped-a.blkp"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success());
    std::fs::write(&base, &o.stdout).unwrap();
    let junit = dir.path().join("junit.xml");
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-b.blkp"))
        .arg("--baseline")
        .arg(&base)
        .arg("--junit")
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("failures=\"0\"")
    );
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-bigger-writes.blkp"))
        .arg("--baseline")
        .arg(&base)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("FAIL   write.mean_request_bytes") && out.contains("from the baseline"),
        "{out}"
    );
    // Bad input: no baseline or rules, a trace as baseline, a missing trace.
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-b.blkp"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-b.blkp"))
        .arg("--baseline")
        .arg(golden("cassandra-shaped-a.blkp"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a `blkprof report --json` document"));
    let o = blkprof()
        .args(["report", "/nonexistent.blkp"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.blkp"));
}

#[test]
fn report_of_a_non_trace_and_of_an_unknown_version_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.blkp");
    std::fs::write(&p, b"not a trace at all").unwrap();
    let o = blkprof().arg("report").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a blkprof trace file"));
    let mut v = b"BLKPTRC\0".to_vec();
    v.extend_from_slice(&[7, 0, 0, 0]);
    std::fs::write(&p, &v).unwrap();
    let o = blkprof().arg("report").arg(&p).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("version 7 is not supported"));
}

#[test]
fn output_dir_gets_html_json_and_every_chart_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let o = blkprof()
        .arg("report")
        .arg(golden("cassandra-shaped-a.blkp"))
        .arg("-o")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for ext in ["html", "json"] {
        assert!(
            dir.path()
                .join(format!("cassandra-shaped-a.{ext}"))
                .exists(),
            "{ext}"
        );
    }
    for chart in ["throughput", "iops", "latency", "queue"] {
        let base = dir.path().join(format!("cassandra-shaped-a-loop1-{chart}"));
        let svg = std::fs::read_to_string(base.with_extension("svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("seconds since trace start"));
        let png = std::fs::read(base.with_extension("png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{chart}.png is a PNG");
        // IHDR: width and height.
        assert_eq!(
            (
                u32::from_be_bytes(png[16..20].try_into().unwrap()),
                u32::from_be_bytes(png[20..24].try_into().unwrap())
            ),
            (960, 280)
        );
        assert!(png.len() > 20_000, "{chart}.png has content");
    }
}

/// A task name with terminal controls (a crafted or imported trace): the text report shows
/// it escaped and sends no control character to the terminal.
#[test]
fn names_from_a_trace_reach_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controls.blkp");
    let mut ios = analyzer::synth::cassandra_like(10, 500, &[(3.0, 1.0, 500.0)]);
    let meta = analyzer::synth::Meta {
        comm: Some("\x1b[2J\x1b]0;x\x07".into()),
        ..Default::default()
    };
    analyzer::synth::write_trace_with(&path, &mut ios, &meta).unwrap();
    let o = blkprof().arg("report").arg(&path).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        !text
            .bytes()
            .any(|b| b.is_ascii_control() && b != b'\n' && b != b'\t'),
        "{text}"
    );
    assert!(text.contains("\\x1b[2J\\x1b]0;x\\x07"), "{text}");
}

/// A saved report whose series claim an interval of 1e308 s (crafted or damaged) is refused:
/// drawn, its time axis overflowed to infinity and the charts never finished.
#[test]
fn a_saved_report_with_an_absurd_interval_is_refused_not_drawn_forever() {
    let dir = tempfile::tempdir().unwrap();
    let o = blkprof()
        .arg("report")
        .arg(golden("cassandra-shaped-a.blkp"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success());
    let mut j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for (field, value) in [
        ("interval_s", 1e308),
        ("fine_interval_s", -1.0),
        ("interval_s", 0.0),
    ] {
        let mut bad = j.clone();
        bad["devices"][0]["series"][field] = serde_json::json!(value);
        let path = dir.path().join("bad.json");
        std::fs::write(&path, serde_json::to_vec(&bad).unwrap()).unwrap();
        let mut child = blkprof()
            .arg("report")
            .arg("--from-json")
            .arg(&path)
            .arg("-o")
            .arg(dir.path().join("out"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A deadline so that a regression fails instead of hanging the suite.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("{field} = {value}: still drawing after 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{field} = {value}: {err}");
        assert!(
            err.contains(field) && err.contains("not a blkprof report"),
            "{err}"
        );
    }
    // The report as saved renders.
    j["devices"][0]["series"]["interval_s"] = serde_json::json!(1.0);
    let path = dir.path().join("good.json");
    std::fs::write(&path, serde_json::to_vec(&j).unwrap()).unwrap();
    let o = blkprof()
        .arg("report")
        .arg("--from-json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A rotated trace's name has a dot before its number (`db.000003.blkp`): each chart is a
/// file of its own, named after the whole stem.
#[test]
fn charts_of_a_rotated_trace_do_not_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let rotated = dir.path().join("db.000003.blkp");
    std::fs::copy(golden("cassandra-shaped-a.blkp"), &rotated).unwrap();
    let out = dir.path().join("out");
    let o = blkprof()
        .arg("report")
        .arg(&rotated)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for chart in ["throughput", "iops", "latency", "queue"] {
        for ext in ["svg", "png"] {
            let f = out.join(format!("db.000003-loop1-{chart}.{ext}"));
            assert!(f.exists(), "{}", f.display());
        }
    }
    assert!(!out.join("db.svg").exists());
}

/// cassandra-stress prints elapsed seconds only: --stress-start puts its intervals on the
/// trace's clock. (The fixture's run and the golden trace are different runs; the start here
/// is chosen to overlap the trace, to show the placement, not a real correlation.)
#[test]
fn stress_start_places_elapsed_only_output_on_the_trace_clock() {
    let run = |start: Option<&str>| {
        let mut c = blkprof();
        c.arg("report")
            .arg(golden("cassandra-ycsb-a.blkp"))
            .arg("--stress")
            .arg(golden("cassandra-stress-mixed.txt"));
        if let Some(s) = start {
            c.args(["--stress-start", s]);
        }
        c.output().unwrap()
    };
    let o = run(None);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        !text.contains("client vs loop0"),
        "no clock, no side-by-side"
    );

    let o = run(Some("2026-11-22T06:10:15Z"));
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("client vs loop0"), "{text}");
    assert!(
        text.contains("2026-11-22T06:10:16.000Z      1842"),
        "{text}"
    );

    let o = run(Some("yesterday"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected a UTC time"));
}

/// Baselines saved by older versions still load: `check` against them passes on the same
/// workload recorded again (fields added since are read with their defaults).
#[test]
fn baselines_saved_by_older_versions_still_load() {
    for commit in ["643dbfc", "770dcaa"] {
        let base = golden(&format!("old-reports/cassandra-shaped-a.{commit}.json"));
        let o = blkprof()
            .arg("check")
            .arg(golden("cassandra-shaped-b.blkp"))
            .arg("--baseline")
            .arg(&base)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{commit}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// `--baseline` given several times: the default rules compare with the range the baselines
/// span, and the table shows it.
#[test]
fn check_takes_several_baselines() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = Vec::new();
    for name in ["cassandra-shaped-a", "cassandra-shaped-b"] {
        let json = dir.path().join(format!("{name}.json"));
        let o = blkprof()
            .arg("report")
            .arg(golden(&format!("{name}.blkp")))
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success());
        std::fs::write(&json, &o.stdout).unwrap();
        args.push("--baseline".into());
        args.push(json.into_os_string());
    }
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-b.blkp"))
        .args(&args)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // The two recordings' read p50: 14.6 and 15.9 us.
    assert!(out.contains("14.6..15.9"), "{out}");
    let o = blkprof()
        .arg("check")
        .arg(golden("cassandra-shaped-bigger-writes.blkp"))
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

/// A failed import leaves no half-written trace behind and does not clobber a file that was
/// there; a successful one replaces it.
#[test]
fn a_failed_import_leaves_no_partial_trace_and_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.csv");
    std::fs::write(
        &good,
        "128166372003061629,hm,0,Read,3154137088,4096,1497\n128166372003071629,hm,0,Write,3154137088,4096,1497\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "128166372003061629,hm,0,Read,3154137088,4096,1497\n12816637200306X629,hm,0,Read,1,4096,1\n",
    )
    .unwrap();
    let out = dir.path().join("t.blkp");
    let import = |input: &std::path::Path| {
        blkprof()
            .args(["import", "--from", "msr"])
            .arg(input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap()
    };
    // No file before: a failure leaves none.
    let o = import(&bad);
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists(), "a half-written trace was left");
    assert!(!dir.path().join("t.blkp.part").exists());
    // A file before: a failure keeps it as it was.
    std::fs::write(&out, b"what was there").unwrap();
    assert_eq!(import(&bad).status.code(), Some(2));
    assert_eq!(std::fs::read(&out).unwrap(), b"what was there");
    // Success replaces it with a readable trace.
    let o = import(&good);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = blkprof().arg("report").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("read"));
}

/// A profile of one's own (comm rules work on a trace without files): each IO in the first
/// class whose rule holds, counted as `blkprof export --format csv` counts the same IOs; a
/// damaged profile is refused with its line, exit 2.
#[test]
fn a_profile_of_ones_own_classes_each_io_once() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("mine.classes");
    std::fs::write(
        &profile,
        "profile mine\n# the flush writer's writes, then the rest of the writes\nflusher writes: op=write comm=MemtableFlushWr*\nother writes: op=write\nreads: op=read\n",
    )
    .unwrap();
    let trace = golden("cassandra-ycsb-a.blkp");
    let o = blkprof()
        .arg("report")
        .arg(&trace)
        .arg("--classes")
        .arg(&profile)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["class_profile"], "mine");
    let d = &j["devices"][0];
    let class = |name: &str| {
        d["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["class"] == name)
            .map_or((0, 0), |c| {
                (c["ios"].as_u64().unwrap(), c["bytes"].as_u64().unwrap())
            })
    };
    // The same IOs counted from the CSV export, row by row.
    let csv = blkprof()
        .args(["export", "--format", "csv"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(csv.status.success());
    let mut rd = csv::Reader::from_reader(&csv.stdout[..]);
    let h = rd.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    let (op, comm, bytes, dev) = (col("op"), col("comm"), col("bytes"), col("device"));
    let mut want = std::collections::BTreeMap::<&str, (u64, u64)>::new();
    let first = d["name"].as_str().unwrap();
    for r in rd.records() {
        let r = r.unwrap();
        if &r[dev] != first {
            continue;
        }
        let c = match &r[op] {
            "write" if r[comm].starts_with("MemtableFlushWr") => "flusher writes",
            "write" => "other writes",
            "read" => "reads",
            _ => "other",
        };
        let e = want.entry(c).or_default();
        e.0 += 1;
        e.1 += r[bytes].parse::<u64>().unwrap();
    }
    assert!(want["flusher writes"].0 > 0, "{want:?}");
    for (c, w) in &want {
        assert_eq!(class(c), *w, "{c}");
    }
    // The bursts are split by the same classes.
    let b = &d["bursts"][0];
    let split: u64 = b["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(split, b["write_bytes"].as_u64().unwrap(), "{b}");

    std::fs::write(&profile, "reads: op=read\nwrites: op=wirte\n").unwrap();
    let o = blkprof()
        .arg("report")
        .arg(&trace)
        .arg("--classes")
        .arg(&profile)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("line 2: op=wirte"), "{e}");
}
