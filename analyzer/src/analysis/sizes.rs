//! Block-size classes, chosen so that the mix reads the way storage engineers say it:
//! "100% 4KB", "74% 508KB-512KB", "80% > 2GB".

/// Human size: 512B, 4KB, 508KB, 1MB, 2GB (binary units, as block sizes are quoted).
pub fn human(bytes: u64) -> String {
    const K: u64 = 1024;
    if bytes >= K * K * K && bytes.is_multiple_of(K * K * K) {
        format!("{}GB", bytes / (K * K * K))
    } else if bytes >= K * K && bytes.is_multiple_of(K * K) {
        format!("{}MB", bytes / (K * K))
    } else if bytes >= K && bytes.is_multiple_of(K) {
        format!("{}KB", bytes / K)
    } else if bytes >= K * K * K {
        format!("{:.1}GB", bytes as f64 / (K * K * K) as f64)
    } else if bytes >= K * K {
        format!("{:.1}MB", bytes as f64 / (K * K) as f64)
    } else if bytes >= K {
        format!("{:.1}KB", bytes as f64 / K as f64)
    } else {
        format!("{bytes}B")
    }
}

/// Size class of one IO: exact for multiples of 512 B up to 4 KB and for powers of two;
/// sizes just under a power of two (within 1/128 of it, as a 512 KB write that lost a page to
/// alignment) read "508KB-512KB"; other sizes fall in their octave, "256KB-508KB" meaning
/// (256 KB, 508 KB]; more than 2 GB reads "> 2GB".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SizeClass {
    Exact(u64),
    /// Within 1/128 below a power of two: [upper - upper/128, upper).
    Near(u64),
    /// (upper/2, upper - upper/128).
    Octave(u64),
    /// More than 2 GB.
    Huge,
}

pub const HUGE: u64 = 2 << 30;

impl SizeClass {
    pub fn of(bytes: u64) -> SizeClass {
        if bytes > HUGE {
            return SizeClass::Huge;
        }
        if bytes <= 4096 && bytes.is_multiple_of(512) || bytes.is_power_of_two() {
            return SizeClass::Exact(bytes);
        }
        let upper = bytes.next_power_of_two();
        if bytes >= upper - upper / 128 {
            SizeClass::Near(upper)
        } else {
            SizeClass::Octave(upper)
        }
    }

    pub fn label(self) -> String {
        match self {
            SizeClass::Exact(b) => human(b),
            SizeClass::Near(u) => format!("{}-{}", human(u - u / 128), human(u)),
            SizeClass::Octave(u) => format!("{}-{}", human(u / 2), human(u - u / 128)),
            SizeClass::Huge => format!("> {}", human(HUGE)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_like_the_micron_study() {
        assert_eq!(SizeClass::of(4096).label(), "4KB");
        assert_eq!(SizeClass::of(512 << 10).label(), "512KB");
        assert_eq!(SizeClass::of(510 << 10).label(), "508KB-512KB");
        assert_eq!(SizeClass::of(508 << 10).label(), "508KB-512KB");
        assert_eq!(SizeClass::of(300 << 10).label(), "256KB-508KB");
        assert_eq!(SizeClass::of(3 << 30).label(), "> 2GB");
        assert_eq!(SizeClass::of(1536).label(), "1.5KB");
    }
}
