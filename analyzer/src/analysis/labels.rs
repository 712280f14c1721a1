//! How the report and the export name what a trace gives no path for: IO of no file, IO of the
//! block device's own page cache, files and cgroups the trace did not name. One place, so that
//! `blkprof report`'s files and cgroups sections and `blkprof export`'s `file`, `cgroup` and
//! `owner_cgroup` columns say the same.

use std::fmt;

/// Each kind of IO that is not a named file's, as a kind (the report's files by kind) and as a
/// file's name (the kind in parentheses: the report's file rows, the export's `file` column).
macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident, $file:ident = $text:literal;)*) => {
        $(
            $(#[$doc])*
            pub const $kind: &str = $text;
            $(#[$doc])*
            pub const $file: &str = concat!("(", $text, ")");
        )*
    };
}

kinds! {
    /// IO on pages of no file ([`tracer_common::FILE_DEV_ANON`]): direct IO, anonymous pages.
    DIRECT, DIRECT_FILE = "direct IO";
    /// IO on the block device's own page cache ([`tracer_common::FILE_DEV_DEVICE`]): file system
    /// metadata, the journal.
    DEVICE, DEVICE_FILE = "metadata and journal";
}

/// A file the trace did not name, by its file system (`s_dev`, major << 20 | minor) and inode:
/// `(inode N on MAJ:MIN)`.
#[derive(Clone, Copy, Debug)]
pub struct UnnamedFile {
    pub dev: u32,
    pub ino: u64,
}

impl fmt::Display for UnnamedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = tracer_common::dev_split(self.dev);
        write!(f, "(inode {} on {major}:{minor})", self.ino)
    }
}

/// A cgroup the trace did not name, by its id: `(id N)`.
#[derive(Clone, Copy, Debug)]
pub struct UnnamedCgroup(pub u64);

impl fmt::Display for UnnamedCgroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(id {})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_the_report_has_always_written_them() {
        assert_eq!(DIRECT_FILE, format!("({DIRECT})"));
        assert_eq!(DEVICE_FILE, "(metadata and journal)");
        let dev = tracer_common::dev_join(259, 3);
        assert_eq!(
            UnnamedFile { dev, ino: 42 }.to_string(),
            "(inode 42 on 259:3)"
        );
        assert_eq!(UnnamedCgroup(78).to_string(), "(id 78)");
    }
}
