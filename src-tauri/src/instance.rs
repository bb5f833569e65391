//! One app per data folder: a second launch on the same folder asks the running one to show its
//! window, then exits, so two processes never write one chats database or load the model twice.
//!
//! The first launch holds an exclusive lock on `gemma-desk-<hash>.lock` for as long as it runs
//! (the OS drops it when the process ends, however it ends) and listens on the Unix socket
//! `gemma-desk-<hash>.sock` beside it, where `<hash>` names the data folder's path. A launch
//! that cannot take the lock connects and writes `show`. Keyed by folder, not by app id: tests
//! and `--data-dir` copies run side by side. Both files live in the user's runtime folder
//! (`$XDG_RUNTIME_DIR`, else the temporary folder), not in the data folder: a launch that quits
//! at once (the damaged-history dialog's Quit) leaves the data folder exactly as it was, and the
//! socket's path stays short enough for its name.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SHOW: &str = "show";

/// How long a second launch keeps trying to reach a first one that is still starting.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// What this launch is.
pub enum Instance {
    /// The only one on this folder: keep the guard for as long as the app runs.
    First(Guard),
    /// Another process runs on this folder and was asked to show its window (`shown`: whether
    /// it answered).
    Second { shown: bool },
}

/// Holds the folder's lock and answers later launches.
pub struct Guard {
    _lock: File,
    socket: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.socket);
    }
}

/// Claims `data_dir` for this process. `on_show` runs (on a background thread) each time a
/// later launch on the same folder asks for the window.
pub fn claim(data_dir: &Path, on_show: impl Fn() + Send + 'static) -> io::Result<Instance> {
    // Made first, so that its path is the same canonical one at every launch.
    fs::create_dir_all(data_dir)?;
    let (lock_path, socket) = rendezvous(data_dir);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Ok(Instance::Second {
                shown: ask_to_show(&socket),
            })
        }
        Err(TryLockError::Error(err)) => return Err(err),
    }
    // A socket file left by a process that ended without cleaning up answers nobody.
    let _ = fs::remove_file(&socket);
    match UnixListener::bind(&socket) {
        Ok(listener) => {
            std::thread::Builder::new()
                .name("single-instance".into())
                .spawn(move || serve(&listener, &on_show))?;
        }
        // A folder path too long for a socket name still gets the lock: later launches exit,
        // they just cannot bring the window forward.
        Err(err) => eprintln!("gemma-desk: later launches cannot show this window: {err}"),
    }
    Ok(Instance::First(Guard {
        _lock: lock,
        socket,
    }))
}

/// The lock file and the socket of `data_dir`.
fn rendezvous(data_dir: &Path) -> (PathBuf, PathBuf) {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    // The same folder however it was written (relative, through a symlink), once it exists.
    let folder = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let name = format!("gemma-desk-{:016x}", fnv1a(folder.as_os_str().as_bytes()));
    (
        base.join(format!("{name}.lock")),
        base.join(format!("{name}.sock")),
    )
}

/// 64-bit FNV-1a: a hash that stays the same across builds and Rust versions.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn serve(listener: &UnixListener, on_show: &impl Fn()) {
    for stream in listener.incoming().flatten() {
        let mut line = String::new();
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if BufReader::new(&stream).read_line(&mut line).is_ok() && line.trim() == SHOW {
            on_show();
        }
    }
}

/// Asks the instance holding the lock to show its window; false if it never answered.
fn ask_to_show(socket: &Path) -> bool {
    let deadline = Instant::now() + REACH_TIMEOUT;
    loop {
        if let Ok(mut stream) = UnixStream::connect(socket) {
            return writeln!(stream, "{SHOW}").is_ok();
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn shows(count: &Arc<AtomicUsize>) -> impl Fn() + Send + 'static {
        let count = count.clone();
        move || {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(count: &AtomicUsize, value: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while count.load(Ordering::SeqCst) != value {
            assert!(
                Instant::now() < deadline,
                "the first launch was not asked to show"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_second_launch_on_the_same_folder_shows_the_first_and_stands_down() {
        let temp = tempfile::tempdir().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let first = claim(temp.path(), shows(&count)).unwrap();
        assert!(matches!(first, Instance::First(_)));

        let second = claim(temp.path(), || panic!("a second launch never serves")).unwrap();
        assert!(matches!(second, Instance::Second { shown: true }));
        wait_for(&count, 1);
        assert!(matches!(
            claim(temp.path(), || {}).unwrap(),
            Instance::Second { shown: true }
        ));
        wait_for(&count, 2);

        // Nothing is written into the data folder.
        assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0);
        // Another folder is another app.
        let other = tempfile::tempdir().unwrap();
        assert!(matches!(
            claim(other.path(), || {}).unwrap(),
            Instance::First(_)
        ));

        // Once the first quits, the next launch is the first again, despite any leftover socket.
        drop(first);
        fs::write(rendezvous(temp.path()).1, b"stale").unwrap();
        assert!(matches!(
            claim(temp.path(), || {}).unwrap(),
            Instance::First(_)
        ));
    }
}
