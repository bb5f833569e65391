//! Gemma 4 E4B on MLX: the model, knowing nothing of prompts, chats or windows.

pub mod attention;
pub mod audio;
mod batch;
pub mod cache;
pub mod config;
mod decoder;
pub mod drafter;
pub mod error;
mod fused;
mod kv;
pub mod layers;
pub mod lora;
pub mod memory;
pub mod model;
pub mod ple;
pub mod quant;
pub mod taps;
pub mod text;
pub mod tuning;
pub mod vision;
pub mod weights;

pub use audio::{AudioTower, Mel};
pub use batch::BatchKvCache;
pub use cache::KvCache;
pub use config::Config;
pub use drafter::{DonorKv, Donors, Drafter};
pub use error::{Error, Result};
pub use lora::{Adapter, AdapterInfo};
pub use model::{LoadOptions, Model};
pub use taps::{TapPoint, Taps};
pub use text::MediaFeatures;
pub use tuning::Tuning;
pub use vision::{Pixels, VisionTower};
