//! The encodings the records frames are built of: LEB128 varints, zigzag for signed values,
//! and the bit packing of a block of one column. Hand-made because they are measured wins
//! (BENCHMARKS.md): the per-record decode loop runs on what is here.

use super::BLOCK_RECORDS;

#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "a byte takes the value's low 7 bits: the cast keeps the low 8, whose top bit is \
              then set (or is clear: the last byte is below 0x80)"
)]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)).cast_unsigned()
}

#[inline]
pub(super) fn unzigzag(v: u64) -> i64 {
    (v >> 1).cast_signed() ^ -(v & 1).cast_signed()
}

/// Reads a records body front to back; every read is checked and returns `None` past the end.
pub(super) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(super) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    #[inline(always)]
    #[expect(
        clippy::inline_always,
        reason = "the decoders read every value through it: its one- and two-byte fast paths \
                  inline into each per-record loop, the rest is `varint_slow`, out of line"
    )]
    pub(super) fn varint(&mut self) -> Option<u64> {
        // Fast paths: most fields fit in one or two bytes.
        if let Some(&[b0, b1]) = self
            .buf
            .get(self.pos..self.pos + 2)
            .map(|s| <&[u8; 2]>::try_from(s).expect("2 bytes"))
        {
            if b0 < 0x80 {
                self.pos += 1;
                return Some(u64::from(b0));
            }
            if b1 < 0x80 {
                self.pos += 2;
                return Some(u64::from(b0 & 0x7f) | (u64::from(b1) << 7));
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }

    #[inline]
    pub(super) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether every byte has been read.
    #[inline]
    pub(super) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    #[inline]
    pub(super) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
}

/// Append one block of a column: its minimum (zigzag varint; for a signed column the minimum
/// as i64), the bit width of (value - minimum), then every (value - minimum) in that many bits,
/// least significant bit first, padded to a whole byte.
#[expect(
    clippy::cast_possible_truncation,
    reason = "the width is at most 64; a full word is the accumulator's low 64 bits"
)]
pub(super) fn pack_block(out: &mut Vec<u8>, vals: &[u64], signed: bool) {
    let (min, range) = if signed {
        let (lo, hi) = vals.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &v| {
            (lo.min(v.cast_signed()), hi.max(v.cast_signed()))
        });
        (
            lo.cast_unsigned(),
            hi.cast_unsigned().wrapping_sub(lo.cast_unsigned()),
        )
    } else {
        let (lo, hi) = vals
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        (lo, hi.wrapping_sub(lo))
    };
    let (min, range) = if vals.is_empty() {
        (0, 0)
    } else {
        (min, range)
    };
    let bw = 64 - range.leading_zeros();
    put_varint(out, zigzag(min.cast_signed()));
    out.push(bw as u8);
    if bw == 0 {
        return;
    }
    // Whole 64-bit words while they fill, then the last bits rounded up to a byte.
    out.reserve((vals.len() * bw as usize).div_ceil(8) + 8);
    let mut acc = 0u128;
    let mut nb = 0u32;
    for &v in vals {
        acc |= u128::from(v.wrapping_sub(min)) << nb;
        nb += bw;
        if nb >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            nb -= 64;
        }
    }
    out.extend_from_slice(&acc.to_le_bytes()[..nb.div_ceil(8) as usize]);
}

/// Bytes a block's column can take: 128 values of 64 bits.
pub(super) const MAX_PACKED: usize = BLOCK_RECORDS * 8;

/// Unpack the first `n` (at most [`BLOCK_RECORDS`]) values of `out` from `packed`, `bw` bits
/// each, adding `min` (the values after the `n`th are left unspecified). The bytes are first
/// copied into a zero-padded block so that every load is in bounds without a check per value.
#[inline]
pub(super) fn unpack_block(
    packed: &[u8],
    bw: u32,
    min: u64,
    out: &mut [u64; BLOCK_RECORDS],
    n: usize,
    scratch: &mut [u8; MAX_PACKED + 16],
) {
    let n = n.min(BLOCK_RECORDS);
    if bw == 0 {
        out[..n].fill(min);
        return;
    }
    let len = packed.len().min(MAX_PACKED);
    scratch[..len].copy_from_slice(&packed[..len]);
    scratch[len..len + 16].fill(0);
    // Each width of a word or less its own copy of the loop, where every offset and shift is
    // a constant: 8 values of `bw` bits are `bw` whole bytes.
    macro_rules! by_width {
        ($($w:literal)*) => {
            match bw {
                $($w => unpack_fixed::<$w>(scratch, min, out),)*
                _ => unpack_any(scratch, bw as usize, min, &mut out[..n]),
            }
        };
    }
    by_width!(
        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28
        29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56
    );
}

