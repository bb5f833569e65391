//! Reading an adapter folder: `adapter_config.json` in each trainer's form, the factor names of
//! every layout, tensor values as float32 (`docs/ADAPTERS.md`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{Format, Method, Target};
use crate::error::{Error, Result};

/// Which factor a tensor name ends with, and whether it is stored transposed (PEFT's
/// `lora_A.weight` is `[r, in]`, `lora_B.weight` `[out, r]`).
#[derive(Clone, Copy)]
pub(super) enum Part {
    A { transposed: bool },
    B { transposed: bool },
    Magnitude,
}

/// The parsed `adapter_config.json`.
pub(super) struct Settings {
    pub(super) format: Format,
    pub(super) method: Method,
    pub(super) rank: usize,
    pub(super) scale: f32,
    pub(super) base_model: Option<String>,
    pub(super) weights: PathBuf,
    /// PEFT's `target_modules`, when a list.
    pub(super) target_modules: Option<Vec<String>>,
}

/// A tensor's values as float32 (from float32, float16 or bfloat16).
pub(super) fn read_f32(
    file: &mut File,
    header: &crate::weights::TensorHeader,
) -> std::result::Result<Vec<f32>, String> {
    use safetensors::Dtype as D;
    let count: usize = header.shape.iter().product();
    let width = match header.dtype {
        D::F32 => 4,
        D::F16 | D::BF16 => 2,
        other => {
            return Err(format!(
                "dtype {other:?} (factors are float32, 16 or bfloat16)"
            ))
        }
    };
    let mut bytes = vec![0u8; count * width];
    file.seek(SeekFrom::Start(header.offset))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| format!("cannot be read: {e}"))?;
    Ok(match header.dtype {
        D::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        D::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    })
}

/// `(layer, target, part)` of a factor's name: any prefix outside the towers, then
/// `layers.N.<target path>.<factor>`.
pub(super) fn parse_name(name: &str) -> Option<(usize, Target, Part)> {
    let parts: Vec<&str> = name.split('.').collect();
    let at = parts
        .windows(2)
        .position(|w| w[0] == "layers" && w[1].parse::<usize>().is_ok())?;
    if parts[..at]
        .iter()
        .any(|p| p.contains("vision") || p.contains("audio"))
    {
        return None;
    }
    let layer = parts[at + 1].parse().ok()?;
    let rest = parts[at + 2..].join(".");
    Target::ALL.iter().find_map(|&target| {
        let factor = rest.strip_prefix(target.path())?.strip_prefix('.')?;
        let part = match factor {
            "lora_a" | "A" => Part::A { transposed: false },
            "lora_b" | "B" => Part::B { transposed: false },
            "lora_A.weight" => Part::A { transposed: true },
            "lora_B.weight" => Part::B { transposed: true },
            "m" | "lora_magnitude_vector" | "lora_magnitude_vector.weight" => Part::Magnitude,
            _ => return None,
        };
        Some((layer, target, part))
    })
}

