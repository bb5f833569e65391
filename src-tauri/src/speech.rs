//! Read aloud: an answer spoken with the system's voices, on this computer only.
//!
//! The platform's own speech command speaks: `say` on macOS (the system speech synthesizer and
//! the voice chosen in System Settings → Accessibility → Spoken Content), `espeak-ng` on Linux.
//! The text goes to the command's standard input, never onto its command line, and nothing is
//! sent anywhere else. Stopping kills the command. docs/READ_ALOUD.md says why a command and not
//! a speech library.
//!
//! The UI hands over the text a person reads (ui/src/views/read-aloud.ts drops code blocks and
//! markup). One answer speaks at a time: a new one stops the last. Where it stands comes back as
//! [`SpeechEvent`]s.
//!
//! Tests and the e2e suite capture the voice instead of playing it ([`CAPTURE_ENV`]):
//! `espeak-ng` writes a WAV stream that is copied to a file at the pace it would play, so
//! stopping halfway leaves half the audio, as a loudspeaker would have.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use ts_rs::TS;

use crate::error::Error;

/// When set (to a file path), speech is written there as WAV at playing pace, not played.
pub const CAPTURE_ENV: &str = "GEMMA_DESK_SPEECH_CAPTURE";

/// The event name the UI listens to.
pub const EVENT: &str = "speech";

/// Where reading aloud stands, for the answer `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum SpeechEvent {
    /// Reading `id` aloud has started.
    Speaking { id: String },
    /// Reading `id` reached its end.
    Done { id: String },
    /// Reading `id` was stopped (Stop, Esc, or another answer read aloud).
    Stopped { id: String },
    /// Reading `id` failed; `error` says why, in words.
    Failed { id: String, error: String },
}

/// Where the voice goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The computer's speakers.
    Speakers,
    /// A WAV file, written at playing pace (tests and the e2e suite).
    Capture(PathBuf),
}

impl Output {
    /// [`CAPTURE_ENV`]'s file when it is set, else the speakers.
    pub fn from_env() -> Self {
        match std::env::var_os(CAPTURE_ENV) {
            Some(path) if !path.is_empty() => Self::Capture(PathBuf::from(path)),
            _ => Self::Speakers,
        }
    }
}

type Notify = Arc<dyn Fn(&SpeechEvent) + Send + Sync>;

/// The answer being read.
struct Job {
    id: String,
    child: Arc<Mutex<Child>>,
    stopped: Arc<AtomicBool>,
}

/// Reads answers aloud, one at a time; cheap to clone.
#[derive(Clone)]
pub struct Speaker {
    output: Output,
    notify: Notify,
    current: Arc<Mutex<Option<Job>>>,
    /// Held by a capture while it writes the file: the next one starts writing after it.
    capturing: Arc<Mutex<()>>,
}

impl Speaker {
    pub fn new(output: Output, notify: impl Fn(&SpeechEvent) + Send + Sync + 'static) -> Self {
        Self {
            output,
            notify: Arc::new(notify),
            current: Arc::new(Mutex::new(None)),
            capturing: Arc::new(Mutex::new(())),
        }
    }

