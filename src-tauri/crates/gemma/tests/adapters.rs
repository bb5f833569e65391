//! LoRA/DoRA adapters (`lora.rs`): one changes the logits and taking it off restores the base's
//! bit for bit; the same adapter in mlx and PEFT layouts gives the same logits; switching needs
//! no reload; batched rows under an adapter are each what they are alone; bad adapters are
//! refused in words naming the tensor and leave the adapter that was on. Parity with the
//! reference is `tests/parity/lora_parity.py`.

mod common;

use std::path::Path;

use common::{write_tensors, Tensors};
#[path = "../../random_adapter.rs"]
mod random_adapter;
use gemma::{BatchKvCache, KvCache, LoadOptions, Model};
use mlx_rs::{Array, Dtype};
use random_adapter::{f32_tensor, write_adapter};
use serde_json::json;

fn load() -> Model {
    let options = LoadOptions {
        dtype: Some(Dtype::Float32),
        ..LoadOptions::default()
    };
    Model::load(&common::fixture("tiny"), &options).unwrap()
}

fn host(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).unwrap().contiguous().unwrap();
    a.as_slice::<f32>().to_vec()
}

const PROMPT: [u32; 12] = [2, 105, 236, 107, 818, 527, 529, 103, 8, 106, 107, 105];

fn logits(model: &Model) -> Vec<f32> {
    let mut caches = model.new_caches();
    host(&model.forward(&PROMPT, &[], &mut caches, None).unwrap())
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / b.iter().fold(0.0f32, |m, y| m.max(y.abs())).max(1e-30)
}

#[test]
fn an_adapter_changes_the_logits_and_off_restores_the_base_bit_for_bit() {
    let mut model = load();
    let work = tempfile::tempdir().unwrap();
    let base = logits(&model);
    for dora in [false, true] {
        let (mlx, peft) = (
            work.path().join(format!("mlx{dora}")),
            work.path().join(format!("peft{dora}")),
        );
        write_adapter(&model, &mlx, 4, 1, dora, false);
        write_adapter(&model, &peft, 4, 1, dora, true);
        let a = model.load_adapter(&mlx).unwrap();
        assert_eq!(a.info().targets.len(), 9);
        assert_eq!(a.info().layers.len(), model.layers().len());
        let p = model.load_adapter(&peft).unwrap();
        model.set_adapter(Some(a)).unwrap();
        let with_mlx = logits(&model);
        assert!(
            max_rel_diff(&with_mlx, &base) > 1e-2,
            "the adapter (dora {dora}) barely moves the logits"
        );
        model.set_adapter(Some(p)).unwrap();
        let with_peft = logits(&model);
        let d = max_rel_diff(&with_peft, &with_mlx);
        assert!(
            d < 1e-5,
            "PEFT and mlx layouts differ by {d:e} (dora {dora})"
        );
        assert!(model.set_adapter(None).unwrap().is_some());
        assert_eq!(logits(&model), base, "off is not the base");
    }
}

#[test]
fn the_legacy_mlx_layout_and_bfloat16_factors_read_as_the_same_adapter() {
    let mut model = load();
    let work = tempfile::tempdir().unwrap();
    let mlx = work.path().join("mlx");
    write_adapter(&model, &mlx, 4, 2, false, false);
    let a = model.load_adapter(&mlx).unwrap();
    model.set_adapter(Some(a)).unwrap();
    let reference = logits(&model);

    // mlx-vlm's legacy form: `A`/`B` and `alpha` (scale = alpha / rank).
    let legacy = work.path().join("legacy");
    std::fs::create_dir_all(&legacy).unwrap();
    let tensors: Tensors = common::read_tensors(&mlx.join("adapters.safetensors"))
        .into_iter()
        .map(|(name, t)| {
            let name = name.replace(".lora_a", ".A").replace(".lora_b", ".B");
            (name, t)
        })
        .collect();
    write_tensors(&legacy.join("adapters.safetensors"), &tensors);
    let config = json!({"rank": 4, "alpha": 8.0, "dropout": 0.1});
    std::fs::write(legacy.join("adapter_config.json"), config.to_string()).unwrap();
    let l = model.load_adapter(&legacy).unwrap();
    assert_eq!(l.info().format, gemma::lora::Format::MlxLegacy);
    assert_eq!(l.info().scale, 2.0);
    model.set_adapter(Some(l)).unwrap();
    let d = max_rel_diff(&logits(&model), &reference);
    assert!(d < 1e-6, "legacy layout differs by {d:e}");

    // The same factors stored as bfloat16 (their rounding only).
    let half = work.path().join("bf16");
    std::fs::create_dir_all(&half).unwrap();
    let tensors: Tensors = common::read_tensors(&mlx.join("adapters.safetensors"))
        .into_iter()
        .map(|(name, (_, shape, bytes))| {
            let bf16: Vec<u8> = bytes
                .chunks_exact(4)
                .flat_map(|c| {
                    half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()
                })
                .collect();
            (name, (safetensors::Dtype::BF16, shape, bf16))
        })
        .collect();
    write_tensors(&half.join("adapters.safetensors"), &tensors);
    std::fs::copy(
        mlx.join("adapter_config.json"),
        half.join("adapter_config.json"),
    )
    .unwrap();
    let h = model.load_adapter(&half).unwrap();
    model.set_adapter(Some(h)).unwrap();
    let d = max_rel_diff(&logits(&model), &reference);
    assert!(d > 0.0 && d < 2e-2, "bfloat16 factors differ by {d:e}");
}

