//! Command-line options. Only `--data-dir` exists: it keeps tests and second copies of the app
//! away from the user's real data.

use std::ffi::OsString;
use std::path::{self, PathBuf};

use anyhow::{bail, Context};

const USAGE: &str = "usage: gemma-desk [--data-dir <folder>]";

/// Options given on the command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Replaces the OS app-data folder; made absolute against the working directory.
    pub data_dir: Option<PathBuf>,
}

impl LaunchOptions {
    /// Parses the arguments after the program name. Unknown `--options` are errors; other
    /// arguments (e.g. the `-psn_…` some macOS launchers add) are ignored.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> anyhow::Result<Self> {
        let mut options = Self::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let Some(text) = arg.to_str() else { continue };
            let value = if text == "--data-dir" {
                args.next()
                    .with_context(|| format!("--data-dir needs a folder\n{USAGE}"))?
            } else if let Some(value) = text.strip_prefix("--data-dir=") {
                OsString::from(value)
            } else if text.starts_with("--") {
                bail!("unknown option {text}\n{USAGE}");
            } else {
                continue;
            };
            if value.is_empty() {
                bail!("--data-dir needs a folder\n{USAGE}");
            }
            let dir = path::absolute(&value)
                .with_context(|| format!("could not resolve --data-dir {}", value.display()))?;
            options.data_dir = Some(dir);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<LaunchOptions> {
        LaunchOptions::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn no_arguments_keeps_the_os_data_folder() {
        assert_eq!(parse(&[]).unwrap(), LaunchOptions::default());
    }

    #[test]
    fn data_dir_accepts_both_spellings() {
        let expected = Some(PathBuf::from("/tmp/gemma"));
        assert_eq!(
            parse(&["--data-dir", "/tmp/gemma"]).unwrap().data_dir,
            expected
        );
        assert_eq!(
            parse(&["--data-dir=/tmp/gemma"]).unwrap().data_dir,
            expected
        );
    }

    #[test]
    fn relative_data_dir_becomes_absolute() {
        let dir = parse(&["--data-dir", "rel"]).unwrap().data_dir.unwrap();
        assert!(dir.is_absolute());
        assert!(dir.ends_with("rel"));
    }

    #[test]
    fn missing_or_empty_data_dir_is_an_error() {
        for args in [&["--data-dir"][..], &["--data-dir="], &["--data-dir", ""]] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains("--data-dir needs a folder"), "{args:?}: {err}");
        }
    }

    #[test]
    fn unknown_options_are_errors_and_launcher_noise_is_ignored() {
        assert!(parse(&["--data-dri", "x"]).is_err());
        assert_eq!(parse(&["-psn_0_1234"]).unwrap(), LaunchOptions::default());
    }
}
