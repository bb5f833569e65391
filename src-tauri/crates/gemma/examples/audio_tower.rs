//! Runs the audio tower of a checkpoint on log-mel features read from a file (for
//! tests/parity/audio_tower_parity.py).
//!
//!     audio_tower MODEL_DIR INPUT.safetensors OUTPUT.safetensors [float32]
//!
//! With `float32` the model is loaded with `LoadOptions::dtype` float32 (every weight cast, as
//! the reference's float32 parity runs cast theirs); otherwise the weights stay as stored.
//!
//! INPUT holds, per clip N = 0, 1, …: `N.features` float32 `[frames, 128]`, `N.valid` uint8
//! `[frames]` (1 = real frame) and `N.soft_tokens` int32 `[1]`. OUTPUT gets `N.tower` float32
//! `[T2, output_proj_dims]`, `N.tower_valid` uint8 `[T2]` and `N.embed` float32
//! `[soft_tokens, text_hidden]` (what `AudioTower::encode` returns, computed from the same
//! tower output by `AudioTower::embed`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use gemma::{LoadOptions, Mel, Model};
use mlx_rs::Array;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model_dir, input, output, dtype) = match args.as_slice() {
        [m, i, o] => (m, i, o, None),
        [m, i, o, d] if d == "float32" => (m, i, o, Some(mlx_rs::Dtype::Float32)),
        _ => bail!("usage: audio_tower MODEL_DIR INPUT.safetensors OUTPUT.safetensors [float32]"),
    };
    let started = Instant::now();
    let options = LoadOptions {
        dtype,
        ..LoadOptions::default()
    };
    let model = Model::load(&PathBuf::from(model_dir), &options)?;
    eprintln!("loaded in {:.2} s", started.elapsed().as_secs_f64());
    let tower = model
        .load_audio()?
        .ok_or_else(|| anyhow!("{model_dir} has no audio tower"))?;
    let bytes = std::fs::read(input).with_context(|| format!("reading {input}"))?;
    let tensors = SafeTensors::deserialize(&bytes)?;
    let mut out: BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for clip in 0.. {
        let Ok(features) = tensors.tensor(&format!("{clip}.features")) else {
            break;
        };
        let valid = tensors.tensor(&format!("{clip}.valid"))?;
        let soft_tokens = tensors.tensor(&format!("{clip}.soft_tokens"))?;
        if features.dtype() != Dtype::F32 || valid.dtype() != Dtype::U8 {
            bail!("clip {clip}: features must be F32 and valid U8");
        }
        let data: Vec<f32> = features
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let valid: Vec<bool> = valid.data().iter().map(|&v| v != 0).collect();
        let soft_tokens = i32::from_le_bytes(
            soft_tokens.data()[..4]
                .try_into()
                .context("soft_tokens is not an int32")?,
        ) as usize;
        let mel = Mel {
            data: &data,
            frames: features.shape()[0],
            valid: &valid,
        };
        let started = Instant::now();
        let (encoded, tower_valid) = tower.tower(&mel)?;
        encoded.eval()?;
        let tower_s = started.elapsed().as_secs_f64();
        let embedded = tower.embed(&encoded, soft_tokens)?;
        embedded.eval()?;
        eprintln!(
            "clip {clip}: {} frames, tower {tower_s:.2} s, embed_audio {:.2} s",
            mel.frames,
            started.elapsed().as_secs_f64() - tower_s
        );
        out.insert(format!("{clip}.tower"), f32_tensor(&encoded)?);
        out.insert(format!("{clip}.embed"), f32_tensor(&embedded)?);
        let mask: Vec<u8> = tower_valid.iter().map(|&v| v as u8).collect();
        out.insert(
            format!("{clip}.tower_valid"),
            (Dtype::U8, vec![mask.len()], mask),
        );
    }
    let views = out
        .iter()
        .map(|(name, (dtype, shape, data))| {
            Ok((name.clone(), TensorView::new(*dtype, shape.clone(), data)?))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, &PathBuf::from(output))?;
    Ok(())
}

/// A float32 array as (dtype, shape, little-endian bytes).
fn f32_tensor(array: &Array) -> Result<(Dtype, Vec<usize>, Vec<u8>)> {
    array.eval()?;
    let shape = array.shape().iter().map(|&d| d as usize).collect();
    let bytes = array
        .as_slice::<f32>()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    Ok((Dtype::F32, shape, bytes))
}
