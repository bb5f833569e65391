//! The audio tower: strict loading of `audio_tower.*` / `embed_audio.*`, the shapes and masks of
//! its output, the placeholder mapping of `encode`, and clear errors for bad input. (Numerical
//! parity with mlx-vlm: tests/parity/audio_tower_parity.py.)

mod common;

use std::path::Path;

use gemma::config::Config;
use gemma::{LoadOptions, Mel, Model};
use mlx_rs::Array;
use safetensors::Dtype;

use common::Tensors;

fn load(dir: &Path) -> Model {
    Model::load(dir, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn load_error(dir: &Path) -> String {
    match Model::load(dir, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded, but it is broken", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Rewrites the shard holding `tensor` (per the index) through `edit`; the index keeps naming
/// that shard for every tensor the edit leaves or adds.
fn rewrite_shard_of(dir: &Path, tensor: &str, edit: impl FnOnce(&mut Tensors)) {
    let index_path = dir.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let file = index["weight_map"][tensor].as_str().unwrap().to_string();
    let path = dir.join(&file);
    let mut tensors = common::read_tensors(&path);
    let before: Vec<String> = tensors.keys().cloned().collect();
    edit(&mut tensors);
    let map = index["weight_map"].as_object_mut().unwrap();
    for name in before {
        if !tensors.contains_key(&name) {
            map.remove(&name);
        }
    }
    for name in tensors.keys() {
        map.insert(name.clone(), file.clone().into());
    }
    std::fs::write(&index_path, index.to_string()).unwrap();
    common::write_tensors(&path, &tensors);
}

/// Random-looking log-mel features of `frames` frames, the last `frames - valid` zero and
/// masked (as the feature extractor leaves padding).
fn features(frames: usize, valid: usize) -> (Vec<f32>, Vec<bool>) {
    let data = (0..frames * 128)
        .map(|i| {
            if i / 128 >= valid {
                0.0
            } else {
                -3.0 + 2.0 * ((i as f32 * 0.7311).sin() + (i as f32 * 0.1234).cos())
            }
        })
        .collect();
    let mask = (0..frames).map(|i| i < valid).collect();
    (data, mask)
}

fn host(a: &Array) -> Vec<f32> {
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

/// Elementwise transpose of a bf16 tensor's bytes from `shape` by `axes`.
fn transpose_bf16(bytes: &[u8], shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<u8>) {
    let new_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let strides: Vec<usize> = (0..shape.len())
        .map(|i| shape[i + 1..].iter().product())
        .collect();
    let count: usize = shape.iter().product();
    let mut out = vec![0u8; bytes.len()];
    for flat in 0..count {
        let mut rest = flat;
        let mut source = 0;
        for (d, &axis) in axes.iter().enumerate() {
            let below: usize = new_shape[d + 1..].iter().product();
            source += (rest / below) * strides[axis];
            rest %= below;
        }
        out[2 * flat..2 * flat + 2].copy_from_slice(&bytes[2 * source..2 * source + 2]);
    }
    (new_shape, out)
}

#[test]
fn the_tiny_tower_loads_and_a_null_audio_config_means_no_tower() {
    let model = load(&common::fixture("tiny"));
    assert!(model.has_audio());
    let tower = model
        .load_audio()
        .unwrap()
        .expect("tiny has an audio tower");
    assert_eq!(tower.config().num_hidden_layers, 2);
    let without = load(&common::fixture("tiny-plmp-bf16"));
    assert!(!without.has_audio());
    assert!(without.load_audio().unwrap().is_none());

    // The reference drops the audio tensors of a checkpoint whose config has no tower.
    let tmp = common::copy_of("tiny");
    let config = tmp.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    json["audio_config"] = serde_json::Value::Null;
    std::fs::write(&config, json.to_string()).unwrap();
    let without = load(tmp.path());
    assert!(!without.has_audio());
    assert!(without.load_audio().unwrap().is_none());
}

#[test]
fn a_missing_audio_tensor_is_named() {
    let tmp = common::copy_of("tiny");
    let name = "audio_tower.layers.1.self_attn.per_dim_scale";
    rewrite_shard_of(tmp.path(), name, |t| {
        t.remove(name);
    });
    let error = load_error(tmp.path());
    assert!(error.contains("missing tensors (1)"), "{error}");
    assert!(error.contains(name), "{error}");
}

#[test]
fn misshapen_quantized_and_unexpected_audio_tensors_are_reported_together() {
    let tmp = common::copy_of("tiny");
    let misshapen = "audio_tower.layers.0.lconv1d.linear_end.linear.weight";
    let quantized = "audio_tower.layers.1.feed_forward1.ffw_layer_1.linear";
    let extra = "audio_tower.layers.0.lconv1d.extra.weight";
    rewrite_shard_of(tmp.path(), misshapen, |t| {
        t.get_mut(misshapen).unwrap().1 = vec![64, 256];
        t.insert(extra.into(), (Dtype::BF16, vec![2], vec![0; 4]));
    });
    // A tower linear stored 4-bit (the converter never quantizes the tower).
    rewrite_shard_of(tmp.path(), &format!("{quantized}.weight"), |t| {
        let (out, inp) = (512, 128);
        t.insert(
            format!("{quantized}.weight"),
            (Dtype::U32, vec![out, inp / 8], vec![0; out * inp / 2]),
        );
        for part in ["scales", "biases"] {
            t.insert(
                format!("{quantized}.{part}"),
                (Dtype::BF16, vec![out, inp / 64], vec![0; out * inp / 32]),
            );
        }
    });
    let error = load_error(tmp.path());
    assert!(
        error.contains(&format!(
            "{misshapen}: shape [64, 256], expected [128, 128]"
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!(
            "{quantized}.weight: shape [512, 16], expected [512, 128]"
        )),
        "{error}"
    );
    for unexpected in [
        extra.to_string(),
        format!("{quantized}.scales"),
        format!("{quantized}.biases"),
    ] {
        assert!(error.contains(&unexpected), "{unexpected} in {error}");
    }
}

#[test]
fn channel_first_convolution_weights_are_transposed_as_the_reference_does() {
    let (data, valid) = features(40, 37);
    let mel = Mel {
        data: &data,
        frames: 40,
        valid: &valid,
    };
    let model = load(&common::fixture("tiny"));
    let (expected, _) = model.load_audio().unwrap().unwrap().tower(&mel).unwrap();

    let tmp = common::copy_of("tiny");
    let conv = "audio_tower.subsample_conv_projection.layer1.conv.weight";
    let depthwise = "audio_tower.layers.0.lconv1d.depthwise_conv1d.weight";
    for (name, axes) in [(conv, &[0, 3, 1, 2][..]), (depthwise, &[0, 2, 1][..])] {
        rewrite_shard_of(tmp.path(), name, |t| {
            let (dtype, shape, bytes) = t.remove(name).unwrap();
            let (shape, bytes) = transpose_bf16(&bytes, &shape, axes);
            t.insert(name.into(), (dtype, shape, bytes));
        });
    }
    let model = load(tmp.path());
    let (got, _) = model.load_audio().unwrap().unwrap().tower(&mel).unwrap();
    assert_eq!(host(&got), host(&expected));
}

#[test]
fn tower_rows_masks_and_the_placeholder_mapping() {
    let model = load(&common::fixture("tiny"));
    let tower = model.load_audio().unwrap().unwrap();
    let hidden = model.config().text.hidden_size;
    // 123 frames, 86 real: T2 = ceil(123 / 4) = 31 rows; frame 4k is real for k < 22.
    let (data, valid) = features(123, 86);
    let mel = Mel {
        data: &data,
        frames: 123,
        valid: &valid,
    };
    let (encoded, rows_valid) = tower.tower(&mel).unwrap();
    assert_eq!(encoded.shape(), &[31, 128]);
    assert_eq!(rows_valid, (0..31).map(|k| k < 22).collect::<Vec<_>>());
    let values = host(&encoded);
    for (k, row) in values.chunks(128).enumerate() {
        let energy: f32 = row.iter().map(|v| v * v).sum();
        assert_eq!(energy == 0.0, k >= 22, "row {k}: energy {energy}");
    }

    let exact = tower.encode(&mel, 31).unwrap();
    assert_eq!(exact.shape(), &[31, hidden as i32]);
    let exact = host(&exact);
    let wrapped = tower.encode(&mel, 32).unwrap();
    assert_eq!(wrapped.shape(), &[32, hidden as i32]);
    let wrapped = host(&wrapped);
    // Placeholder k gets row k mod 31: the extra one repeats row 0, rows of padding are zero.
    assert_eq!(wrapped[..31 * hidden], exact[..]);
    assert_eq!(wrapped[31 * hidden..], exact[..hidden]);
    for (k, row) in exact.chunks(hidden).enumerate() {
        assert_eq!(row.iter().all(|&v| v == 0.0), k >= 22, "row {k}");
    }
    // The same rows from the tower's own output.
    assert_eq!(host(&tower.embed(&encoded, 32).unwrap()), wrapped);
}

#[test]
fn bad_features_get_clear_errors() {
    let model = load(&common::fixture("tiny"));
    let tower = model.load_audio().unwrap().unwrap();
    let (data, valid) = features(16, 16);
    let error = |mel: Mel<'_>, soft_tokens: usize| match tower.encode(&mel, soft_tokens) {
        Ok(_) => panic!("encoded bad input"),
        Err(e) => e.to_string(),
    };
    let mel = |data, frames, valid| Mel {
        data,
        frames,
        valid,
    };
    assert!(error(mel(&[], 0, &[]), 1).contains("no mel frames"));
    assert!(error(mel(&data[..100], 16, &valid), 4).contains("need 2048"));
    assert!(error(mel(&data, 16, &valid[..15]), 4).contains("15 entries for 16 mel frames"));
    assert!(error(mel(&data, 16, &valid), 0).contains("fill 1 to 5"));
    assert!(error(mel(&data, 16, &valid), 6).contains("fill 1 to 5"));
    let mut nan = data.clone();
    nan[300] = f32::NAN;
    assert!(error(mel(&nan, 16, &valid), 4).contains("frame 2"));
    assert!(tower.tower(&mel(&data, 16, &valid)).is_ok());
}

#[test]
fn broken_audio_configs_are_explained() {
    let text = std::fs::read_to_string(common::fixture("tiny").join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let with = |field: &str, value: serde_json::Value| {
        let mut json = json.clone();
        json["audio_config"][field] = value;
        Config::parse(&json.to_string()).unwrap_err()
    };
    assert!(with("hidden_size", 0.into()).contains("audio_config.hidden_size is 0"));
    assert!(with("num_attention_heads", 3.into()).contains("multiple of num_attention_heads"));
    assert!(
        with("subsampling_conv_channels", serde_json::json!([32, 16, 8]))
            .contains("expected two positive channel counts")
    );
    assert!(with("attention_logit_cap", 0.into()).contains("attention_logit_cap is 0"));
    assert!(with("hidden_act", "gelu".into()).contains("not supported"));
    assert!(with("num_hidden_layers", "two".into()).contains("audio_config"));
}
