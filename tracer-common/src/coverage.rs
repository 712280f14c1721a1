//! The self-check: what the trace counted against what the kernel itself counted
//! (/proc/diskstats deltas), per device and diskstats group.

use serde::{Deserialize, Serialize};

use crate::format::{AggregateSnapshot, DiskStats, TraceHeader, TraceTrailer};
use crate::op::StatGroup;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupCoverage {
    pub group: Option<StatGroup>,
    /// /proc/diskstats delta over the run.
    pub kernel_ios: u64,
    pub kernel_bytes: u64,
    /// The probe's exact in-kernel aggregates over the run, of the IOs the kernel accounts.
    pub aggregate_ios: u64,
    pub aggregate_bytes: u64,
    /// IOs the probe saw that the kernel did not account (the device's `queue/iostats` was 0,
    /// or passthrough commands): traced, but with nothing in /proc/diskstats to compare.
    pub not_accounted_ios: u64,
    pub not_accounted_bytes: u64,
    /// The run's cut ([`crate::format::Cut`]): IOs (and bytes) the kernel counted between the
    /// cut instants and its counters' reads, end minus start, which are not part of the run...
    pub cut_before_read_ios: i64,
    pub cut_before_read_bytes: i64,
    /// ...and IOs that completed while the counters were read at the end and at the start
    /// (the kernel may or may not have counted them).
    pub cut_during_read_end_ios: u64,
    pub cut_during_read_start_ios: u64,
    /// Completions that may be missed in this file while reported in another, at a rotation
    /// with half records: the start cut's `missed_after` and the end cut's `still_open`
    /// ([`crate::format::Cut`]). Like the misses, a count over all devices and groups.
    pub cut_missed_across: u64,
}

impl GroupCoverage {
    /// The kernel's count of the IOs that completed inside the run's cut.
    pub fn kernel_at_cut_ios(&self) -> u64 {
        sub_signed(self.kernel_ios, self.cut_before_read_ios)
    }
    pub fn kernel_at_cut_bytes(&self) -> u64 {
        sub_signed(self.kernel_bytes, self.cut_before_read_bytes)
    }

    /// Whether the group saw any IO, counted by the kernel or traced.
    pub fn any(&self) -> bool {
        self.kernel_ios > 0 || self.aggregate_ios > 0 || self.not_accounted_ios > 0
    }

    /// IOs the kernel counted that the probe did not, beyond what it reported missing.
    pub fn unaccounted(&self, reported_misses: u64) -> u64 {
        self.kernel_at_cut_ios()
            .saturating_sub(self.cut_during_read_end_ios)
            .saturating_sub(self.aggregate_ios)
            .saturating_sub(reported_misses)
            .saturating_sub(self.cut_missed_across)
    }