/// All [`BLOCK_RECORDS`] values of `BW` (1 to 56) bits, by groups of 8 (`BW` bytes each). A
/// value's 8-byte load is at most at byte 15 * 56 + 49: inside `scratch` whatever `BW`; the
/// values past the block's own bytes read the zero padding or older bytes, and are not used.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "one copy of the loop per width, inlined into `unpack_block`'s match so that every \
              offset and shift is a constant"
)]
fn unpack_fixed<const BW: usize>(
    scratch: &[u8; MAX_PACKED + 16],
    min: u64,
    out: &mut [u64; BLOCK_RECORDS],
) {
    let mask = (1u64 << BW) - 1;
    for g in 0..BLOCK_RECORDS / 8 {
        for j in 0..8 {
            let bit = j * BW;
            let at = (g * BW + bit / 8) & (MAX_PACKED - 1);
            let w = u64::from_le_bytes(scratch[at..at + 8].try_into().expect("8 bytes"));
            out[g * 8 + j] = min.wrapping_add((w >> (bit % 8)) & mask);
        }
    }
}

/// `out.len()` values of `bw` bits (1 to 64), one after another.
#[expect(
    clippy::cast_possible_truncation,
    reason = "a value is masked to `bw` bits, at most 64"
)]
fn unpack_any(scratch: &[u8; MAX_PACKED + 16], bw: usize, min: u64, out: &mut [u64]) {
    if bw <= 56 {
        let mask = (1u64 << bw) - 1;
        for (i, o) in out.iter_mut().enumerate() {
            let bit = i * bw;
            let at = (bit >> 3) & (MAX_PACKED - 1);
            let w = u64::from_le_bytes(scratch[at..at + 8].try_into().expect("8 bytes"));
            *o = min.wrapping_add((w >> (bit & 7)) & mask);
        }
    } else {
        let mask = if bw == 64 {
            u128::from(u64::MAX)
        } else {
            (1u128 << bw) - 1
        };
        for (i, o) in out.iter_mut().enumerate() {
            let bit = i * bw;
            let at = (bit >> 3) & (MAX_PACKED - 1);
            let w = u128::from_le_bytes(scratch[at..at + 16].try_into().expect("16 bytes"));
            *o = min.wrapping_add(((w >> (bit & 7)) & mask) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every width, full and short blocks: the values packed come back, by the per-width
    /// loops as by the one for any width.
    #[test]
    fn unpack_every_width() {
        let mut rng = crate::rng::Rng(0x9E37_79B9_7F4A_7C15u64);
        let mut scratch = [0u8; MAX_PACKED + 16];
        for bw in 0..=64u32 {
            for n in [1, 7, 8, 9, 100, 127, BLOCK_RECORDS] {
                let vals: Vec<u64> = (0..n)
                    .map(|i| {
                        let x = rng.next_u64();
                        let v = if bw == 64 { x } else { x & ((1u64 << bw) - 1) };
                        // The widest values too, so that the block's width is bw.
                        if i == 0 && bw > 0 {
                            v | 1 << (bw - 1)
                        } else {
                            v
                        }
                    })
                    .collect();
                let mut packed = Vec::new();
                pack_block(&mut packed, &vals, false);
                // Skip the minimum (varint) and the width byte.
                let mut c = Cursor::new(&packed);
                let min = c.varint().expect("min");
                let w = c.bytes(1).expect("width")[0];
                let body = c.bytes(c.remaining()).expect("body");
                let mut out = [u64::MAX; BLOCK_RECORDS];
                unpack_block(
                    body,
                    u32::from(w),
                    unzigzag(min).cast_unsigned(),
                    &mut out,
                    n,
                    &mut scratch,
                );
                assert_eq!(&out[..n], &vals[..], "bw {bw} n {n}");
                let mut any = vec![0; n];
                if w > 0 {
                    unpack_any(
                        &scratch,
                        usize::from(w),
                        unzigzag(min).cast_unsigned(),
                        &mut any,
                    );
                    assert_eq!(any, vals, "any: bw {bw} n {n}");
                }
            }
        }
    }
}
