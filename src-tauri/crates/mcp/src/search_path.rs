//! Where a server's command is looked for. A GUI app on macOS starts with launchd's short
//! `PATH` (`/usr/bin:/bin:/usr/sbin:/sbin`), so `npx` or `uvx` installed by Homebrew, nvm or
//! uv are "not found" (the classic Claude Desktop failure). The app asks the user's login
//! shell for its `PATH` once (`$SHELL -lic 'printf …"$PATH"'`, with a timeout) and puts those
//! folders before its own; a command still not found is named with every folder searched.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const START: &str = "__GEMMA_DESK_PATH_START__";
const END: &str = "__GEMMA_DESK_PATH_END__";

/// How long the login shell may take (a slow `.zshrc` included) before the app's own `PATH`
/// is used alone.
pub const LOGIN_SHELL_TIMEOUT: Duration = Duration::from_secs(5);

/// The `PATH` of `shell` started as an interactive login shell, or `None` when it fails, prints
/// no `PATH` or takes longer than `timeout` (then it is killed). The markers keep whatever
/// the user's startup files print out of the value.
pub fn login_shell_path(shell: &Path, timeout: Duration) -> Option<OsString> {
    let script = format!("printf '%s%s%s' '{START}' \"$PATH\" '{END}'");
    let mut child = Command::new(shell)
        .args(["-l", "-i", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.by_ref().take(1 << 20).read_to_end(&mut out);
        out
    });
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = String::from_utf8_lossy(&reader.join().ok()?).into_owned();
    let start = out.find(START)? + START.len();
    let len = out[start..].find(END)?;
    let path = &out[start..start + len];
    (!path.is_empty()).then(|| OsString::from(path))
}

/// The folders a command is looked for in, in order: the login shell's first (macOS), then
/// the app's own `PATH`, each once.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPath {
    pub folders: Vec<PathBuf>,
}

impl SearchPath {
    /// Asks the user's shell (`$SHELL`, else `/bin/zsh`) on macOS; elsewhere a GUI app gets
    /// the session's `PATH` and only that is used. Call once per app run.
    pub fn resolve() -> SearchPath {
        let own = std::env::var_os("PATH").unwrap_or_default();
        let shell = if cfg!(target_os = "macos") {
            let shell = std::env::var_os("SHELL")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/bin/zsh"));
            login_shell_path(&shell, LOGIN_SHELL_TIMEOUT)
        } else {
            None
        };
        SearchPath::from_parts(shell.as_deref(), &own)
    }

    pub fn from_parts(login_shell: Option<&std::ffi::OsStr>, own: &std::ffi::OsStr) -> SearchPath {
        let mut folders: Vec<PathBuf> = Vec::new();
        for part in login_shell.into_iter().chain([own]) {
            for folder in std::env::split_paths(part) {
                if !folder.as_os_str().is_empty() && !folders.contains(&folder) {
                    folders.push(folder);
                }
            }
        }
        SearchPath { folders }
    }

    /// The value given to a server as its `PATH` (so `npx` finds `node`).
    pub fn joined(&self) -> OsString {
        std::env::join_paths(&self.folders).unwrap_or_default()
    }

    /// The executable `command` names: a path as written (relative to `cwd`), a bare name
    /// searched in the folders.
    pub fn find(&self, command: &str, cwd: Option<&Path>) -> Result<PathBuf, NotFound> {
        if command.contains('/') {
            let path = match cwd {
                Some(cwd) if Path::new(command).is_relative() => cwd.join(command),
                _ => PathBuf::from(command),
            };
            return if is_executable(&path) {
                Ok(path)
            } else {
                Err(NotFound {
                    command: command.to_string(),
                    searched: vec![path],
                })
            };
        }
        self.folders
            .iter()
            .map(|folder| folder.join(command))
            .find(|path| is_executable(path))
            .ok_or_else(|| NotFound {
                command: command.to_string(),
                searched: self.folders.clone(),
            })
    }
}

/// A command that is not where it was looked for: said exactly, with every folder searched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the command \"{command}\" was not found. Searched: {}. Install it, or write its full path as the server's command (in Terminal, `command -v {command}` prints it).", .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
pub struct NotFound {
    pub command: String,
    pub searched: Vec<PathBuf>,
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn login_shell_path_is_read_between_markers_despite_banners() {
        let dir = tempfile::tempdir().unwrap();
        // A shell whose startup prints a banner; it drops `-l -i -c` and runs the script.
        let shell = script(
            dir.path(),
            "fakeshell",
            "echo 'Welcome, last login…'\nPATH=/opt/homebrew/bin:/usr/bin\nshift 3\neval \"$1\"; echo trailing",
        );
        let got = login_shell_path(&shell, Duration::from_secs(5)).unwrap();
        assert_eq!(got, OsString::from("/opt/homebrew/bin:/usr/bin"));
    }

    #[test]
    fn a_hanging_login_shell_is_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let shell = script(dir.path(), "slowshell", "exec sleep 30");
        let start = Instant::now();
        assert_eq!(login_shell_path(&shell, Duration::from_millis(300)), None);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn login_shell_folders_come_first_each_once() {
        let sp = SearchPath::from_parts(
            Some("/opt/homebrew/bin:/usr/bin".as_ref()),
            "/usr/bin:/bin".as_ref(),
        );
        assert_eq!(
            sp.folders,
            ["/opt/homebrew/bin", "/usr/bin", "/bin"].map(PathBuf::from)
        );
    }

    #[test]
    fn a_missing_command_names_itself_and_every_folder_searched() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "mytool", "true");
        let sp = SearchPath::from_parts(
            None,
            format!("/nonexistent:{}", dir.path().display()).as_ref(),
        );
        assert_eq!(sp.find("mytool", None).unwrap(), tool);
        let err = sp.find("npx-not-here", None).unwrap_err();
        assert_eq!(err.command, "npx-not-here");
        let msg = err.to_string();
        assert!(
            msg.starts_with("the command \"npx-not-here\" was not found. Searched: /nonexistent, "),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        // A path is taken as written.
        assert!(sp.find("./mytool", Some(dir.path())).is_ok());
        let err = sp.find("/no/such/node", None).unwrap_err();
        assert_eq!(err.searched, vec![PathBuf::from("/no/such/node")]);
    }
}