    /// IOs the probe counted beyond what the kernel counted (allowing for those that completed
    /// while the counters were read): IOs in flight at the ends of a run without a cut, or
    /// counted twice.
    pub fn excess(&self) -> u64 {
        self.aggregate_ios
            .saturating_sub(self.kernel_at_cut_ios())
            .saturating_sub(self.cut_during_read_start_ios)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceCoverage {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub groups: Vec<GroupCoverage>,
    /// Time-weighted mean of requests in the OS (queued or issued), from diskstats
    /// (weighted ms / elapsed ms), i.e. iostat's aqu-sz over the run.
    pub kernel_mean_queue: f64,
    /// The same from the probe's aggregates (sum of enter-to-complete times / elapsed).
    pub aggregate_mean_queue: f64,
}

impl DeviceCoverage {
    /// Every IO traced on the device was one the kernel did not account (its `queue/iostats`
    /// was 0 for the whole run): there is nothing in /proc/diskstats to compare with.
    pub fn accounting_off(&self) -> bool {
        self.groups
            .iter()
            .all(|g| g.kernel_ios == 0 && g.aggregate_ios == 0)
            && self.groups.iter().any(|g| g.not_accounted_ios > 0)
    }
}

/// `v - d`, clamped to 0 (and to `u64::MAX`: counts from a damaged file may be anything).
fn sub_signed(v: u64, d: i64) -> u64 {
    if d >= 0 {
        v.saturating_sub(d.unsigned_abs())
    } else {
        v.saturating_add(d.unsigned_abs())
    }
}

/// `a - b` as a signed count, clamped to i64's range.
fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

fn find(v: &[DiskStats], major: u32, minor: u32) -> Option<&DiskStats> {
    v.iter().find(|d| d.major == major && d.minor == minor)
}

fn agg_sum(
    v: &[AggregateSnapshot],
    major: u32,
    minor: u32,
    g: StatGroup,
    not_accounted: bool,
) -> (u64, u64, u64) {
    v.iter()
        .filter(|a| {
            a.major == major
                && a.minor == minor
                && a.group() == g
                && a.not_accounted == not_accounted
        })
        .fold((0, 0, 0), |acc, a| {
            // Saturating: the counts come from a file, which may be damaged.
            (
                acc.0.saturating_add(a.ios),
                acc.1.saturating_add(a.bytes),
                acc.2.saturating_add(a.total_ns_sum),
            )
        })
}

/// Coverage of every device that has diskstats at both ends of the run.
#[expect(
    clippy::cast_precision_loss,
    reason = "ms and ns become f64 for a mean queue size, a ratio: below 2^53 for 100 days of ns, \
              and beyond it the lost low bits are far below what the ratio shows"
)]
pub fn coverage(header: &TraceHeader, trailer: &TraceTrailer) -> Vec<DeviceCoverage> {
    let mut out = Vec::new();
    for end in &trailer.diskstats_end {
        let Some(start) = find(&header.diskstats_start, end.major, end.minor) else {
            continue;
        };
        let elapsed_ns = end.at_ns.saturating_sub(start.at_ns).max(1);
        let mut groups = Vec::new();
        let mut agg_total_ns = 0u64;
        for g in StatGroup::ALL {
            let (ki0, kb0) = start.group(g);
            let (ki1, kb1) = end.group(g);
            let (ai1, ab1, an1) = agg_sum(&trailer.aggregates_end, end.major, end.minor, g, false);
            let (ai0, ab0, an0) = agg_sum(&header.aggregates_start, end.major, end.minor, g, false);
            let (ni1, nb1, _) = agg_sum(&trailer.aggregates_end, end.major, end.minor, g, true);
            let (ni0, nb0, _) = agg_sum(&header.aggregates_start, end.major, end.minor, g, true);
            agg_total_ns = agg_total_ns.saturating_add(an1.saturating_sub(an0));
            let cut = |c: &Option<crate::format::Cut>| {
                c.as_ref()
                    .map_or(((0, 0), (0, 0)), |c| c.of(end.major, end.minor, g as usize))
            };
            let (sb, sd) = cut(&trailer.start_cut);
            let (eb, ed) = cut(&trailer.end_cut);
            let across = trailer
                .start_cut
                .as_ref()
                .map_or(0, |c| c.missed_after)
                .saturating_add(trailer.end_cut.as_ref().map_or(0, |c| c.still_open));
            groups.push(GroupCoverage {
                group: Some(g),
                cut_before_read_ios: signed_diff(eb.0, sb.0),
                cut_before_read_bytes: signed_diff(eb.1, sb.1),
                cut_during_read_end_ios: ed.0,
                cut_during_read_start_ios: sd.0,
                cut_missed_across: across,
                kernel_ios: ki1.saturating_sub(ki0),
                kernel_bytes: kb1.saturating_sub(kb0),
                aggregate_ios: ai1.saturating_sub(ai0),
                aggregate_bytes: ab1.saturating_sub(ab0),
                not_accounted_ios: ni1.saturating_sub(ni0),
                not_accounted_bytes: nb1.saturating_sub(nb0),
            });
        }
        out.push(DeviceCoverage {
            name: end.name.clone(),
            major: end.major,
            minor: end.minor,
            groups,
            kernel_mean_queue: end.weighted_ms.saturating_sub(start.weighted_ms) as f64 * 1e6
                / elapsed_ns as f64,
            aggregate_mean_queue: agg_total_ns as f64 / elapsed_ns as f64,
        });
    }
    out
}

