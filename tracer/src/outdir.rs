//! The directories the tracer writes in (`--output`'s, `--dump-dir`), opened once at the
//! start: every file is created relative to that descriptor, mode 0600 (traces name
//! processes, cgroups and files), never through a symbolic link and never over a file that is
//! there, so a local user who can write to the directory cannot make the tracer write
//! elsewhere or clobber something.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// A directory held open.
#[derive(Debug)]
pub struct OutDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    if name.is_empty() || name.as_bytes().contains(&b'/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a file name", name.display()),
        ));
    }
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a file name with a NUL byte"))
}

/// Retry a system call interrupted by a signal.
fn retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let r = f();
        if r >= 0 {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl OutDir {
    /// Open `path` (a directory; "" is the current one).
    pub fn open(path: &Path) -> io::Result<OutDir> {
        let path = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
        // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
        let fd = retry(|| unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        Ok(OutDir {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_owned(),
        })
    }

    /// Where a name in it is, for messages and readers.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new file `name`, 0600, for writing; `AlreadyExists` when anything (a file, a
    /// symbolic link, dangling or not) is there.
    pub fn create_new(&self, name: &OsStr) -> io::Result<File> {
        let c = c_name(name)?;
        // SAFETY: a valid descriptor and a NUL-terminated name for the call's duration.
        let fd = retry(|| unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        })?;
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// File `name` anew: a regular file there is removed first (a rerun of the same
    /// `--output`); a symbolic link or anything else there is refused.
    pub fn replace(&self, name: &OsStr) -> io::Result<File> {
        match self.kind_of(name)? {
            None => {}
            Some(k) if k == libc::S_IFREG => self.remove(name)?,
            Some(k) => {
                let what = if k == libc::S_IFLNK {
                    "a symbolic link"
                } else {
                    "not a regular file"
                };
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} is {what}: not written through",
                        self.join(name).display()
                    ),
                ));
            }
        }
        self.create_new(name)
    }

    /// The file type bits of `name` (not following a link), or None if nothing is there.
    fn kind_of(&self, name: &OsStr) -> io::Result<Option<libc::mode_t>> {
        let c = c_name(name)?;
        // SAFETY: all-zero is a valid `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, name and out-pointer for the call's duration.
        match retry(|| unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &raw mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        }) {
            Ok(_) => Ok(Some(st.st_mode & libc::S_IFMT)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether anything is at `name` (a dangling link counts).
    pub fn exists(&self, name: &OsStr) -> bool {
        !matches!(self.kind_of(name), Ok(None))
    }

    /// The size of regular file `name`, not following a link.
    pub fn size_of(&self, name: &OsStr) -> Option<u64> {
        let c = c_name(name).ok()?;
        // SAFETY: all-zero is a valid `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, name and out-pointer for the call's duration.
        retry(|| unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &raw mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFREG).then(|| u64::try_from(st.st_size).unwrap_or(0))
    }

    /// Remove `name` (a link itself, never what it points to).
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and name for the call's duration.
        retry(|| unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
    }

    /// Rename `from` to `to` inside the directory, never over something already at `to`
    /// (`AlreadyExists` then).
    pub fn rename_new(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (f, t) = (c_name(from)?, c_name(to)?);
        let fd = self.fd.as_raw_fd();
        // The system call itself: the static (musl) build's C library has no wrapper for it.
        // SAFETY: valid descriptors and names for the call's duration.
        let r = retry(|| unsafe {
            let r = libc::syscall(
                libc::SYS_renameat2,
                fd,
                f.as_ptr(),
                fd,
                t.as_ptr(),
                libc::RENAME_NOREPLACE,
            );
            libc::c_int::try_from(r).unwrap_or(-1)
        });
        match r {
            Ok(_) => Ok(()),
            // A file system without RENAME_NOREPLACE: a hard link fails as well if `to` is
            // there, then the old name goes.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // SAFETY: as above.
                retry(|| unsafe { libc::linkat(fd, f.as_ptr(), fd, t.as_ptr(), 0) })?;
                self.remove(from)
            }
            Err(e) => Err(e),
        }
    }

    /// The bytes an unprivileged writer may still write on its file system.
    pub fn free_bytes(&self) -> Option<u64> {
        // SAFETY: all-zero is a valid `statvfs`.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and out-pointer for the call's duration.
        retry(|| unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &raw mut st) }).ok()?;
        Some(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// The names in the directory (unreadable entries left out).
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        // Through /proc/self/fd so that the listing is of the directory held, even if its
        // path now leads elsewhere.
        let via = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        let dir = std::fs::read_dir(&via).or_else(|_| std::fs::read_dir(&self.path))?;
        Ok(dir.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn files_are_private_new_and_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let d = OutDir::open(t.path()).unwrap();
        let f = d.create_new(OsStr::new("a.blkp")).unwrap();
        drop(f);
        let mode = std::fs::metadata(t.path().join("a.blkp"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = d.create_new(OsStr::new("a.blkp")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);

        // A link planted at the name, dangling or not, is neither followed nor replaced.
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("b.blkp")).unwrap();
        std::os::unix::fs::symlink(t.path().join("nowhere"), t.path().join("c.blkp")).unwrap();
        for n in ["b.blkp", "c.blkp"] {
            assert_eq!(
                d.create_new(OsStr::new(n)).unwrap_err().kind(),
                io::ErrorKind::AlreadyExists
            );
            let e = d.replace(OsStr::new(n)).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!t.path().join("nowhere").exists());

        // A regular file is replaced, not truncated in place (a hard link to it keeps its data).
        std::fs::hard_link(t.path().join("a.blkp"), t.path().join("hard")).unwrap();
        std::fs::write(t.path().join("hard"), b"old").unwrap();
        d.replace(OsStr::new("a.blkp")).unwrap();
        assert_eq!(std::fs::read(t.path().join("hard")).unwrap(), b"old");
        assert_eq!(std::fs::read(t.path().join("a.blkp")).unwrap(), b"");

        // Renames never clobber.
        d.create_new(OsStr::new("x.part")).unwrap();
        assert_eq!(
            d.rename_new(OsStr::new("x.part"), OsStr::new("a.blkp"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        d.rename_new(OsStr::new("x.part"), OsStr::new("x.blkp"))
            .unwrap();
        assert!(d.exists(OsStr::new("x.blkp")) && !d.exists(OsStr::new("x.part")));

        for bad in ["", ".", "..", "a/b"] {
            assert!(d.create_new(OsStr::new(bad)).is_err(), "{bad:?}");
        }
    }
}
