//! Media in a chat: projected features (vision or audio tower) cached per content, and the
//! expansion of each item's placeholder into its soft-token run.

use gemma::{Mel, Model, Pixels};
use mlx_rs::Array;

use crate::audio::AudioClip;
use crate::error::{GenerateError, Result};
use crate::image::Preprocessed;
use crate::template::MediaKind;

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
    pub fn features(&mut self, model: &Model, image: &Preprocessed) -> Result<Array> {
        self.cached(MediaKind::Image, image.hash, || {
            let tower = model
                .vision()
                .ok_or_else(|| GenerateError::Image("this model has no vision tower".into()))?;
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
    pub fn audio_features(&mut self, model: &Model, clip: &AudioClip) -> Result<Array> {
        self.cached(MediaKind::Audio, clip.hash, || {
            let tower = model.audio().ok_or_else(|| {
                GenerateError::Audio("this model has no audio tower: it cannot listen".into())
            })?;
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