/// Reads `adapter_config.json` and finds the weights file of its format.
pub(super) fn read_settings(dir: &Path) -> Result<Settings> {
    let refuse = |message: String| Error::Adapter {
        path: dir.to_path_buf(),
        message,
    };
    if !dir.is_dir() {
        return Err(refuse("is not a folder".into()));
    }
    let config_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| {
        refuse(format!(
            "has no readable adapter_config.json ({e}): an adapter folder holds the trainer's \
             adapter_config.json beside its safetensors"
        ))
    })?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| refuse(format!("adapter_config.json is not JSON: {e}")))?;
    let obj = json
        .as_object()
        .ok_or_else(|| refuse("adapter_config.json is not a JSON object".into()))?;
    let num = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_f64);
    let string = |key: &str| obj.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let weights_at = |names: &[&str]| -> Result<PathBuf> {
        names
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| refuse(format!("holds no weights file ({})", names.join(" or "))))
    };
    let rank_of = |v: Option<&serde_json::Value>, key: &str| -> Result<usize> {
        v.and_then(serde_json::Value::as_u64)
            .filter(|&r| r > 0)
            .map(|r| r as usize)
            .ok_or_else(|| {
                refuse(format!(
                    "adapter_config.json's {key} is not a positive whole number"
                ))
            })
    };
    let is_peft = obj.contains_key("peft_type") || obj.contains_key("target_modules");
    if is_peft {
        if let Some(kind) = string("peft_type").filter(|k| k != "LORA") {
            return Err(refuse(format!(
                "is a PEFT {kind} adapter; only LORA (with or without DoRA) is supported"
            )));
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if obj
                .get(key)
                .and_then(|v| v.as_object())
                .is_some_and(|m| !m.is_empty())
            {
                return Err(refuse(format!(
                    "uses {key} (ranks or alphas per module), which is not supported"
                )));
            }
        }
        if string("bias").is_some_and(|b| b != "none") {
            return Err(refuse(
                "trains biases (bias is not \"none\"); Gemma's projections have none".into(),
            ));
        }
        let rank = rank_of(obj.get("r"), "r")?;
        let alpha = num(obj.get("lora_alpha")).unwrap_or(8.0) as f32;
        let rslora = obj.get("use_rslora").and_then(|v| v.as_bool()) == Some(true);
        let dora = obj.get("use_dora").and_then(|v| v.as_bool()) == Some(true);
        let weights = if dir.join("adapter_model.safetensors").is_file() {
            dir.join("adapter_model.safetensors")
        } else if dir.join("adapter_model.bin").is_file() {
            return Err(refuse(
                "holds adapter_model.bin (a PyTorch pickle); save the adapter with \
                 safe_serialization=True to get adapter_model.safetensors"
                    .into(),
            ));
        } else {
            weights_at(&["adapter_model.safetensors"])?
        };
        return Ok(Settings {
            format: Format::Peft,
            method: if dora { Method::Dora } else { Method::Lora },
            rank,
            scale: if rslora {
                alpha / (rank as f32).sqrt()
            } else {
                alpha / rank as f32
            },
            base_model: string("base_model_name_or_path"),
            weights,
            target_modules: obj.get("target_modules").and_then(|v| {
                v.as_array().map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
            }),
        });
    }
    let weights = || weights_at(&["adapters.safetensors", "weights.safetensors"]);
    let base_model = string("model").or_else(|| string("base_model"));
    if let Some(params) = obj.get("lora_parameters") {
        let method = match string("fine_tune_type").as_deref() {
            None | Some("lora") => Method::Lora,
            Some("dora") => Method::Dora,
            Some("full") => {
                return Err(refuse(
                    "is a full fine-tune (fine_tune_type \"full\"): it replaces the base \
                     weights instead of adding to them, so it is a model of its own; open its \
                     fused folder as a model"
                        .into(),
                ))
            }
            Some(other) => {
                return Err(refuse(format!("has an unknown fine_tune_type \"{other}\"")))
            }
        };
        let rank = rank_of(params.get("rank"), "lora_parameters.rank")?;
        return Ok(Settings {
            format: Format::Mlx,
            method,
            rank,
            scale: num(params.get("scale")).unwrap_or(20.0) as f32,
            base_model,
            weights: weights()?,
            target_modules: None,
        });
    }
    if string("fine_tune_type").as_deref() == Some("full") {
        return Err(refuse(
            "is a full fine-tune (fine_tune_type \"full\"): it replaces the base weights \
             instead of adding to them; open its fused folder as a model"
                .into(),
        ));
    }
    if obj.contains_key("rank") {
        let rank = rank_of(obj.get("rank"), "rank")?;
        let alpha = num(obj.get("alpha")).unwrap_or(0.1) as f32;
        return Ok(Settings {
            format: Format::MlxLegacy,
            method: Method::Lora,
            rank,
            scale: alpha / rank as f32,
            base_model,
            weights: weights()?,
            target_modules: None,
        });
    }
    Err(refuse(
        "adapter_config.json has neither lora_parameters (mlx-lm / mlx-vlm), rank (mlx-vlm's \
         legacy form) nor r and target_modules (PEFT)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_every_layout_map_to_the_same_factor() {
        let cases = [
            (
                "language_model.model.layers.3.self_attn.q_proj.lora_a",
                3,
                Target::QProj,
            ),
            ("model.layers.0.mlp.down_proj.lora_b", 0, Target::DownProj),
            (
                "base_model.model.model.language_model.layers.11.mlp.up_proj.lora_A.weight",
                11,
                Target::UpProj,
            ),
            (
                "language_model.model.layers.2.per_layer_input_gate.A",
                2,
                Target::PerLayerInputGate,
            ),
            (
                "base_model.model.model.layers.5.per_layer_projection.lora_magnitude_vector",
                5,
                Target::PerLayerProjection,
            ),
        ];
        for (name, layer, target) in cases {
            let (l, t, _) = parse_name(name).unwrap_or_else(|| panic!("{name} not parsed"));
            assert_eq!((l, t), (layer, target), "{name}");
        }
        for name in [
            "vision_tower.encoder.layers.0.self_attn.q_proj.lora_a",
            "language_model.model.layers.0.self_attn.q_norm.lora_a",
            "language_model.model.per_layer_model_projection.lora_a",
            "language_model.model.layers.0.self_attn.q_proj.weight",
        ] {
            assert!(parse_name(name).is_none(), "{name} parsed");
        }
    }
}
