//! Random LoRA/DoRA adapters for a loaded model, written as trainers write them (the gemma and
//! engine crates' tests include this file).

use std::collections::BTreeMap;
use std::path::Path;

use gemma::Model;
use serde_json::json;

type Tensors = BTreeMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>;

fn write(path: &Path, tensors: &Tensors) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, (d, s, b))| {
            let view = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

pub const TARGETS: [&str; 9] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "per_layer_input_gate",
    "per_layer_projection",
];

/// `(in, out)` of `target` in layer `layer` of `model`.
pub fn dims(model: &Model, layer: usize, target: &str) -> Option<(usize, usize)> {
    let t = &model.config().text;
    let spec = &model.layers()[layer];
    let (hidden, q, kv) = (
        t.hidden_size,
        t.num_attention_heads * spec.head_dim,
        t.num_key_value_heads * spec.head_dim,
    );
    let per_layer = t.hidden_size_per_layer_input;
    Some(match target {
        "self_attn.q_proj" => (hidden, q),
        "self_attn.k_proj" | "self_attn.v_proj" if spec.owns_kv() => (hidden, kv),
        "self_attn.k_proj" | "self_attn.v_proj" => return None,
        "self_attn.o_proj" => (q, hidden),
        "mlp.gate_proj" | "mlp.up_proj" => (hidden, spec.mlp_width),
        "mlp.down_proj" => (spec.mlp_width, hidden),
        "per_layer_input_gate" => (hidden, per_layer),
        _ => (per_layer, hidden),
    })
}

pub fn f32_tensor(values: &[f32], shape: Vec<usize>) -> (safetensors::Dtype, Vec<usize>, Vec<u8>) {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    (safetensors::Dtype::F32, shape, bytes)
}

/// Deterministic pseudo-random values in [-amp, amp].
fn values(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32 * 2.0 - 1.0) * amp
        })
        .collect()
}

/// A random rank-`rank` adapter on every target of every layer, written to `dir` in mlx-vlm's
/// layout (`peft`: PEFT's, the same factors transposed).
pub fn write_adapter(model: &Model, dir: &Path, rank: usize, seed: u64, dora: bool, peft: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let scale = 2.0f32;
    let mut tensors = Tensors::new();
    for layer in 0..model.layers().len() {
        for (k, target) in TARGETS.iter().enumerate() {
            let Some((inp, out)) = dims(model, layer, target) else {
                continue;
            };
            let seed = seed * 1000 + layer as u64 * 10 + k as u64;
            let a = values(inp * rank, seed, 1.0 / (inp as f32).sqrt());
            let b = values(rank * out, seed + 7, 0.05);
            let m = values(out, seed + 9, 0.5)
                .iter()
                .map(|v| 1.0 + v)
                .collect::<Vec<_>>();
            if peft {
                let name = format!("base_model.model.model.language_model.layers.{layer}.{target}");
                let at = transpose(&a, inp, rank);
                let bt = transpose(&b, rank, out);
                tensors.insert(
                    format!("{name}.lora_A.weight"),
                    f32_tensor(&at, vec![rank, inp]),
                );
                tensors.insert(
                    format!("{name}.lora_B.weight"),
                    f32_tensor(&bt, vec![out, rank]),
                );
                if dora {
                    tensors.insert(
                        format!("{name}.lora_magnitude_vector"),
                        f32_tensor(&m, vec![out]),
                    );
                }
            } else {
                let name = format!("language_model.model.layers.{layer}.{target}");
                tensors.insert(format!("{name}.lora_a"), f32_tensor(&a, vec![inp, rank]));
                tensors.insert(format!("{name}.lora_b"), f32_tensor(&b, vec![rank, out]));
                if dora {
                    tensors.insert(format!("{name}.m"), f32_tensor(&m, vec![out]));
                }
            }
        }
    }
    let config = if peft {
        write(&dir.join("adapter_model.safetensors"), &tensors);
        json!({"peft_type": "LORA", "r": rank, "lora_alpha": scale * rank as f32,
               "use_dora": dora, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
               "gate_proj", "up_proj", "down_proj", "per_layer_input_gate", "per_layer_projection"]})
    } else {
        write(&dir.join("adapters.safetensors"), &tensors);
        json!({"fine_tune_type": if dora { "dora" } else { "lora" }, "num_layers": -1,
               "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0}})
    };
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
}

pub fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}