/// "read 183,647 of 183,647 IOs, 100.000%"; IOs the kernel did not account are said apart.
#[expect(
    clippy::cast_precision_loss,
    reason = "IO counts become f64 for a percentage printed to 3 decimals: exact below 2^53"
)]
pub fn describe(g: &GroupCoverage) -> String {
    let name = g.group.map_or("?", StatGroup::name);
    let off = if g.not_accounted_ios == 0 {
        String::new()
    } else {
        format!(
            "; {} more {name} IOs traced that the kernel did not account (queue/iostats = 0 or passthrough): nothing in /proc/diskstats to compare them with",
            thousands(g.not_accounted_ios)
        )
    };
    if g.kernel_ios == 0 && g.aggregate_ios == 0 && g.not_accounted_ios > 0 {
        return format!(
            "{name}: kernel accounting is off (queue/iostats = 0): {} IOs traced, /proc/diskstats counted none, so the trace cannot be checked against it",
            thousands(g.not_accounted_ios)
        );
    }
    let kernel = g.kernel_at_cut_ios();
    let pct = if kernel == 0 {
        100.0
    } else {
        g.aggregate_ios as f64 * 100.0 / kernel as f64
    };
    let during = g.cut_during_read_end_ios + g.cut_during_read_start_ios;
    let during = if during == 0 {
        String::new()
    } else {
        format!(
            " (+-{} that completed while /proc/diskstats was read)",
            thousands(during)
        )
    };
    format!(
        "{name} {} of {} IOs, {pct:.3}%{during}{off}",
        thousands(g.aggregate_ios),
        thousands(kernel)
    )
}

pub fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Cut;

    #[test]
    fn formats_like_the_issue_says() {
        let g = GroupCoverage {
            group: Some(StatGroup::Read),
            kernel_ios: 183_647,
            aggregate_ios: 183_647,
            ..Default::default()
        };
        assert_eq!(describe(&g), "read 183,647 of 183,647 IOs, 100.000%");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn a_rotation_allows_for_misses_on_the_side_the_kernel_may_have_counted_them() {
        // A file whose kernel count is one over its records, each way a miss can fall.
        let ds = |at_ns, read_ios| DiskStats {
            name: "loop0".into(),
            major: 7,
            at_ns,
            read_ios,
            ..DiskStats::default()
        };
        let agg = |ios| AggregateSnapshot {
            major: 7,
            op: Some(crate::op::Op::Read),
            ios,
            ..AggregateSnapshot::default()
        };
        let header = TraceHeader {
            diskstats_start: vec![ds(0, 1000)],
            aggregates_start: vec![agg(0)],
            ..TraceHeader::default()
        };
        let unaccounted = |kernel: u64, start: Cut, end: Cut, misses| {
            let trailer = TraceTrailer {
                diskstats_end: vec![ds(10, 1000 + kernel)],
                aggregates_end: vec![agg(99)],
                start_cut: Some(start),
                end_cut: Some(end),
                ..TraceTrailer::default()
            };
            coverage(&header, &trailer)[0].groups[StatGroup::Read as usize].unaccounted(misses)
        };
        let cut = |missed_after, still_open| Cut {
            missed_after,
            still_open,
            ..Cut::default()
        };
        // Nothing allows for it.
        assert_eq!(unaccounted(100, cut(0, 0), cut(0, 0), 0), 1);
        // Missed in flight at the start's instant and found before the earlier file closed:
        // reported there.
        assert_eq!(unaccounted(100, cut(1, 0), cut(0, 0), 0), 0);
        // In flight at the end's instant, not found by the time this file closed: reported
        // in a later file.
        assert_eq!(unaccounted(100, cut(0, 0), cut(0, 1), 0), 0);
        // Found while this file closed is reported in it: the allowance is the next file's,
        // not this one's again.
        assert_eq!(unaccounted(101, cut(0, 0), cut(1, 0), 1), 1);
        assert_eq!(unaccounted(101, cut(0, 0), cut(0, 0), 1), 1);
        assert_eq!(unaccounted(101, cut(0, 0), cut(0, 1), 1), 0);
    }
}
