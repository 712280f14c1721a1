//! Signals to this process's own children, by pid or by process group.

use std::process::Child;

/// The child's pid, as libc takes it.
#[expect(
    clippy::cast_possible_wrap,
    reason = "a pid is at most pid_max (2^22 at most), far below i32::MAX"
)]
pub(crate) fn pid(child: &Child) -> libc::pid_t {
    child.id() as libc::pid_t
}

/// Send `sig` to `child`, which the caller holds and has not reaped.
pub(crate) fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped (the caller
    // holds it), so it names no other process.
    unsafe { libc::kill(pid(child), sig) };
}

/// Send `sig` to `child`'s process group (a child spawned with `process_group(0)`: it and the
/// children it started).
pub(crate) fn signal_group(child: &Child, sig: libc::c_int) {
    // SAFETY: as in `signal`; the group is the child's own.
    unsafe { libc::kill(-pid(child), sig) };
}