#[test]
fn batched_rows_under_an_adapter_are_each_what_they_are_alone() {
    let mut model = load();
    let work = tempfile::tempdir().unwrap();
    write_adapter(&model, work.path(), 16, 3, true, false);
    let adapter = model.load_adapter(work.path()).unwrap();
    model.set_adapter(Some(adapter)).unwrap();
    let prompts: Vec<Vec<u32>> = (0..3u32)
        .map(|s| {
            (0..(6 + s * 9))
                .map(|i| 2 + (i * 37 + s * 101) % 1000)
                .collect()
        })
        .collect();
    let mut rows: Vec<Vec<KvCache>> = Vec::new();
    let mut alone: Vec<Vec<KvCache>> = Vec::new();
    let mut next = Vec::new();
    for p in &prompts {
        let mut c = model.new_caches();
        let l = host(&model.forward(p, &[], &mut c, Some(1)).unwrap());
        next.push(argmax(&l));
        rows.push(c.clone());
        alone.push(c);
    }
    let mut kv = BatchKvCache::new();
    for _ in 0..8 {
        let ids = Array::from_slice(&next, &[next.len() as i32]);
        let together = {
            let mut caches: Vec<&mut [KvCache]> =
                rows.iter_mut().map(|c| c.as_mut_slice()).collect();
            host(&model.forward_rows(&ids, &mut caches, &mut kv).unwrap())
        };
        let vocab = together.len() / next.len();
        for (i, id) in next.iter_mut().enumerate() {
            let one = Array::from_slice(&[*id], &[1]);
            let solo = host(&model.forward_array(&one, &mut alone[i], Some(1)).unwrap());
            let row = &together[i * vocab..(i + 1) * vocab];
            assert_eq!(row, solo.as_slice(), "row {i} differs from its solo step");
            *id = argmax(&solo);
        }
    }
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b })
        .0 as u32
}

/// Rewrites the adapter in `dir` (mlx layout) with `edit` applied to its tensors.
fn edit_tensors(dir: &Path, edit: impl Fn(&mut Tensors)) {
    let path = dir.join("adapters.safetensors");
    let mut tensors = common::read_tensors(&path);
    edit(&mut tensors);
    write_tensors(&path, &tensors);
}

