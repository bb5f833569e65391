//! A conversation ready for generation: its ids and the media its placeholder runs stand for.

use std::sync::Arc;

use crate::audio::AudioClip;
use crate::image::Preprocessed;

/// A conversation ready for generation: its ids, each image and audio placeholder already
/// expanded to its soft-token run, and the images and clips those runs stand for, in order.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub images: Vec<Arc<Preprocessed>>,
    pub audio: Vec<Arc<AudioClip>>,
}

impl Prompt {
    /// A prompt given as ids, with no images (benchmarks and checks that plan their own ids).
    pub fn from_ids(ids: Vec<u32>) -> Self {
        Self {
            ids,
            ..Self::default()
        }
    }
}