    /// Starts reading `text` aloud as answer `id`, stopping whatever was being read. Returns
    /// once the voice has started; the end comes as an event.
    pub fn speak(&self, id: String, text: &str) -> Result<(), Error> {
        let text = speakable(text);
        if text.trim().is_empty() {
            return Err(Error::Invalid(
                "This answer has no text to read aloud (only code or images).".into(),
            ));
        }
        let mut current = self.lock();
        if let Some(job) = current.take() {
            stop_job(&job);
        }
        let mut child = self.command().spawn().map_err(|e| spawn_error(&e))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let child = Arc::new(Mutex::new(child));
        let stopped = Arc::new(AtomicBool::new(false));
        *current = Some(Job {
            id: id.clone(),
            child: child.clone(),
            stopped: stopped.clone(),
        });
        (self.notify)(&SpeechEvent::Speaking { id: id.clone() });
        drop(current);

        let speaker = self.clone();
        let output = self.output.clone();
        thread::Builder::new()
            .name("read-aloud".into())
            .spawn(move || {
                // The command reads all of its input before it speaks; a write error means it
                // already ended, which `wait` reports.
                if let Some(mut stdin) = stdin {
                    let _ = stdin.write_all(text.as_bytes());
                }
                let capture = match (&output, stdout) {
                    (Output::Capture(path), Some(stdout)) => {
                        let path = path.clone();
                        let stopped = stopped.clone();
                        let capturing = speaker.capturing.clone();
                        Some(thread::spawn(move || {
                            let _writing = capturing.lock().unwrap_or_else(|e| e.into_inner());
                            capture_paced(stdout, &path, &stopped)
                        }))
                    }
                    _ => None,
                };
                let errors = stderr.map(|mut stderr| {
                    thread::spawn(move || {
                        let mut text = String::new();
                        let _ = stderr.read_to_string(&mut text);
                        text
                    })
                });
                let status = wait(&child);
                let captured = capture.map(|c| c.join().unwrap_or_else(|_| Err(panicked())));
                let errors = errors.and_then(|e| e.join().ok()).unwrap_or_default();
                let event = if stopped.load(Ordering::SeqCst) {
                    SpeechEvent::Stopped { id: id.clone() }
                } else {
                    match outcome(status, captured, &errors) {
                        Ok(()) => SpeechEvent::Done { id: id.clone() },
                        Err(error) => SpeechEvent::Failed {
                            id: id.clone(),
                            error,
                        },
                    }
                };
                speaker.finished(&child, &event);
            })
            .map_err(|e| Error::Internal(format!("could not start reading aloud: {e}")))?;
        Ok(())
    }

    /// Stops reading aloud; the id of the answer that was being read, if any. The `Stopped`
    /// event follows once the voice has ended.
    pub fn stop(&self) -> Option<String> {
        let job = self.lock().take()?;
        stop_job(&job);
        Some(job.id)
    }

    /// The answer being read now.
    #[cfg(test)]
    pub fn speaking(&self) -> Option<String> {
        self.lock().as_ref().map(|job| job.id.clone())
    }

    /// A job's voice ended: it is no longer current (unless another one already is) and the UI
    /// hears how it ended.
    fn finished(&self, child: &Arc<Mutex<Child>>, event: &SpeechEvent) {
        let mut current = self.lock();
        if current
            .as_ref()
            .is_some_and(|job| Arc::ptr_eq(&job.child, child))
        {
            *current = None;
        }
        drop(current);
        (self.notify)(event);
    }

    fn lock(&self) -> MutexGuard<'_, Option<Job>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The platform's speech command, reading its text from standard input.
    fn command(&self) -> Command {
        let mut command = match &self.output {
            // espeak-ng writes a WAV stream (22,050 Hz mono) to standard output.
            Output::Capture(_) => {
                let mut command = Command::new(LINUX_VOICE);
                command.args(["--stdin", "--stdout"]);
                command
            }
            Output::Speakers => speakers_command(),
        };
        let stdout = match self.output {
            Output::Capture(_) => Stdio::piped(),
            Output::Speakers => Stdio::null(),
        };
        command
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped());
        command
    }
}

/// The Linux speech command (the synthesizer speech-dispatcher itself uses by default).
const LINUX_VOICE: &str = "espeak-ng";

#[cfg(target_os = "macos")]
fn speakers_command() -> Command {
    // `say` with no text argument reads standard input.
    Command::new("/usr/bin/say")
}

#[cfg(not(target_os = "macos"))]
fn speakers_command() -> Command {
    let mut command = Command::new(LINUX_VOICE);
    command.arg("--stdin");
    command
}

