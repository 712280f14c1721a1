//! Small numeric pieces the layers share: a median, the xorshift generator behind the
//! synthetic traces and the randomized tests, and the conversions of floats (rates, scaled
//! positions, rounded figures) back to integers. A leaf: it imports nothing from the crate.

/// `x` toward zero as a u64, saturating: NaN and negatives give 0, values past `u64::MAX`
/// give `u64::MAX`. For figures computed in f64 that become counts, nanoseconds, ranks or
/// bins again (round or ceil first where that is meant).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-integer `as` saturates (NaN to 0) since Rust 1.45: the documented \
              behaviour of this function"
)]
pub fn f64_to_u64_saturating(x: f64) -> u64 {
    x as u64
}

/// `x` toward zero as a usize, saturating as [`f64_to_u64_saturating`]: for positions and
/// indices scaled in f64 (pixels, bins), which callers clamp to their range.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-integer `as` saturates (NaN to 0): the documented behaviour"
)]
pub fn f64_to_usize_saturating(x: f64) -> usize {
    x as usize
}

/// `x` toward zero as a u8, saturating (NaN and negatives 0, past 255 255): colour channels.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-integer `as` saturates (NaN to 0): the documented behaviour"
)]
pub fn f64_to_u8_saturating(x: f64) -> u8 {
    x as u8
}

/// `x` as a usize, `usize::MAX` where it does not fit (a 32-bit target): for counts and
/// offsets used as lengths or indices, which then fail their bounds check rather than wrap.
pub fn u64_to_usize_saturating(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// The upper median (the middle value, the higher of the two middle ones for an even count);
/// 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub use tracer_common::rng::Rng;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_upper_middle_value() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn float_conversions_saturate_and_truncate_toward_zero() {
        assert_eq!(f64_to_u64_saturating(2.9), 2);
        assert_eq!(f64_to_u64_saturating(-3.0), 0);
        assert_eq!(f64_to_u64_saturating(f64::NAN), 0);
        assert_eq!(f64_to_u64_saturating(1e30), u64::MAX);
        assert_eq!(f64_to_usize_saturating(7.5), 7);
        assert_eq!(f64_to_usize_saturating(-0.5), 0);
        assert_eq!(f64_to_u8_saturating(300.0), 255);
        assert_eq!(f64_to_u8_saturating(254.99), 254);
        assert_eq!(u64_to_usize_saturating(42), 42);
    }

    #[test]
    fn the_sequence_is_xorshift64() {
        // The first outputs from seed 1, as the shifts 13, 7, 17 give them.
        let mut r = Rng(1);
        assert_eq!(r.next_u64(), 1_082_269_761);
        assert_eq!(r.next_u64(), 1_152_992_998_833_853_505);
    }
}
