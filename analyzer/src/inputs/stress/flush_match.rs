//! The trace's write bursts matched with the application log's flushes (and, for the rest,
//! its compactions), and the trace's IO classes checked against the log's account.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::{Compaction, Flush};

/// Flushes smaller than this cannot show as a burst and are left out of the match.
pub const MIN_MATCH_FLUSH_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct FlushMatch {
    pub flushes: usize,
    pub flushes_matched: usize,
    pub bursts: usize,
    pub bursts_matched: usize,
    pub precision: f64,
    pub recall: f64,
    pub tolerance_s: f64,
    pub small_flushes_ignored: usize,
    /// Bursts that match no flush but overlap a compaction (same tolerance).
    #[serde(default)]
    pub unmatched_in_compactions: usize,
    /// Per flush: (table, start, end, matched burst start if any).
    pub rows: Vec<(String, String, String, Option<String>)>,
    /// Per burst: what it matched ("flush", "compaction" or "none") and who wrote it.
    #[serde(default)]
    pub burst_rows: Vec<BurstMatch>,
    /// The IO classes the trace alone gave (`blkprof report --classes`) against the log; null
    /// without classes.
    pub classes: Option<ClassAgreement>,
}

/// The trace's IO classes against the application's log: each burst's class (of most of its
/// written bytes) against what the log says was going on (the flushes and compactions it
/// overlaps), and the class of each SSTable the trace saw made against the log's account of it
/// (flushed, or written by a compaction).
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct ClassAgreement {
    pub profile: String,
    pub bursts: usize,
    /// Bursts the log explains as a flush, and how many of them the trace labels flush.
    pub log_flush: usize,
    pub log_flush_labelled_flush: usize,
    /// Bursts the log explains as a compaction, and how many the trace labels compaction.
    pub log_compaction: usize,
    pub log_compaction_labelled_compaction: usize,
    /// Of those, the bursts that overlap both a flush and a compaction, explained by the
    /// flushes' logged sizes (see [`BurstMatch::log`]).
    pub log_both: usize,
    /// Bursts the log does not explain, and their labels.
    pub log_none: usize,
    pub log_none_labels: Vec<(String, usize)>,
    /// SSTables both the trace saw made and the log names, the trace's class and the log's
    /// agreeing; by the log's account.
    pub sstables_compared: usize,
    pub sstables_agree: usize,
    pub sstables_flushed: usize,
    pub sstables_compacted: usize,
    /// (path, the log's account, the trace's class), at most 20.
    pub sstables_disagree: Vec<(String, String, String)>,
    /// SSTables the trace saw made that the log does not name (made before its last line
    /// or not by a flush or compaction), and SSTables the log names that the trace did not see
    /// made (before or after the trace, or not written during it by a thread that is not
    /// writeback).
    pub sstables_trace_only: usize,
    pub sstables_log_only: usize,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct BurstMatch {
    pub start: String,
    pub matched: String,
    pub writers: String,
    /// The comm that wrote most of the burst ("-" if unknown).
    #[serde(default)]
    pub main_writer: String,
    /// Its IO class from the trace alone ("" without classes).
    pub class: String,
    /// What the log explains it as: "flush" when it overlaps a flush and no compaction, or
    /// both but the flushes it overlaps wrote (by the log's own sizes) at least half its bytes;
    /// "compaction" when it overlaps a compaction otherwise; else "none".
    pub log: String,
    /// It overlaps both a flush and a compaction.
    pub log_both: bool,
}

/// A detected burst for matching: wall-clock span, its start as text, its writers as text
/// and the comm that wrote most of it.
pub struct BurstSpan {
    pub start_ns: i64,
    pub end_ns: i64,
    pub start: String,
    pub writers: String,
    pub main_writer: String,
    /// Its IO class from the trace alone ("" without classes).
    pub class: String,
    /// Its written bytes.
    pub write_bytes: u64,
}

/// A burst matches a flush when it overlaps [enqueued - tol, completed + tol]. Bursts that
/// match no flush are checked against the compactions the same way, to say what they were.
pub fn match_flushes(
    flushes: &[Flush],
    compactions: &[Compaction],
    bursts: &[BurstSpan],
    tol_ns: i64,
    classes: Option<&crate::analysis::classes::Classes>,
) -> FlushMatch {
    let big: Vec<&Flush> = flushes
        .iter()
        .filter(|f| f.bytes.is_none_or(|b| b >= MIN_MATCH_FLUSH_BYTES))
        .collect();
    let overlaps = |f: &Flush, b: &BurstSpan| {
        b.start_ns <= f.end_ns + tol_ns && b.end_ns >= f.start_ns - tol_ns
    };
    let in_compaction = |b: &BurstSpan| {
        compactions
            .iter()
            .any(|c| b.start_ns <= c.end_ns + tol_ns && b.end_ns >= c.start_ns - tol_ns)
    };
    let mut rows = Vec::new();
    let mut fm = 0;
    for f in &big {
        let hit = bursts.iter().find(|b| overlaps(f, b));
        fm += usize::from(hit.is_some());
        rows.push((
            f.table.clone(),
            f.start.clone(),
            f.end.clone(),
            hit.map(|b| b.start.clone()),
        ));
    }
    let mut bm = 0;
    let mut in_comp = 0;
    let burst_rows: Vec<BurstMatch> = bursts
        .iter()
        .map(|b| {
            let flush = big.iter().any(|f| overlaps(f, b));
            let compaction = in_compaction(b);
            let flushed: u64 = big
                .iter()
                .filter(|f| overlaps(f, b))
                .map(|f| f.bytes.unwrap_or(u64::MAX))
                .fold(0, u64::saturating_add);
            let matched = if flush {
                bm += 1;
                "flush"
            } else if compaction {
                in_comp += 1;
                "compaction"
            } else {
                "none"
            };
            BurstMatch {
                start: b.start.clone(),
                matched: matched.into(),
                writers: b.writers.clone(),
                main_writer: b.main_writer.clone(),
                class: b.class.clone(),
                log: match (flush, compaction) {
                    (true, false) => "flush",
                    (true, true) if flushed.saturating_mul(2) >= b.write_bytes => "flush",
                    (_, true) => "compaction",
                    (false, false) => "none",
                }
                .into(),
                log_both: flush && compaction,
            }
        })
        .collect();
    let classes = classes.map(|c| agreement(c, &burst_rows, flushes, compactions));
    FlushMatch {
        flushes: big.len(),
        flushes_matched: fm,
        bursts: bursts.len(),
        bursts_matched: bm,
        precision: if bursts.is_empty() {
            0.0
        } else {
            bm as f64 / bursts.len() as f64
        },
        recall: if big.is_empty() {
            0.0
        } else {
            fm as f64 / big.len() as f64
        },
        tolerance_s: tol_ns as f64 / 1e9,
        small_flushes_ignored: flushes.len() - big.len(),
        unmatched_in_compactions: in_comp,
        rows,
        burst_rows,
        classes,
    }
}

/// [`ClassAgreement`] from the matched bursts and the log's SSTables.
fn agreement(
    c: &crate::analysis::classes::Classes,
    bursts: &[BurstMatch],
    flushes: &[Flush],
    compactions: &[Compaction],
) -> ClassAgreement {
    let mut a = ClassAgreement {
        profile: c.profile.clone(),
        bursts: bursts.len(),
        ..ClassAgreement::default()
    };
    let mut none: BTreeMap<String, usize> = BTreeMap::new();
    for b in bursts {
        a.log_both += usize::from(b.log_both);
        match b.log.as_str() {
            "flush" => {
                a.log_flush += 1;
                a.log_flush_labelled_flush += usize::from(b.class == "flush");
            }
            "compaction" => {
                a.log_compaction += 1;
                a.log_compaction_labelled_compaction += usize::from(b.class == "compaction");
            }
            _ => {
                a.log_none += 1;
                *none.entry(b.class.clone()).or_default() += 1;
            }
        }
    }
    a.log_none_labels = none.into_iter().collect();
    // The log's account of each SSTable: flushed, or written by a compaction.
    let mut log: HashMap<&str, &str> = HashMap::new();
    for f in flushes {
        if let Some(s) = &f.sstable {
            log.insert(s, "flush");
        }
    }
    for k in compactions {
        for s in &k.outputs {
            log.insert(s, "compaction");
        }
    }
    let mut seen: HashSet<&str> = HashSet::new();
    for m in &c.made {
        let Some(&account) = log.get(m.path.as_str()) else {
            // Only SSTables: other files a thread made (the commit log) are not the log's.
            if crate::analysis::classes::is_sstable_group(&m.path) {
                a.sstables_trace_only += 1;
            }
            continue;
        };
        seen.insert(m.path.as_str());
        a.sstables_compared += 1;
        if account == m.class {
            a.sstables_agree += 1;
        } else if a.sstables_disagree.len() < 20 {
            a.sstables_disagree
                .push((m.path.clone(), account.to_string(), m.class.clone()));
        }
        match account {
            "flush" => a.sstables_flushed += 1,
            _ => a.sstables_compacted += 1,
        }
    }
    a.sstables_log_only = log.keys().filter(|k| !seen.contains(*k)).count();
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_matching_counts_precision_and_recall() {
        let f = |s: i64, e: i64| Flush {
            table: "ks.t".into(),
            start: String::new(),
            end: String::new(),
            start_ns: s * 1_000_000_000,
            end_ns: e * 1_000_000_000,
            bytes: Some(5 << 20),
            sstable: None,
        };
        let flushes = [f(10, 11), f(20, 21), f(30, 31)];
        let b = |s: i64, e: i64| BurstSpan {
            start_ns: s * 1_000_000_000,
            end_ns: e * 1_000_000_000,
            start: format!("t{s}"),
            writers: "w".into(),
            main_writer: "w".into(),
            class: String::new(),
            write_bytes: 0,
        };
        // Compaction 40..45 s: the burst at 46 s is within the 1 s tolerance, at 60 s is not.
        let compactions = [Compaction {
            id: "c1".into(),
            start: String::new(),
            end: String::new(),
            start_ns: 40_000_000_000,
            end_ns: 45_000_000_000,
            outputs: Vec::new(),
        }];
        let m = match_flushes(
            &flushes,
            &compactions,
            &[b(11, 12), b(22, 23), b(46, 47), b(60, 61)],
            1_000_000_000,
            None,
        );
        assert_eq!(
            (m.flushes, m.flushes_matched, m.bursts, m.bursts_matched),
            (3, 2, 4, 2)
        );
        assert!((m.precision - 0.5).abs() < 1e-9 && (m.recall - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(m.unmatched_in_compactions, 1);
        let kinds: Vec<&str> = m.burst_rows.iter().map(|r| r.matched.as_str()).collect();
        assert_eq!(kinds, ["flush", "flush", "compaction", "none"]);
        // Flush 20..21 s, burst from 22 s: exactly the 1 s tolerance after its end.
        assert_eq!(m.rows[1].3.as_deref(), Some("t22"));
        assert_eq!(m.rows[2].3, None);
        assert!(m.classes.is_none());
    }

    /// The trace's classes against the log: a burst over a flush and a compaction is what the
    /// flushes' logged sizes make of it; SSTables by the log's account of them.

    #[test]
    fn classes_are_checked_against_the_log() {
        let s = 1_000_000_000;
        let flushes = [
            Flush {
                start_ns: 10 * s,
                end_ns: 11 * s,
                bytes: Some(2 << 20),
                sstable: Some("/d/nb-1-big".into()),
                ..Flush::default()
            },
            Flush {
                start_ns: 40 * s,
                end_ns: 41 * s,
                bytes: Some(2 << 20),
                sstable: Some("/d/nb-3-big".into()),
                ..Flush::default()
            },
        ];
        let compactions = [Compaction {
            start_ns: 39 * s,
            end_ns: 45 * s,
            outputs: vec!["/d/nb-2-big".into(), "/d/nb-4-big".into()],
            ..Compaction::default()
        }];
        let b = |t: i64, mb: u64, class: &str| BurstSpan {
            start_ns: t * s,
            end_ns: t * s + s / 2,
            start: format!("t{t}"),
            writers: String::new(),
            main_writer: String::new(),
            class: class.into(),
            write_bytes: mb << 20,
        };
        let bursts = [
            b(10, 2, "flush"),
            // Over the 40 s flush and the compaction: 3 MiB is flush-sized, 40 MiB is not.
            b(40, 3, "flush"),
            b(42, 40, "compaction"),
            b(44, 30, "flush"),
            b(80, 1, "commit log"),
        ];
        let made = |path: &str, class: &str| crate::analysis::classes::Made {
            path: path.into(),
            class: class.into(),
            creator: String::new(),
        };
        let classes = crate::analysis::classes::Classes {
            profile: "cassandra".into(),
            devices: Vec::new(),
            made: vec![
                made("/d/nb-1-big", "flush"),
                made("/d/nb-2-big", "compaction"),
                made("/d/nb-3-big", "compaction"),
                made("/d/nb-9-big", "flush"),
                made("/c/CommitLog-7-1.log", "commit log"),
            ],
            ..crate::analysis::classes::Classes::default()
        };
        let m = match_flushes(&flushes, &compactions, &bursts, s, Some(&classes));
        let logs: Vec<&str> = m.burst_rows.iter().map(|r| r.log.as_str()).collect();
        assert_eq!(logs, ["flush", "flush", "compaction", "compaction", "none"]);
        let a = m.classes.unwrap();
        assert_eq!(
            (a.bursts, a.log_flush, a.log_flush_labelled_flush),
            (5, 2, 2)
        );
        assert_eq!(
            (
                a.log_compaction,
                a.log_compaction_labelled_compaction,
                a.log_both
            ),
            (2, 1, 2)
        );
        assert_eq!(a.log_none_labels, [("commit log".to_string(), 1)]);
        assert_eq!(
            (
                a.sstables_compared,
                a.sstables_agree,
                a.sstables_flushed,
                a.sstables_compacted
            ),
            (3, 2, 2, 1)
        );
        assert_eq!(
            a.sstables_disagree,
            [(
                "/d/nb-3-big".to_string(),
                "flush".to_string(),
                "compaction".to_string()
            )]
        );
        // nb-9 made in the trace only (not the commit log: not an SSTable); nb-4 in the log only.
        assert_eq!((a.sstables_trace_only, a.sstables_log_only), (1, 1));
    }
}