fn spawn_error(err: &io::Error) -> Error {
    if err.kind() == io::ErrorKind::NotFound {
        if cfg!(target_os = "macos") {
            Error::Invalid("Reading aloud needs /usr/bin/say, which this Mac lacks.".into())
        } else {
            Error::Invalid(format!(
                "Reading aloud needs {LINUX_VOICE}, the speech synthesizer. Install it with: sudo apt install {LINUX_VOICE}"
            ))
        }
    } else {
        Error::Internal(format!("could not start the speech synthesizer: {err}"))
    }
}

fn panicked() -> io::Error {
    io::Error::other("the capture thread stopped")
}

/// Marks the job stopped and ends its command (an ended one is left as it is).
fn stop_job(job: &Job) {
    job.stopped.store(true, Ordering::SeqCst);
    let mut child = job.child.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
    }
}

/// Waits for the command, polling so that [`stop_job`] can take the lock and kill it.
fn wait(child: &Mutex<Child>) -> io::Result<std::process::ExitStatus> {
    loop {
        {
            let mut child = child.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// How a voice that was not stopped ended, in words. espeak-ng exits 0 even when no sound
/// output opens (no sound card), so what it wrote to standard error counts too.
fn outcome(
    status: io::Result<std::process::ExitStatus>,
    captured: Option<io::Result<()>>,
    errors: &str,
) -> Result<(), String> {
    let said = errors
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("");
    match status {
        Err(e) => return Err(format!("The speech synthesizer could not be watched: {e}")),
        Ok(status) if !status.success() => {
            return Err(if said.is_empty() {
                format!("The speech synthesizer failed ({status}).")
            } else {
                format!("The speech synthesizer failed: {said}")
            })
        }
        Ok(_) => {}
    }
    if let Some(Err(e)) = captured {
        return Err(format!("The speech could not be captured: {e}"));
    }
    if errors.to_ascii_lowercase().contains("error") {
        return Err(format!(
            "No sound could be played (is a sound output connected?): {said}"
        ));
    }
    Ok(())
}

/// The text as the synthesizer should get it: `say` treats `[[…]]` as commands (voice, rate,
/// volume), so a text's own brackets are split to stay words; control characters become
/// spaces.
pub fn speakable(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .collect();
    let mut out = cleaned;
    while out.contains("[[") || out.contains("]]") {
        out = out.replace("[[", "[ [").replace("]]", "] ]");
    }
    out
}

/// Bytes of a canonical WAV header (what espeak-ng writes).
const WAV_HEADER: usize = 44;

/// Copies the WAV stream from `source` to `path` no faster than it would play, then writes the
/// real sizes into the header (a stream's header has placeholders). Once `stopped`, nothing
/// more is written, as a loudspeaker goes quiet: the pipe may still hold a second or two of
/// audio the killed synthesizer wrote ahead.
fn capture_paced(mut source: impl Read, path: &Path, stopped: &AtomicBool) -> io::Result<()> {
    let mut header = [0u8; WAV_HEADER];
    let mut file = File::create(path)?;
    if let Err(e) = source.read_exact(&mut header) {
        // Stopped before a sound: an empty file says so.
        return if e.kind() == io::ErrorKind::UnexpectedEof {
            Ok(())
        } else {
            Err(e)
        };
    }
    if &header[0..4] != b"RIFF" || &header[8..12] != b"WAVE" || &header[36..40] != b"data" {
        return Err(io::Error::other("the synthesizer did not write WAV audio"));
    }
    let byte_rate = u32::from_le_bytes([header[28], header[29], header[30], header[31]]);
    if byte_rate == 0 {
        return Err(io::Error::other("the synthesizer's WAV has no byte rate"));
    }
    file.write_all(&header)?;
    let start = Instant::now();
    let mut written: u64 = 0;
    let mut buffer = vec![0u8; 4096];
    loop {
        let n = match source.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Each chunk is written when the one before it has played.
        let due = Duration::from_secs_f64(written as f64 / f64::from(byte_rate));
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            thread::sleep(wait);
        }
        if stopped.load(Ordering::SeqCst) {
            break;
        }
        file.write_all(&buffer[..n])?;
        written += n as u64;
    }
    let data = u32::try_from(written).unwrap_or(u32::MAX - 36);
    file.seek(SeekFrom::Start(4))?;
    file.write_all(&(data + 36).to_le_bytes())?;
    file.seek(SeekFrom::Start(40))?;
    file.write_all(&data.to_le_bytes())?;
    file.flush()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A speaker that captures to a file in `dir`, and the events it sent.
    fn capturing(dir: &Path) -> (Speaker, PathBuf, mpsc::Receiver<SpeechEvent>) {
        let path = dir.join("speech.wav");
        let (send, events) = mpsc::channel();
        let send = Mutex::new(send);
        let speaker = Speaker::new(Output::Capture(path.clone()), move |event| {
            let _ = send.lock().unwrap().send(event.clone());
        });
        (speaker, path, events)
    }

    fn next(events: &mpsc::Receiver<SpeechEvent>) -> SpeechEvent {
        events
            .recv_timeout(Duration::from_secs(60))
            .expect("no speech event within a minute")
    }

    /// Seconds of audio in a 16-bit PCM WAV file, and its loudness (RMS, 0..1).
    fn measure(path: &Path) -> (f64, f64) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.len() >= WAV_HEADER, "no WAV header in {path:?}");
        assert_eq!(&bytes[0..4], b"RIFF");
        let byte_rate = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
        let data_size = u32::from_le_bytes(bytes[40..44].try_into().unwrap()) as usize;
        assert_eq!(
            data_size,
            bytes.len() - WAV_HEADER,
            "the header's size is the data's"
        );
        let samples: Vec<f64> = bytes[WAV_HEADER..]
            .chunks_exact(2)
            .map(|s| f64::from(i16::from_le_bytes([s[0], s[1]])) / 32768.0)
            .collect();
        let rms = (samples.iter().map(|s| s * s).sum::<f64>() / samples.len().max(1) as f64).sqrt();
        (data_size as f64 / f64::from(byte_rate), rms)
    }

    #[test]
    fn the_synthesizer_gets_no_commands_from_the_text() {
        assert_eq!(speakable("a [[volm 0]] b"), "a [ [volm 0] ] b");
        assert_eq!(speakable("[[[x]]]"), "[ [ [x] ] ]");
        assert_eq!(speakable("tab\tbell\u{7}end\nnext"), "tab bell end\nnext");
        assert_eq!(speakable("Plain words."), "Plain words.");
    }

    #[test]
    fn an_answer_without_words_is_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let (speaker, path, events) = capturing(dir.path());
        let err = speaker.speak("m1".into(), " \n\t").unwrap_err();
        assert!(err.to_string().contains("no text to read aloud"), "{err}");
        assert!(events.try_recv().is_err(), "nothing started");
        assert!(!path.exists(), "no audio");
        assert_eq!(speaker.stop(), None, "nothing to stop");
    }

    #[test]
    #[cfg_attr(
        not(target_os = "linux"),
        ignore = "captures with espeak-ng (Linux); the Mac's `say` is confirmed by docs/MACOS.md's checklist"
    )]
    fn an_answer_is_spoken_to_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let (speaker, path, events) = capturing(dir.path());
        speaker
            .speak("m1".into(), "The capital of France is Paris.")
            .unwrap();
        assert_eq!(next(&events), SpeechEvent::Speaking { id: "m1".into() });
        assert_eq!(next(&events), SpeechEvent::Done { id: "m1".into() });
        assert_eq!(speaker.speaking(), None);
        let (seconds, rms) = measure(&path);
        // Six words at espeak-ng's 175 words a minute: about two seconds.
        assert!((1.0..6.0).contains(&seconds), "{seconds} s of speech");
        assert!(rms > 0.01, "the audio is not silence (RMS {rms})");
    }

    #[test]
    #[cfg_attr(
        not(target_os = "linux"),
        ignore = "captures with espeak-ng (Linux); the Mac's `say` is confirmed by docs/MACOS.md's checklist"
    )]
    fn stop_ends_the_voice_partway() {
        let dir = tempfile::tempdir().unwrap();
        let (speaker, path, events) = capturing(dir.path());
        let long = "This sentence is read aloud and then some more words follow it. ".repeat(20);
        speaker.speak("m1".into(), &long).unwrap();
        assert_eq!(next(&events), SpeechEvent::Speaking { id: "m1".into() });
        assert_eq!(speaker.speaking().as_deref(), Some("m1"));
        // Some of the voice plays before Stop.
        let start = Instant::now();
        while std::fs::metadata(&path).map_or(0, |m| m.len()) < (WAV_HEADER + 22_050) as u64 {
            assert!(start.elapsed() < Duration::from_secs(60), "no audio came");
            thread::sleep(Duration::from_millis(20));
        }
        let at_stop = std::fs::metadata(&path).unwrap().len() as f64;
        assert_eq!(speaker.stop().as_deref(), Some("m1"));
        assert_eq!(next(&events), SpeechEvent::Stopped { id: "m1".into() });
        assert_eq!(speaker.speaking(), None);
        let (seconds, rms) = measure(&path);
        // The whole text is about 60 s of speech; the voice ends at Stop: at most a block or
        // two more than had played (22,050 Hz, 16-bit mono: 44,100 bytes a second).
        let at_stop = (at_stop - WAV_HEADER as f64) / 44_100.0;
        assert!(
            seconds >= at_stop,
            "{seconds} s captured, {at_stop} s at Stop"
        );
        assert!(
            seconds < at_stop + 0.5,
            "{seconds} s captured, {at_stop} s at Stop: the voice went on"
        );
        assert!(rms > 0.01, "the captured part is speech (RMS {rms})");
        // The text is spoken whole when nobody stops it: the stop was what cut it short.
        assert!(events.try_recv().is_err(), "no event after Stopped");
    }

    #[test]
    #[cfg_attr(
        not(target_os = "linux"),
        ignore = "captures with espeak-ng (Linux); the Mac's `say` is confirmed by docs/MACOS.md's checklist"
    )]
    fn a_second_answer_stops_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let (speaker, _path, events) = capturing(dir.path());
        let long = "Words that take a while to say. ".repeat(40);
        speaker.speak("m1".into(), &long).unwrap();
        assert_eq!(next(&events), SpeechEvent::Speaking { id: "m1".into() });
        speaker.speak("m2".into(), "Short.").unwrap();
        // The first one's end and the second's start come in either order; both come.
        let mut seen = vec![next(&events), next(&events), next(&events)];
        seen.sort_by_key(|e| format!("{e:?}"));
        assert!(
            seen.contains(&SpeechEvent::Stopped { id: "m1".into() }),
            "{seen:?}"
        );
        assert!(
            seen.contains(&SpeechEvent::Speaking { id: "m2".into() }),
            "{seen:?}"
        );
        assert!(
            seen.contains(&SpeechEvent::Done { id: "m2".into() }),
            "{seen:?}"
        );
    }

    #[test]
    fn a_synthesizer_that_cannot_play_is_reported_in_words() {
        // espeak-ng on a machine without a sound card: exit 0, ALSA's complaint on stderr.
        let errors = "ALSA lib pcm.c:2666:(snd_pcm_open_noupdate) Unknown PCM default\nerror: No such file or directory\n";
        let status = Command::new("true").status();
        let err = outcome(status, None, errors).unwrap_err();
        assert!(err.starts_with("No sound could be played"), "{err}");
        assert!(err.contains("No such file or directory"), "{err}");
        assert_eq!(outcome(Command::new("true").status(), None, ""), Ok(()));
        let failed = outcome(Command::new("false").status(), None, "").unwrap_err();
        assert!(
            failed.starts_with("The speech synthesizer failed"),
            "{failed}"
        );
    }
}
