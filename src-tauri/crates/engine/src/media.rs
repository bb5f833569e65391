//! Images in a chat: projected vision features cached per image content, and the expansion of
//! each image's placeholder into its soft-token run.

use gemma::{Model, Pixels};
use mlx_rs::Array;

use crate::generate::{GenerateError, Result};
use crate::image::Preprocessed;

/// Projected features of recently seen images, keyed by content hash, so that asking again
/// about the same picture does not run the vision tower again.
pub struct FeatureCache {
    entries: Vec<([u8; 32], Array)>,
    capacity: usize,
    tower_runs: usize,
}

impl FeatureCache {
    /// A cache holding at most `capacity` images' features.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity: capacity.max(1),
            tower_runs: 0,
        }
    }

    /// How many times the vision tower actually ran.
    pub fn tower_runs(&self) -> usize {
        self.tower_runs
    }

    /// Features `[soft_tokens, hidden]` of `image`, from the cache or computed (and evaluated).
    pub fn features(&mut self, model: &Model, image: &Preprocessed) -> Result<Array> {
        if let Some(i) = self.entries.iter().position(|(h, _)| *h == image.hash) {
            let entry = self.entries.remove(i);
            let features = entry.1.clone();
            self.entries.push(entry);
            return Ok(features);
        }
        let tower = model
            .vision()
            .ok_or_else(|| GenerateError::Image("this model has no vision tower".into()))?;
        let pixels = Pixels {
            data: &image.pixels,
            height: image.height,
            width: image.width,
        };
        let features = tower.encode(&pixels)?;
        features.eval()?;
        self.tower_runs += 1;
        if self.entries.len() == self.capacity {
            self.entries.remove(0);
        }
        self.entries.push((image.hash, features.clone()));
        Ok(features)
    }
}
