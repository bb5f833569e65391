//! Prepares one audio file like the app does and writes its clips' features for a parity check.
//!
//!     audio_features AUDIO OUT.safetensors [--max-clips N]
//!
//! The file holds, per clip `i`, `clip{i}.features` ([frames, 128] float32) and `clip{i}.valid`
//! ([frames] uint8), and metadata `clips`, `soft_tokens` (comma-separated), `seconds`,
//! `kept_seconds`, `limit_reached` and `hashes` (hex, comma-separated).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use engine::audio::{prepare_path, AudioLimits, MEL_BINS};
use safetensors::tensor::{Dtype, TensorView};

#[derive(Parser)]
struct Args {
    audio: PathBuf,
    out: PathBuf,
    #[arg(long)]
    max_clips: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut limits = AudioLimits::default();
    if let Some(n) = args.max_clips {
        limits.max_clips = n;
    }
    let prepared = prepare_path(&args.audio, &limits)?;
    let buffers: Vec<(Vec<u8>, Vec<u8>)> = prepared
        .clips
        .iter()
        .map(|clip| {
            let features = clip.features.iter().flat_map(|v| v.to_le_bytes()).collect();
            let valid = clip.valid.iter().map(|&v| u8::from(v)).collect();
            (features, valid)
        })
        .collect();
    let mut tensors = Vec::new();
    for (i, (clip, (features, valid))) in prepared.clips.iter().zip(&buffers).enumerate() {
        let shape = vec![clip.frames, MEL_BINS];
        tensors.push((
            format!("clip{i}.features"),
            TensorView::new(Dtype::F32, shape, features)?,
        ));
        tensors.push((
            format!("clip{i}.valid"),
            TensorView::new(Dtype::U8, vec![clip.frames], valid)?,
        ));
    }
    let join = |items: Vec<String>| items.join(",");
    let metadata = HashMap::from([
        ("clips".to_owned(), prepared.clips.len().to_string()),
        (
            "soft_tokens".to_owned(),
            join(
                prepared
                    .clips
                    .iter()
                    .map(|c| c.soft_tokens.to_string())
                    .collect(),
            ),
        ),
        (
            "hashes".to_owned(),
            join(
                prepared
                    .clips
                    .iter()
                    .map(|c| c.hash.iter().map(|b| format!("{b:02x}")).collect())
                    .collect(),
            ),
        ),
        ("seconds".to_owned(), prepared.seconds.to_string()),
        ("kept_seconds".to_owned(), prepared.kept_seconds.to_string()),
        (
            "limit_reached".to_owned(),
            prepared.limit_reached.to_string(),
        ),
    ]);
    safetensors::tensor::serialize_to_file(tensors, Some(metadata), &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}
