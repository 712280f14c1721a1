//! Logs in local time: Cassandra's system.log and YCSB's status lines carry the host's wall
//! clock. Read in the right zone they match the trace exactly as UTC logs do; read in the
//! wrong one, the report says so and names the offset that fits.
//!
//! The shifted copies are made here from the golden run (tests/data/cassandra-ycsb-a.*),
//! whose node and client ran in UTC.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use analyzer::summary::JsonReport;
use common::{golden, json_report, stdout};
use tracer_common::format::{TraceReader, TraceWriter, comm_bytes};

/// `blkprof report` with `args`.
fn blkprof(args: &[&str]) -> Output {
    let mut a = vec!["report"];
    a.extend_from_slice(args);
    common::blkprof(&a)
}

/// `src` with every "YYYY-MM-DD HH:MM:SS" stamp that `stamp_at` finds in a line moved by
/// `hours`: the same events as logged by a host in UTC+hours.
fn shifted(src: &Path, dir: &Path, hours: i64, stamp_at: fn(&str) -> Option<usize>) -> PathBuf {
    let mut out = String::new();
    let mut moved = 0;
    for line in std::fs::read_to_string(src).unwrap().lines() {
        let stamp = stamp_at(line)
            .and_then(|i| Some((i, line.get(i..i + 19)?)))
            .and_then(|(i, s)| {
                Some((
                    i,
                    jiff::civil::DateTime::strptime("%Y-%m-%d %H:%M:%S", s).ok()?,
                ))
            });
        match stamp {
            Some((i, dt)) => {
                let local = dt
                    .checked_add(jiff::SignedDuration::from_hours(hours))
                    .unwrap();
                out.push_str(&line[..i]);
                out.push_str(&local.strftime("%Y-%m-%d %H:%M:%S").to_string());
                out.push_str(&line[i + 19..]);
                moved += 1;
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    assert!(moved > 50, "{moved} stamps moved in {}", src.display());
    let p = dir.join(format!(
        "{}.{hours:+}h",
        src.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&p, out).unwrap();
    p
}

/// Cassandra: "INFO  [thread] 2026-11-22 06:10:13,704 File.java:1 - ...".
fn log_stamp(line: &str) -> Option<usize> {
    line.find("] ").map(|i| i + 2)
}

/// YCSB: "2026-11-22 06:10:10:560 2 sec: ..." (status lines only).
fn ycsb_stamp(line: &str) -> Option<usize> {
    line.contains(" sec: ").then_some(0)
}

/// The golden trace, its header saying the tracing host was in `zone` at `offset_s`.
fn trace_in_zone(dir: &Path, offset_s: i32, zone: &str) -> PathBuf {
    let mut r = TraceReader::open(&golden("cassandra-ycsb-a.blkp")).unwrap();
    let mut h = r.header().clone();
    assert_eq!(
        (h.utc_offset_s, h.time_zone.as_str()),
        (0, ""),
        "an older trace"
    );
    (h.utc_offset_s, h.time_zone) = (offset_s, zone.into());
    let p = dir.join(format!("zoned{offset_s}.blkp"));
    let mut w = TraceWriter::create(&p, &h).unwrap();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf).unwrap() {
        for rec in &buf {
            w.push(rec, &comm_bytes(&r.tasks()[rec.task as usize].comm))
                .unwrap();
        }
    }
    w.finish(&r.trailer().unwrap().clone()).unwrap();
    p
}

const TRACE: &str = "cassandra-ycsb-a.blkp";

#[test]
fn a_log_in_utc_plus_2_matches_with_app_log_tz_exactly_as_the_utc_log() {
    let dir = tempfile::tempdir().unwrap();
    let trace = golden(TRACE);
    let utc_log = golden("cassandra-ycsb-a.system.log");
    let plus2 = shifted(&utc_log, dir.path(), 2, log_stamp);
    let run = |log: &Path, extra: &[&str]| {
        let mut a = vec![trace.to_str().unwrap(), "--app-log", log.to_str().unwrap()];
        a.extend_from_slice(extra);
        blkprof(&a)
    };

    let utc = run(&utc_log, &[]);
    let fixed = run(&plus2, &["--app-log-tz", "+02:00"]);
    assert_eq!(
        stdout(&fixed),
        stdout(&utc),
        "the same report, flush table and all"
    );
    assert!(stdout(&utc).contains("flushes matched 11 of 11"));
    let (u, f) = (
        json_report(&run(&utc_log, &["--json"])),
        json_report(&run(&plus2, &["--app-log-tz", "+02:00", "--json"])),
    );
    let same = |j: &JsonReport| {
        serde_json::to_string(&(&j.flush_match, &j.compaction_discards, &j.markers)).unwrap()
    };
    assert_eq!(same(&f), same(&u));
    assert_eq!(f.flush_match[0].1.flushes_matched, 11);
    assert!(f.time_warnings.is_empty() && u.time_warnings.is_empty());
    assert_eq!(f.time_zones.app_log.as_deref(), Some("+02:00"));
    assert_eq!(u.time_zones.app_log.as_deref(), Some("UTC"));

    // Read as UTC (the default for a trace without a zone), nothing falls inside the trace:
    // the report says so where the flush table would be, on stderr and in JSON.
    let o = run(&plus2, &[]);
    let t = stdout(&o);
    assert!(!t.contains("flushes matched"), "{t}");
    let hint = "11 of its flushes would match write bursts: try --app-log-tz +02:00";
    assert!(t.contains("\nwarning: ") && t.contains(hint), "{t}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(hint));
    let j = json_report(&run(&plus2, &["--json"]));
    assert!(j.flush_match.is_empty());
    let w = &j.time_warnings[0];
    assert_eq!((w.kind.as_str(), w.time_zone.as_str()), ("app-log", "UTC"));
    assert_eq!(w.suggested_offset.as_deref(), Some("+02:00"));
    assert!(w.also_fitting.is_empty(), "{w:?}");
    assert!(
        w.message.contains("no event falls inside the trace"),
        "{w:?}"
    );

    // An IANA name: Berlin is UTC+01:00 in November. A log written there matches with the
    // name; the UTC+02:00 log read as Berlin time is an hour off, and +02:00 is named.
    let berlin = shifted(&utc_log, dir.path(), 1, log_stamp);
    let o = run(&berlin, &["--app-log-tz", "Europe/Berlin"]);
    assert_eq!(stdout(&o), stdout(&utc));
    let j = json_report(&run(&plus2, &["--app-log-tz", "Europe/Berlin", "--json"]));
    let w = &j.time_warnings[0];
    assert_eq!(w.time_zone, "Europe/Berlin");
    assert_eq!(w.suggested_offset.as_deref(), Some("+02:00"));

    // A log of another day: no offset brings it onto the trace, and the report says that.
    let other_day = shifted(&utc_log, dir.path(), 48, log_stamp);
    let t = stdout(&run(&other_day, &[]));
    assert!(
        t.contains("no whole- or half-hour UTC offset brings any of them inside"),
        "{t}"
    );
}

#[test]
fn ycsb_status_lines_in_utc_plus_2_sit_beside_the_disk_with_stress_tz() {
    let dir = tempfile::tempdir().unwrap();
    let trace = golden(TRACE);
    let utc_err = golden("cassandra-ycsb-a.ycsb-run.err");
    let plus2 = shifted(&utc_err, dir.path(), 2, ycsb_stamp);
    let run = |f: &Path, extra: &[&str]| {
        let mut a = vec![trace.to_str().unwrap(), "--stress", f.to_str().unwrap()];
        a.extend_from_slice(extra);
        blkprof(&a)
    };
    // The side-by-side table (all but the line naming the file) is the same.
    let table = |t: String| {
        t.lines()
            .skip_while(|l| !l.contains("client vs"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let utc = table(stdout(&run(&utc_err, &[])));
    assert!(utc.contains("2026-11-22T06:10:10.560Z       258"), "{utc}");
    let fixed = table(stdout(&run(&plus2, &["--stress-tz", "+02:00"])));
    assert_eq!(fixed, utc);
    let (u, f) = (
        json_report(&run(&utc_err, &["--json"])),
        json_report(&run(&plus2, &["--stress-tz", "+02:00", "--json"])),
    );
    assert_eq!(
        serde_json::to_string(&f.stress[0].status).unwrap(),
        serde_json::to_string(&u.stress[0].status).unwrap()
    );
    assert!(f.time_warnings.is_empty());
    assert_eq!(f.time_zones.stress.as_deref(), Some("+02:00"));

    // Read as UTC: no side-by-side view, and the offset that fits is named.
    let o = run(&plus2, &[]);
    let t = stdout(&o);
    assert!(!t.contains("client vs"), "{t}");
    let hint = "64 of them would fall inside it: try --stress-tz +02:00";
    assert!(t.contains("  warning: ") && t.contains(hint), "{t}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(hint));
    let j = json_report(&run(&plus2, &["--json"]));
    let w = &j.time_warnings[0];
    assert_eq!((w.kind.as_str(), w.events), ("stress", 64));
    assert_eq!(w.suggested_offset.as_deref(), Some("+02:00"));
}

#[test]
fn the_zone_recorded_in_the_trace_is_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let utc_log = golden("cassandra-ycsb-a.system.log");
    let utc_err = golden("cassandra-ycsb-a.ycsb-run.err");
    let log2 = shifted(&utc_log, dir.path(), 2, log_stamp);
    let err2 = shifted(&utc_err, dir.path(), 2, ycsb_stamp);
    let reference = stdout(&blkprof(&[
        golden(TRACE).to_str().unwrap(),
        "--app-log",
        utc_log.to_str().unwrap(),
    ]));

    // A host at +02:00 with no zone name: its local logs match without any option.
    let t2 = trace_in_zone(dir.path(), 7200, "");
    let (t2, log2, err2) = (
        t2.to_str().unwrap(),
        log2.to_str().unwrap(),
        err2.to_str().unwrap(),
    );
    let j = json_report(&blkprof(&[
        t2,
        "--app-log",
        log2,
        "--stress",
        err2,
        "--json",
    ]));
    assert_eq!(j.time_zones.trace, "+02:00");
    assert_eq!(j.time_zones.app_log.as_deref(), Some("+02:00"));
    assert!(j.time_warnings.is_empty(), "{:?}", j.time_warnings);
    assert_eq!(j.flush_match[0].1.flushes_matched, 11);
    let t = stdout(&blkprof(&[t2, "--app-log", log2]));
    let after_header = |t: &str| t.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(after_header(&t), after_header(&reference));
    // ...and a log written in UTC on that host (as the project's own runs do) needs the option.
    let t = stdout(&blkprof(&[t2, "--app-log", utc_log.to_str().unwrap()]));
    assert!(t.contains("try --app-log-tz +00:00"), "{t}");
    let t = stdout(&blkprof(&[
        t2,
        "--app-log",
        utc_log.to_str().unwrap(),
        "--app-log-tz",
        "UTC",
    ]));
    assert_eq!(after_header(&t), after_header(&reference));

    // A named zone: Berlin in November is +01:00.
    let t1 = trace_in_zone(dir.path(), 3600, "Europe/Berlin");
    let log1 = shifted(&utc_log, dir.path(), 1, log_stamp);
    let j = json_report(&blkprof(&[
        t1.to_str().unwrap(),
        "--app-log",
        log1.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(j.time_zones.trace, "Europe/Berlin");
    assert_eq!(j.flush_match[0].1.flushes_matched, 11);
}

/// --stress-start takes an offset; a time without one is local time in --stress-tz.
#[test]
fn stress_start_with_an_offset_or_in_the_stress_zone() {
    let trace = golden(TRACE);
    let cs = golden("cassandra-stress-mixed.txt");
    let run = |extra: &[&str]| {
        let mut a = vec![trace.to_str().unwrap(), "--stress", cs.to_str().unwrap()];
        a.extend_from_slice(extra);
        stdout(&blkprof(&a))
    };
    let want = "2026-11-22T06:10:16.000Z      1842";
    for start in [
        &["--stress-start", "2026-11-22T06:10:15Z"][..],
        &["--stress-start", "2026-11-22T08:10:15+02:00"],
        &["--stress-start", "2026-11-22T03:40:15-02:30"],
        &[
            "--stress-start",
            "2026-11-22 08:10:15",
            "--stress-tz",
            "+02:00",
        ],
        &[
            "--stress-start",
            "2026-11-22 07:10:15",
            "--stress-tz",
            "Europe/Berlin",
        ],
        &[
            "--stress-start",
            "2026-11-22T06:10:15Z",
            "--stress-tz",
            "+02:00",
        ],
    ] {
        let t = run(start);
        assert!(t.contains(want), "{start:?}: {t}");
    }
    // Placed two hours off: no side-by-side, and what to check.
    let t = run(&["--stress-start", "2026-11-22 08:10:15"]);
    assert!(!t.contains(want));
    assert!(
        t.contains("they are placed by --stress-start: check it"),
        "{t}"
    );
}

#[test]
fn a_bad_zone_is_refused_with_the_forms_it_takes() {
    for opt in ["--app-log-tz", "--stress-tz"] {
        for bad in ["garbage", "+2", "Mars/Olympus_Mons", "+15:00"] {
            let o = blkprof(&[golden(TRACE).to_str().unwrap(), opt, bad]);
            assert_eq!(o.status.code(), Some(2), "{opt} {bad}");
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(
                e.contains(&format!("invalid value '{bad}' for '{opt} <TZ>'"))
                    && e.contains("+02:00"),
                "{opt} {bad}: {e}"
            );
        }
    }
    let o = blkprof(&[golden(TRACE).to_str().unwrap(), "--app-log-tz", "garbage"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("an IANA name such as Europe/Berlin"));
}
