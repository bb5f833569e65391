//! Loading real-layout checkpoints: the tiny fixtures load, and every kind of damage to a model
//! folder gets one clear error naming what is wrong (never a panic).

mod common;

use std::path::Path;

use gemma::{LoadOptions, Model};

fn load_error(dir: &Path) -> String {
    match Model::load(dir, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded, but it is broken", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Rewrites one safetensors file of `dir` through `edit` (name → (dtype, shape, bytes)).
fn rewrite(dir: &Path, file: &str, edit: impl FnOnce(&mut common::Tensors)) {
    let path = dir.join(file);
    let mut tensors = common::read_tensors(&path);
    edit(&mut tensors);
    common::write_tensors(&path, &tensors);
}

fn first_shard(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("model") && n.ends_with(".safetensors"))
        .collect();
    names.sort();
    names.remove(0)
}

#[test]
fn every_fixture_variant_loads_with_its_layer_table() {
    for name in ["tiny", "tiny-optiq", "tiny-plmp-bf16"] {
        let model = Model::load(&common::fixture(name), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let layers = model.layers();
        let owners = layers.iter().filter(|l| l.owns_kv()).count();
        assert_eq!(
            owners,
            layers.len() - model.config().text.num_kv_shared_layers,
            "{name}"
        );
        assert!(model.has_vision(), "{name} has a vision tower");
    }
}

#[test]
fn missing_and_unexpected_tensors_are_listed_together() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let file = first_shard(tmp.path());
    let mut removed = String::new();
    rewrite(tmp.path(), &file, |t| {
        removed = t
            .keys()
            .find(|k| k.ends_with("layers.3.mlp.up_proj.scales"))
            .unwrap()
            .clone();
        t.remove(&removed);
        t.insert(
            "language_model.model.layers.3.mlp.surprise.weight".into(),
            (safetensors::Dtype::BF16, vec![2], vec![0; 4]),
        );
    });
    let error = load_error(tmp.path());
    assert!(error.contains("unexpected tensors"), "{error}");
    assert!(error.contains("layers.3.mlp.surprise.weight"), "{error}");
    // Without scales the module reads as dense: its packed weight then has the wrong dtype/shape.
    assert!(error.contains("layers.3.mlp.up_proj"), "{error}");
}

#[test]
fn a_missing_tensor_is_named() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let file = first_shard(tmp.path());
    rewrite(tmp.path(), &file, |t| {
        t.remove("language_model.model.layers.2.post_attention_layernorm.weight");
    });
    let error = load_error(tmp.path());
    assert!(error.contains("missing tensors (1)"), "{error}");
    assert!(
        error.contains("language_model.model.layers.2.post_attention_layernorm.weight"),
        "{error}"
    );
}

#[test]
fn a_misshapen_tensor_names_its_shapes() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let file = first_shard(tmp.path());
    rewrite(tmp.path(), &file, |t| {
        let norm = t.get_mut("language_model.model.norm.weight").unwrap();
        norm.1 = vec![norm.1[0] / 2];
        norm.2.truncate(norm.2.len() / 2);
    });
    let error = load_error(tmp.path());
    assert!(
        error.contains("language_model.model.norm.weight: shape"),
        "{error}"
    );
}

#[test]
fn truncated_and_lying_files_are_rejected_before_reading_tensors() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let path = tmp.path().join(first_shard(tmp.path()));
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let error = load_error(tmp.path());
    assert!(error.contains("truncated"), "{error}");

    // A header claiming a gigantic length.
    let mut lying = bytes.clone();
    lying[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    std::fs::write(&path, &lying).unwrap();
    assert!(load_error(tmp.path()).contains("does not fit"));

    std::fs::write(&path, b"").unwrap();
    assert!(load_error(tmp.path()).contains("too short"));
}

#[test]
fn broken_configs_are_explained() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let config = tmp.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();

    std::fs::write(&config, &text[..text.len() / 2]).unwrap();
    assert!(load_error(tmp.path()).contains("config.json is not a valid Gemma 4 file"));

    std::fs::write(
        &config,
        text.replace("\"model_type\": \"gemma4\"", "\"model_type\": \"llama\""),
    )
    .unwrap();
    assert!(load_error(tmp.path()).contains("\"llama\""));

    std::fs::remove_file(&config).unwrap();
    assert!(load_error(tmp.path()).contains("config.json"));
}

#[test]
fn kv_tensors_of_shared_layers_are_ignored() {
    // The OptiQ fixture carries K/V projections for some KV-shared layers, as some uploads do.
    let dir = common::fixture("tiny-optiq");
    let mut has_shared_kv = false;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "safetensors") {
            let bytes = std::fs::read(entry.path()).unwrap();
            let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
            has_shared_kv |= meta
                .tensors()
                .keys()
                .any(|k| k.contains("layers.11.self_attn.k_proj"));
        }
    }
    assert!(
        has_shared_kv,
        "the fixture should carry shared-layer K/V tensors"
    );
    Model::load(&dir, &LoadOptions::default()).unwrap();
}