#[test]
fn bad_adapters_are_refused_in_words_and_leave_the_one_that_was_on() {
    let mut model = load();
    let work = tempfile::tempdir().unwrap();
    let good = work.path().join("good");
    write_adapter(&model, &good, 4, 5, false, false);
    let on = model.load_adapter(&good).unwrap();
    model.set_adapter(Some(on)).unwrap();
    let with_good = logits(&model);
    let q0 = "language_model.model.layers.0.self_attn.q_proj";

    let case = |name: &str, setup: &dyn Fn(&Path)| -> String {
        let dir = work.path().join(name);
        write_adapter(&model, &dir, 4, 5, false, false);
        setup(&dir);
        match model.load_adapter(&dir) {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => e.to_string(),
        }
    };
    let nan = case("nan", &|dir| {
        edit_tensors(dir, |t| {
            let entry = t.get_mut(&format!("{q0}.lora_b")).unwrap();
            entry.2[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        })
    });
    assert!(
        nan.contains(&format!("{q0}.lora_b")) && nan.contains("non-finite"),
        "{nan}"
    );

    let rank = case("rank", &|dir| {
        let config =
            json!({"fine_tune_type": "lora", "lora_parameters": {"rank": 8, "scale": 2.0}});
        std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
    });
    assert!(
        rank.contains("rank 4") && rank.contains("says rank 8"),
        "{rank}"
    );

    let wrong_base = case("base", &|dir| {
        edit_tensors(dir, |t| {
            let values = vec![0.1f32; 300 * 4];
            t.insert(format!("{q0}.lora_a"), f32_tensor(&values, vec![300, 4]));
        })
    });
    assert!(
        wrong_base.contains(&format!("{q0}.lora_a")) && wrong_base.contains("another base model"),
        "{wrong_base}"
    );

    let missing = case("missing", &|dir| {
        std::fs::remove_file(dir.join("adapters.safetensors")).unwrap();
    });
    assert!(missing.contains("adapters.safetensors"), "{missing}");

    let full = case("full", &|dir| {
        let config = json!({"fine_tune_type": "full", "lora_parameters": {"rank": 4}});
        std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
    });
    assert!(
        full.contains("full fine-tune") && full.contains("replaces the base"),
        "{full}"
    );

    // A header claiming a 2 GB tensor in a file of a few hundred bytes.
    let huge = case("huge", &|dir| {
        let header = json!({format!("{q0}.lora_a"): {"dtype": "F32", "shape": [256, 2_000_000],
                            "data_offsets": [0, 2_048_000_000u64]}})
        .to_string();
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend([0u8; 64]);
        std::fs::write(dir.join("adapters.safetensors"), bytes).unwrap();
    });
    assert!(
        huge.contains("2048000000") || huge.contains("holds 64"),
        "{huge}"
    );

    let tower = case("tower", &|dir| {
        edit_tensors(dir, |t| {
            t.insert(
                "vision_tower.encoder.layers.0.self_attn.q_proj.lora_a".into(),
                f32_tensor(&[0.0; 4], vec![1, 4]),
            );
        })
    });
    assert!(tower.contains("vision_tower.encoder.layers.0"), "{tower}");

    // PEFT: a factor of a module its config's target_modules does not list.
    let peft = work.path().join("peft");
    write_adapter(&model, &peft, 4, 5, false, true);
    let config = json!({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                        "target_modules": ["self_attn.q_proj", "k_proj", "v_proj", "o_proj"]});
    std::fs::write(peft.join("adapter_config.json"), config.to_string()).unwrap();
    let unlisted = model.load_adapter(&peft).err().unwrap().to_string();
    assert!(
        unlisted.contains("mlp.gate_proj.lora_A.weight") && unlisted.contains("target_modules"),
        "{unlisted}"
    );
    assert!(!unlisted.contains("q_proj"), "{unlisted}");

    // Nothing of the refused ones got on: the good adapter still answers.
    assert_eq!(logits(&model), with_good);
    assert_eq!(model.adapter().unwrap().dir, good);
}

#[test]
fn taps_keep_each_layers_output_without_changing_the_logits() {
    let model = load();
    let layers = model.layers().len();
    let mut caches = model.new_caches();
    let plain = host(&model.forward(&PROMPT, &[], &mut caches, None).unwrap());
    let mut taps = gemma::Taps::new(vec![
        gemma::TapPoint::Layer(0),
        gemma::TapPoint::Layer(layers - 1),
        gemma::TapPoint::FinalNorm,
    ]);
    let mut caches = model.new_caches();
    let split = 8;
    let mut rows = host(
        &model
            .forward_tapped(&PROMPT[..split], &mut caches, &mut taps)
            .unwrap(),
    );
    for t in split..PROMPT.len() {
        rows.extend(host(
            &model
                .forward_tapped(&PROMPT[t..t + 1], &mut caches, &mut taps)
                .unwrap(),
        ));
    }
    let d = max_rel_diff(&rows, &plain);
    assert!(d < 1e-5, "tapped logits differ by {d:e}");
    let stacked = taps.stacked().unwrap();
    let hidden = model.config().text.hidden_size as i32;
    assert_eq!(stacked.shape(), [3, PROMPT.len() as i32, hidden]);
    // The final-norm state is what the head reads: it has unit RMS up to the norm's weight,
    // unlike the residual stream.
    let h = host(&stacked);
    let n = h.len() / 3;
    assert_ne!(&h[..n], &h[2 * n..]);
    let mut out_of_range = model.new_caches();
    let err = model
        .forward_tapped(
            &PROMPT,
            &mut out_of_range,
            &mut gemma::Taps::new(vec![gemma::TapPoint::Layer(layers)]),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("layer {layers} cannot be tapped")),
        "{err}"
    );
}
