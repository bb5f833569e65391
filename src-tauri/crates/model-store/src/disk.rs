//! Free disk space, and sizes written for people.

use std::io;
use std::path::Path;

/// Bytes available to this user on the file system holding `path`, if the system says.
#[cfg(unix)]
pub(crate) fn available_space(path: &Path) -> Option<u64> {
    use std::ffi::CString;
    use std::mem::MaybeUninit;
    use std::os::unix::ffi::OsStrExt;

    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stat` is a properly sized out-parameter.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    // The field widths differ between macOS and Linux.
    #[allow(clippy::unnecessary_cast)]
    let (blocks, block_size) = (stat.f_bavail as u64, stat.f_frsize as u64);
    Some(blocks.saturating_mul(block_size))
}

#[cfg(not(unix))]
pub(crate) fn available_space(_path: &Path) -> Option<u64> {
    None
}

/// Whether a write failed because the disk (or the user's quota) is full.
pub(crate) fn is_disk_full(error: &io::Error) -> bool {
    if error.kind() == io::ErrorKind::StorageFull || error.kind() == io::ErrorKind::QuotaExceeded {
        return true;
    }
    #[cfg(unix)]
    if matches!(
        error.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT)
    ) {
        return true;
    }
    false
}

/// A size in decimal units, as Finder shows them: "512 KB", "3.2 GB".
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, f64); 3] = [("GB", 1e9), ("MB", 1e6), ("KB", 1e3)];
    let b = bytes as f64;
    for (unit, scale) in UNITS {
        if b >= scale {
            let value = b / scale;
            return if value < 10.0 {
                format!("{value:.1} {unit}")
            } else {
                format!("{value:.0} {unit}")
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_finder() {
        assert_eq!(human_size(0), "0 bytes");
        assert_eq!(human_size(999), "999 bytes");
        assert_eq!(human_size(1_500), "1.5 KB");
        assert_eq!(human_size(350_000_000), "350 MB");
        assert_eq!(human_size(2_340_000_000), "2.3 GB");
        assert_eq!(human_size(12_600_000_000), "13 GB");
    }

    #[test]
    fn full_disks_are_recognised() {
        assert!(is_disk_full(&io::Error::from(io::ErrorKind::StorageFull)));
        #[cfg(unix)]
        assert!(is_disk_full(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(!is_disk_full(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
    }

    #[test]
    fn the_temp_folder_has_some_space() {
        let space = available_space(&std::env::temp_dir());
        assert!(cfg!(not(unix)) || space.is_some_and(|s| s > 0));
    }
}
