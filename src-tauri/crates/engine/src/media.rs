//! Media in a chat: the vision and audio towers, read into memory when first needed and let
//! go after an idle period ([`Towers`]), projected features cached per content, and the
//! expansion of each item's placeholder into its soft-token run.

use std::time::{Duration, Instant};

use gemma::{AudioTower, Mel, Model, Pixels, VisionTower};
use mlx_rs::Array;

use crate::audio::AudioClip;
use crate::error::{GenerateError, Result};
use crate::image::Preprocessed;
use crate::template::MediaKind;

/// The towers a loaded model holds in MLX memory now. A tower is read from the checkpoint by
/// the first question that needs it ([`Model::load_vision`], [`Model::load_audio`]), so that
/// the time it takes is part of that question's time to the first token, and is dropped by
/// [`Towers::release_idle`] once it has not run for the idle period (docs/ENGINE.md "Idle
/// release").
#[derive(Default)]
pub struct Towers {
    vision: Option<Resident<VisionTower>>,
    audio: Option<Resident<AudioTower>>,
    loads: [usize; 2],
    last_load: Option<Duration>,
}

/// A tower in memory: its bytes and when it last ran.
struct Resident<T> {
    tower: T,
    bytes: usize,
    used: Instant,
}

impl<T> Resident<T> {
    fn new(tower: T, arrays: impl Fn(&T) -> Vec<&Array>) -> Self {
        let bytes = arrays(&tower).iter().map(|a| a.nbytes()).sum();
        Self {
            tower,
            bytes,
            used: Instant::now(),
        }
    }

    fn idle_since(&self, idle: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.used) >= idle
    }
}

impl Towers {
    /// The vision tower, read from the checkpoint first if it is not in memory.
    pub fn vision(&mut self, model: &Model) -> Result<&VisionTower> {
        if self.vision.is_none() {
            let started = Instant::now();
            let tower = model
                .load_vision()?
                .ok_or_else(|| GenerateError::Image("this model has no vision tower".into()))?;
            self.loaded(0, started);
            self.vision = Some(Resident::new(tower, VisionTower::arrays));
        }
        let resident = self.vision.as_mut().expect("set above");
        resident.used = Instant::now();
        Ok(&resident.tower)
    }

    /// The audio tower, read from the checkpoint first if it is not in memory.
    pub fn audio(&mut self, model: &Model) -> Result<&AudioTower> {
        if self.audio.is_none() {
            let started = Instant::now();
            let tower = model.load_audio()?.ok_or_else(|| {
                GenerateError::Audio("this model has no audio tower: it cannot listen".into())
            })?;
            self.loaded(1, started);
            self.audio = Some(Resident::new(tower, AudioTower::arrays));
        }
        let resident = self.audio.as_mut().expect("set above");
        resident.used = Instant::now();
        Ok(&resident.tower)
    }

    fn loaded(&mut self, which: usize, started: Instant) {
        self.loads[which] += 1;
        self.last_load = Some(started.elapsed());
    }

    /// Drops each tower that has not run for `idle`; true if one was dropped.
    pub fn release_idle(&mut self, idle: Duration, now: Instant) -> bool {
        let vision = self
            .vision
            .as_ref()
            .is_some_and(|r| r.idle_since(idle, now));
        let audio = self.audio.as_ref().is_some_and(|r| r.idle_since(idle, now));
        if vision {
            self.vision = None;
        }
        if audio {
            self.audio = None;
        }
        vision || audio
    }

    /// When the first tower in memory becomes idle for `idle`, if one is in memory.
    pub fn idle_at(&self, idle: Duration) -> Option<Instant> {
        let vision = self.vision.as_ref().map(|r| r.used + idle);
        let audio = self.audio.as_ref().map(|r| r.used + idle);
        vision.into_iter().chain(audio).min()
    }

    /// Bytes of the towers in MLX memory now: (vision, audio).
    pub fn resident_bytes(&self) -> (usize, usize) {
        (
            self.vision.as_ref().map_or(0, |r| r.bytes),
            self.audio.as_ref().map_or(0, |r| r.bytes),
        )
    }

    /// How many times each tower has been read from the checkpoint: (vision, audio).
    pub fn loads(&self) -> (usize, usize) {
        (self.loads[0], self.loads[1])
    }

    /// How long the latest tower read took.
    pub fn last_load(&self) -> Option<Duration> {
        self.last_load
    }
}

/// Projected features of recently seen images and audio clips, keyed by content hash, so that
/// asking again about the same picture or recording does not run its tower again.
pub struct FeatureCache {
    entries: Vec<(MediaKind, [u8; 32], Array)>,
    capacity: usize,
    vision_runs: usize,
    audio_runs: usize,
}

impl FeatureCache {
    /// A cache holding at most `capacity` items' features.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity: capacity.max(1),
            vision_runs: 0,
            audio_runs: 0,
        }
    }

    /// How many times the vision tower actually ran.
    pub fn tower_runs(&self) -> usize {
        self.vision_runs
    }

    /// How many times the audio tower actually ran.
    pub fn audio_tower_runs(&self) -> usize {
        self.audio_runs
    }

    /// Features `[soft_tokens, hidden]` of `image`, from the cache or computed (and evaluated).
    /// The vision tower is read into `towers` when the image's features are not cached.
    pub fn features(
        &mut self,
        towers: &mut Towers,
        model: &Model,
        image: &Preprocessed,
    ) -> Result<Array> {
        self.cached(MediaKind::Image, image.hash, || {
            let tower = towers.vision(model)?;
            let pixels = Pixels {
                data: &image.pixels,
                height: image.height,
                width: image.width,
            };
            Ok(tower.encode(&pixels)?)
        })
    }

    /// Features `[soft_tokens, hidden]` of one audio clip, from the cache or computed (and
    /// evaluated).
    /// The audio tower is read into `towers` when the clip's features are not cached.
    pub fn audio_features(
        &mut self,
        towers: &mut Towers,
        model: &Model,
        clip: &AudioClip,
    ) -> Result<Array> {
        self.cached(MediaKind::Audio, clip.hash, || {
            let tower = towers.audio(model)?;
            let mel = Mel {
                data: &clip.features,
                frames: clip.frames,
                valid: &clip.valid,
            };
            Ok(tower.encode(&mel, clip.soft_tokens)?)
        })
    }

    fn cached(
        &mut self,
        kind: MediaKind,
        hash: [u8; 32],
        compute: impl FnOnce() -> Result<Array>,
    ) -> Result<Array> {
        if let Some(i) = self
            .entries
            .iter()
            .position(|(k, h, _)| *k == kind && *h == hash)
        {
            let entry = self.entries.remove(i);
            let features = entry.2.clone();
            self.entries.push(entry);
            return Ok(features);
        }
        let features = compute()?;
        features.eval()?;
        match kind {
            MediaKind::Image => self.vision_runs += 1,
            MediaKind::Audio => self.audio_runs += 1,
        }
        if self.entries.len() == self.capacity {
            self.entries.remove(0);
        }
        self.entries.push((kind, hash, features.clone()));
        Ok(features)
    }
}
