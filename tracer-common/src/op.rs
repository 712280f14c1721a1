//! blkprof's own, kernel-independent encoding of block operations and request flags.
//! The tracer translates the kernel's `blk_opf_t` (whose values differ between kernels)
//! into these with the running kernel's BTF; the trace file stores these.

use serde::{Deserialize, Serialize};

/// Block operation, as stored in trace files (4 bits).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Op {
    #[default]
    Read = 0,
    Write = 1,
    Flush = 2,
    Discard = 3,
    SecureErase = 4,
    WriteZeroes = 5,
    ZoneAppend = 6,
    /// Zone open/close/finish/reset.
    ZoneMgmt = 7,
    /// Driver-private (passthrough) in/out.
    DrvIn = 8,
    DrvOut = 9,
    Other = 15,
}

impl Op {
    pub const ALL: [Op; 11] = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::SecureErase,
        Op::WriteZeroes,
        Op::ZoneAppend,
        Op::ZoneMgmt,
        Op::DrvIn,
        Op::DrvOut,
        Op::Other,
    ];

    #[inline]
    pub fn from_code(code: u8) -> Op {
        // A table rather than a match: the record decoder calls this for every IO.
        match Op::BY_CODE.get(usize::from(code)) {
            Some(&op) => op,
            None => Op::Other,
        }
    }

    /// The op of each 4-bit code ([`Op::from_code`]): each op of [`Op::ALL`] at its code, the
    /// codes no op has read as [`Op::Other`].
    const BY_CODE: [Op; 16] = {
        let mut t = [Op::Other; 16];
        let mut i = 0;
        while i < Op::ALL.len() {
            t[Op::ALL[i] as usize] = Op::ALL[i];
            i += 1;
        }
        t
    };

    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::SecureErase => "secure-erase",
            Op::WriteZeroes => "write-zeroes",
            Op::ZoneAppend => "zone-append",
            Op::ZoneMgmt => "zone-mgmt",
            Op::DrvIn => "drv-in",
            Op::DrvOut => "drv-out",
            Op::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == s)
    }

    /// The kernel's `op_is_write` for this op (its op codes are odd for writes).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Op::Write | Op::SecureErase | Op::WriteZeroes | Op::ZoneAppend | Op::DrvOut
        )
    }
}

/// Request flags stored in trace files.
pub mod flags {
    pub const SYNC: u16 = 1 << 0;
    pub const META: u16 = 1 << 1;
    pub const FUA: u16 = 1 << 2;
    pub const PREFLUSH: u16 = 1 << 3;
    pub const RAHEAD: u16 = 1 << 4;
    pub const PRIO: u16 = 1 << 5;
    pub const NOMERGE: u16 = 1 << 6;
    pub const IDLE: u16 = 1 << 7;
    pub const BACKGROUND: u16 = 1 << 8;
    /// The block layer's own flush request (flush machinery), not a submitted bio.
    pub const FLUSH_RQ: u16 = 1 << 9;
    /// Completed without ever being issued to the device (e.g. an empty flush absorbed
    /// by the flush machinery).
    pub const NEVER_ISSUED: u16 = 1 << 10;
    /// Submitted before the tracer attached: submitter and queue time unknown.
    pub const STARTED_BEFORE: u16 = 1 << 11;
    /// Stored only in the file: record carries an error field.
    pub const HAS_ERROR: u16 = 1 << 12;
    /// Stored only in the file: record carries a requeue count.
    pub const REQUEUED: u16 = 1 << 13;
    /// The kernel did not account this IO in /proc/diskstats (the device's `queue/iostats`
    /// was 0, or a driver passthrough command).
    pub const NOT_ACCOUNTED: u16 = 1 << 14;

    pub const NAMES: [(u16, &str); 14] = [
        (SYNC, "sync"),
        (META, "meta"),
        (FUA, "fua"),
        (PREFLUSH, "preflush"),
        (RAHEAD, "readahead"),
        (PRIO, "prio"),
        (NOMERGE, "nomerge"),
        (IDLE, "idle"),
        (BACKGROUND, "background"),
        (FLUSH_RQ, "flush-rq"),
        (NEVER_ISSUED, "never-issued"),
        (STARTED_BEFORE, "started-before-trace"),
        (NOT_ACCOUNTED, "not-accounted"),
        (HAS_ERROR, "error"),
    ];
}

/// The /proc/diskstats group an IO is counted in, exactly as the kernel decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatGroup {
    Read,
    Write,
    Discard,
    Flush,
}

impl StatGroup {
    pub const ALL: [StatGroup; 4] = [
        StatGroup::Read,
        StatGroup::Write,
        StatGroup::Discard,
        StatGroup::Flush,
    ];

    /// `op_stat_group()` for requests ended by `blk_account_io_done`, and `STAT_FLUSH` for the
    /// flush machinery's own request (`blk_account_io_flush`). Note that an empty flush
    /// request absorbed by the flush machinery is counted by the kernel as a 0-byte *read*.
    #[inline]
    pub fn of(op: Op, flag_bits: u16) -> StatGroup {
        if flag_bits & flags::FLUSH_RQ != 0 {
            StatGroup::Flush
        } else {
            // By table: the report asks this of every IO, several times.
            StatGroup::BY_OP[op as usize & 15]
        }
    }

    /// The group of each op code without the flush flag: discards, writes ([`Op::is_write`]),
    /// and reads (all others).
    const BY_OP: [StatGroup; 16] = {
        let mut t = [StatGroup::Read; 16];
        let mut code = 0;
        while code < 16 {
            t[code] = match Op::BY_CODE[code] {
                Op::Discard => StatGroup::Discard,
                Op::Write | Op::SecureErase | Op::WriteZeroes | Op::ZoneAppend | Op::DrvOut => {
                    StatGroup::Write
                }
                _ => StatGroup::Read,
            };
            code += 1;
        }
        t
    };

    /// The names of [`StatGroup::ALL`], in that order (as the report's JSON keys them).
    pub const NAMES: [&'static str; 4] = ["read", "write", "discard", "flush"];

    pub fn name(self) -> &'static str {
        StatGroup::NAMES[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables say what the plain definitions say, for every code and flag.
    #[test]
    fn tables_match_definitions() {
        for code in 0..=u8::MAX {
            let want = match code {
                0..=9 => Op::ALL[usize::from(code)],
                _ => Op::Other,
            };
            assert_eq!(Op::from_code(code), want, "code {code}");
        }
        for op in Op::ALL {
            for fl in [0, flags::FLUSH_RQ, flags::SYNC | flags::FUA] {
                let want = if fl & flags::FLUSH_RQ != 0 {
                    StatGroup::Flush
                } else if op == Op::Discard {
                    StatGroup::Discard
                } else if op.is_write() {
                    StatGroup::Write
                } else {
                    StatGroup::Read
                };
                assert_eq!(StatGroup::of(op, fl), want, "{op:?} {fl}");
            }
        }
    }
}
