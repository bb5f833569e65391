//! Preprocesses one image like the app does and writes the pixels for a parity check.
//!
//!     preprocess IMAGE [--max-soft-tokens N] --out FILE.safetensors
//!
//! The file holds `pixels` ([3, H, W] float32) and metadata `soft_tokens` and `hash` (hex).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use engine::image::{preprocess_path, SoftTokenBudget};
use safetensors::tensor::{Dtype, TensorView};

#[derive(Parser)]
struct Args {
    image: PathBuf,
    #[arg(long, default_value_t = 280)]
    max_soft_tokens: usize,
    #[arg(long)]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let budget = SoftTokenBudget::try_from(args.max_soft_tokens)?;
    let image = preprocess_path(&args.image, budget)?;
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|v| v.to_le_bytes()).collect();
    let pixels = TensorView::new(Dtype::F32, vec![3, image.height, image.width], &bytes)?;
    let hash: String = image.hash.iter().map(|b| format!("{b:02x}")).collect();
    let metadata = HashMap::from([
        ("soft_tokens".to_owned(), image.soft_tokens.to_string()),
        ("hash".to_owned(), hash),
    ]);
    safetensors::tensor::serialize_to_file([("pixels", pixels)], Some(metadata), &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}