#[test]
fn kv_quantization_follows_kv_config_and_stays_close_to_the_plain_cache() {
    let dir = common::fixture("tiny-optiq");
    let options = LoadOptions {
        dtype: Some(mlx_rs::Dtype::Float32),
        kv_quantization: true,
        ..LoadOptions::default()
    };
    let quantized = Model::load(&dir, &options).unwrap();
    let bits: Vec<Option<i32>> = quantized
        .layers()
        .iter()
        .filter(|l| l.owns_kv())
        .map(|l| l.kv_quant.map(|q| q.bits))
        .collect();
    assert_eq!(bits, [Some(8), Some(4), Some(4), Some(8), Some(4), Some(8)]);
    let plain = Model::load(
        &dir,
        &LoadOptions {
            kv_quantization: false,
            ..options.clone()
        },
    )
    .unwrap();
    assert!(plain.layers().iter().all(|l| l.kv_quant.is_none()));

    let ids: Vec<u32> = (0..70).map(|i| (i * 37 % 900 + 20) as u32).collect();
    let run = |model: &Model| {
        let mut caches = model.new_caches();
        let mut rows = vec![model.forward(&ids[..40], &[], &mut caches, None).unwrap()];
        for &t in &ids[40..] {
            rows.push(model.forward(&[t], &[], &mut caches, None).unwrap());
        }
        mlx_rs::ops::concatenate(&rows, 0)
            .unwrap()
            .as_slice::<f32>()
            .to_vec()
    };
    let (a, b) = (run(&plain), run(&quantized));
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let cosine = dot / (norm(&a) * norm(&b));
    assert!(a != b, "quantizing the cache changes the numbers");
    assert!(
        cosine > 0.99,
        "but not the model's behaviour (cosine {cosine})"
    );

    // A kv_config naming a layer without its own cache is refused.
    let tmp = common::copy_of("tiny-optiq");
    std::fs::write(
        tmp.path().join("kv_config.json"),
        r#"[{"layer_idx": 11, "bits": 4, "group_size": 64}]"#,
    )
    .unwrap();
    let error = Model::load(tmp.path(), &options).err().unwrap().to_string();
    assert!(
        error.contains("layer 11 has no cache of its own"),
        "{error}"
    );
}

#[test]
fn problems_of_the_decoder_and_the_vision_tower_are_reported_in_one_error() {
    let tmp = common::copy_of("tiny-plmp-bf16");
    let file = first_shard(tmp.path());
    let text_norm = "language_model.model.layers.1.input_layernorm.weight";
    let vision_bound = "vision_tower.encoder.layers.0.mlp.up_proj.output_max";
    let vision_norm = "vision_tower.encoder.layers.0.self_attn.q_norm.weight";
    rewrite(tmp.path(), &file, |t| {
        t.remove(text_norm);
        t.remove(vision_bound);
        let norm = t.get_mut(vision_norm).unwrap();
        norm.1 = vec![norm.1[0] / 2];
        norm.2.truncate(norm.2.len() / 2);
    });
    let error = load_error(tmp.path());
    assert!(error.contains("missing tensors (2)"), "{error}");
    assert!(error.contains("wrong tensors (1)"), "{error}");
    assert!(error.contains(&format!("{vision_norm}: shape")), "{error}");
    // Listed in loading order: the decoder's before the tower's.
    let (text_at, vision_at) = (error.find(text_norm), error.find(vision_bound));
    assert!(
        text_at.is_some() && vision_at.is_some() && text_at < vision_at,
        "{error}"
    );
}

#[test]
fn kv_bytes_is_what_the_caches_hold_plain_and_quantized() {
    for (name, kv_quantization) in [("tiny", false), ("tiny-optiq", true)] {
        let options = LoadOptions {
            dtype: Some(mlx_rs::Dtype::Float32),
            kv_quantization,
            ..LoadOptions::default()
        };
        let model = Model::load(&common::fixture(name), &options).unwrap();
        let mut caches = model.new_caches();
        let held = |caches: &[gemma::KvCache]| -> usize {
            caches
                .iter()
                .flat_map(|c| c.arrays())
                .map(|a| a.nbytes())
                .sum()
        };
        // A prefill, then decode steps past the sliding window and its rewind slack (32 + 64
        // on the tiny fixture).
        let mut positions = 0;
        for chunk in std::iter::once(40usize).chain(std::iter::repeat_n(1, 80)) {
            let ids: Vec<u32> = (0..chunk as u32).map(|k| 10 + k % 200).collect();
            let out = model.forward(&ids, &[], &mut caches, Some(1)).unwrap();
            out.eval().unwrap();
            positions += chunk;
            // After a prompt a cache holds just its positions; from the first decoded token
            // on, room: a full cache's up to the next multiple of FULL_STEP, a sliding cache's
            // up to window + REWIND_SLACK + SLIDING_ROOM.
            if chunk == 1 {
                assert_eq!(
                    model.kv_bytes(positions),
                    held(&caches),
                    "{name} after {positions} positions"
                );
            } else {
                assert!(
                    held(&caches) < model.kv_bytes(positions),
                    "{name} after the prompt"
                );
            }
        }
    }
}
