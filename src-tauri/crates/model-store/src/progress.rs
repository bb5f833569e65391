//! Download progress as the UI sees it, and the meter that produces it: a smoothed speed, an
//! estimate of the time left, and at most about ten reports a second.

use std::time::{Duration, Instant};

use serde::Serialize;

/// Where a download stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct DownloadProgress {
    /// The file being downloaded (its path in the repository).
    pub file: String,
    pub files_done: u32,
    pub files_total: u32,
    /// Bytes on disk so far, including what earlier runs left to resume from. Never decreases.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub bytes_done: u64,
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub bytes_total: u64,
    /// Network speed, smoothed over the last few seconds.
    pub bytes_per_second: f64,
    /// Time left at the current speed; `None` until there is a speed to go by.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub eta_seconds: Option<u64>,
}

/// Least time between two reports.
const REPORT_EVERY: Duration = Duration::from_millis(100);
/// Least time between two speed samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Time constant of the speed's exponential smoothing.
const SMOOTHING: Duration = Duration::from_secs(3);

/// Turns byte counts into throttled `DownloadProgress` reports.
pub(crate) struct Meter<'a> {
    report: &'a mut dyn FnMut(&DownloadProgress),
    state: DownloadProgress,
    last_report: Option<Instant>,
    sample_start: Instant,
    sample_bytes: u64,
    speed: Option<f64>,
}

impl<'a> Meter<'a> {
    pub fn new(report: &'a mut dyn FnMut(&DownloadProgress), files: u32, bytes: u64) -> Self {
        Self {
            report,
            state: DownloadProgress {
                file: String::new(),
                files_done: 0,
                files_total: files,
                bytes_done: 0,
                bytes_total: bytes,
                bytes_per_second: 0.0,
                eta_seconds: None,
            },
            last_report: None,
            sample_start: Instant::now(),
            sample_bytes: 0,
            speed: None,
        }
    }

    pub fn total(&self) -> u64 {
        self.state.bytes_total
    }

    /// The file now being worked on.
    pub fn file(&mut self, path: &str) {
        path.clone_into(&mut self.state.file);
        self.tick();
    }

    /// Bytes of finished work that were already on disk (completed or resumable files).
    pub fn already_on_disk(&mut self, bytes: u64) {
        self.state.bytes_done = self.state.bytes_done.max(bytes);
    }

    /// `received` new bytes came off the network; `done` bytes of the download are now on disk.
    pub fn received(&mut self, received: u64, done: u64) {
        self.sample_bytes += received;
        self.state.bytes_done = self.state.bytes_done.max(done).min(self.state.bytes_total);
        self.tick();
    }

    pub fn file_done(&mut self) {
        self.state.files_done = (self.state.files_done + 1).min(self.state.files_total);
        self.tick();
    }

    /// Updates the speed and reports, if enough time has passed. Call it even while idle, so a
    /// stalled download shows its speed falling.
    pub fn tick(&mut self) {
        let now = Instant::now();
        let elapsed = now - self.sample_start;
        if elapsed >= SAMPLE_EVERY {
            let instant = self.sample_bytes as f64 / elapsed.as_secs_f64();
            let weight = 1.0 - (-elapsed.as_secs_f64() / SMOOTHING.as_secs_f64()).exp();
            let speed = match self.speed {
                Some(speed) => speed + weight * (instant - speed),
                None => instant,
            };
            self.speed = Some(speed);
            self.sample_start = now;
            self.sample_bytes = 0;
        }
        if self.last_report.is_none_or(|t| now - t >= REPORT_EVERY) {
            self.emit(now);
        }
    }

    /// Reports the final state whatever the time since the last report.
    pub fn finish(&mut self) {
        self.state.bytes_done = self.state.bytes_total;
        self.state.files_done = self.state.files_total;
        self.state.eta_seconds = Some(0);
        (self.report)(&self.state);
    }

    fn emit(&mut self, now: Instant) {
        let speed = self.speed.unwrap_or(0.0);
        let left = self.state.bytes_total - self.state.bytes_done;
        self.state.bytes_per_second = speed;
        self.state.eta_seconds = (speed >= 1.0).then(|| (left as f64 / speed).ceil() as u64);
        self.last_report = Some(now);
        (self.report)(&self.state);
    }
}
