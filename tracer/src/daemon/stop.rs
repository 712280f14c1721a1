//! Why a run stopped: printed in the end's summary and written into the last file's trailer.

use std::fmt;
use std::io;

/// Why the run stopped. The strings ([`fmt::Display`]) are part of the trace format: the
/// analyzer and the users' scripts read them in the trailer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StopReason {
    /// `--duration` elapsed.
    Duration,
    /// SIGINT or SIGTERM.
    Signal,
    /// The trace's file system is full (or the user's quota reached).
    DiskFull,
    /// Writing or rotating the trace failed for another reason.
    Error,
}

impl StopReason {
    /// The trace could not be written to its end: the exit code is 1.
    pub(super) fn failed(self) -> bool {
        matches!(self, StopReason::DiskFull | StopReason::Error)
    }

    /// The reason for stopping on `err`: disk full if any error in its chain says so.
    pub(super) fn of_error(err: &(dyn std::error::Error + 'static)) -> StopReason {
        let mut cause = Some(err);
        while let Some(e) = cause {
            if e.downcast_ref::<io::Error>().is_some_and(is_disk_full)
                || e.downcast_ref::<super::output::CannotCreate>()
                    .is_some_and(|c| is_disk_full(&c.io))
            {
                return StopReason::DiskFull;
            }
            cause = e.source();
        }
        StopReason::Error
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Duration => "duration",
            StopReason::Signal => "signal",
            StopReason::DiskFull => "disk-full",
            StopReason::Error => "error",
        })
    }
}

/// No space left on the device, or the quota reached.
fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tracer_common::format::FormatError;

    #[test]
    fn the_reasons_print_as_the_trailer_has_always_said() {
        let all = [
            StopReason::Duration,
            StopReason::Signal,
            StopReason::DiskFull,
            StopReason::Error,
        ];
        let text: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["duration", "signal", "disk-full", "error"]);
        let failed: Vec<bool> = all.iter().map(|r| r.failed()).collect();
        assert_eq!(failed, [false, false, true, true]);
    }

    #[test]
    fn disk_full_is_known_by_the_error_not_its_message() {
        let format = |source| FormatError::Io {
            path: PathBuf::from("t.blkp"),
            source,
        };
        let full = format(io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(StopReason::of_error(&full), StopReason::DiskFull);
        let quota = format(io::Error::from_raw_os_error(libc::EDQUOT));
        assert_eq!(StopReason::of_error(&quota), StopReason::DiskFull);
        let kind = io::Error::from(io::ErrorKind::StorageFull);
        assert_eq!(StopReason::of_error(&kind), StopReason::DiskFull);
        // A message that merely mentions it is not one.
        let other = format(io::Error::other("No space left in the name"));
        assert_eq!(StopReason::of_error(&other), StopReason::Error);
        let denied = format(io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(StopReason::of_error(&denied), StopReason::Error);
        // Through anyhow's context, as a failed rotation reports it.
        let wrapped = anyhow::Error::new(io::Error::from_raw_os_error(libc::ENOSPC))
            .context("cannot write t.hlog");
        assert_eq!(StopReason::of_error(&*wrapped), StopReason::DiskFull);
    }
}
