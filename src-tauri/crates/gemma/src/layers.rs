//! The layer table: every per-layer difference of the decoder, computed once from config.

use crate::config::{kind_name, AttentionKind, QuantSpec, TextConfig};
use crate::error::{Error, Result};

/// Where a layer's keys and values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvSource {
    /// The layer projects its own K/V and keeps them in cache slot `cache`.
    Own { cache: usize },
    /// The layer attends the K/V its producer layer returned in the same forward call.
    Shared { producer: usize },
}

/// How queries and keys are rotated.
#[derive(Debug, Clone, PartialEq)]
pub enum Rope {
    /// Every frequency pair rotates: inv_freq_j = base^(-2j/dims).
    Default { dims: i32, base: f32 },
    /// Gemma 4 "proportional" RoPE: the first pairs rotate with exponents over the full head dim,
    /// the others pass through. `periods` are MLX's `freqs` (1/inv_freq; infinity = no rotation).
    Proportional { dims: i32, periods: Vec<f32> },
}

/// One decoder layer's geometry.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    pub index: usize,
    pub kind: AttentionKind,
    pub head_dim: usize,
    pub kv: KvSource,
    pub mlp_width: usize,
    pub rope: Rope,
    /// KV-cache quantization of an owning layer (from `kv_config.json`, when enabled).
    pub kv_quant: Option<QuantSpec>,
}

impl LayerSpec {
    /// True when this layer owns a cache.
    pub fn owns_kv(&self) -> bool {
        matches!(self.kv, KvSource::Own { .. })
    }
}

/// Builds the layer table of the decoder.
pub fn layer_table(text: &TextConfig) -> Result<Vec<LayerSpec>> {
    let n = text.num_hidden_layers;
    let first_shared = n - text.num_kv_shared_layers;
    let mut last_owner_of_kind: [Option<usize>; 2] = [None, None];
    let slot = |k: AttentionKind| match k {
        AttentionKind::Sliding => 0,
        AttentionKind::Full => 1,
    };
    let mut table = Vec::with_capacity(n);
    for (index, &kind) in text.layer_types.iter().enumerate() {
        let head_dim = match kind {
            AttentionKind::Full => text.global_head_dim.unwrap_or(text.head_dim),
            AttentionKind::Sliding => text.head_dim,
        };
        let kv = if index < first_shared {
            last_owner_of_kind[slot(kind)] = Some(index);
            KvSource::Own { cache: index }
        } else {
            let producer = last_owner_of_kind[slot(kind)].ok_or_else(|| {
                Error::Unsupported(format!(
                    "layer {index} shares K/V of a {} layer, but no earlier layer of that kind owns any",
                    kind_name(kind)
                ))
            })?;
            KvSource::Shared { producer }
        };
        let double =
            text.use_double_wide_mlp && index >= first_shared && text.num_kv_shared_layers > 0;
        let rope = rope_for(text, kind, head_dim)?;
        table.push(LayerSpec {
            index,
            kind,
            head_dim,
            kv,
            mlp_width: text.intermediate_size * if double { 2 } else { 1 },
            rope,
            kv_quant: None,
        });
    }
    Ok(table)
}

pub(crate) fn rope_for(text: &TextConfig, kind: AttentionKind, head_dim: usize) -> Result<Rope> {
    let name = kind_name(kind);
    let params = text
        .rope_parameters
        .get(name)
        .ok_or_else(|| Error::Unsupported(format!("rope_parameters.{name} is missing")))?;
    let dims = head_dim as i32;
    match params.rope_type.as_str() {
        "default" => Ok(Rope::Default {
            dims,
            base: params.rope_theta,
        }),
        "proportional" => {
            // As mlx-vlm's ProportionalRoPE: rotated = 2 * floor(factor * dims / 2).
            let rotated =
                2 * ((params.partial_rotary_factor * head_dim as f32) / 2.0).floor() as usize;
            let angles = rotated / 2;
            let periods = (0..head_dim / 2)
                .map(|j| {
                    if j < angles {
                        let exponent = (2 * j) as f32 / head_dim as f32;
                        params.factor * params.rope_theta.powf(exponent)
                    } else {
                        f32::INFINITY
                    }
                })
                .collect();
            Ok(Rope::Proportional { dims, periods })
        }
        other => Err(Error::Unsupported(format!(
            "rope_type \"{other}\" of {name} layers"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn e4b_text_config() -> String {
        let types: Vec<String> = (0..42)
            .map(|i| {
                if i % 6 == 5 {
                    "\"full_attention\"".into()
                } else {
                    "\"sliding_attention\"".into()
                }
            })
            .collect();
        format!(
            r#"{{"model_type":"gemma4","text_config":{{"hidden_size":2560,"num_hidden_layers":42,
            "intermediate_size":10240,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":256,
            "global_head_dim":512,"layer_types":[{}],"sliding_window":512,"num_kv_shared_layers":18,
            "hidden_size_per_layer_input":256,"vocab_size":262144,"final_logit_softcapping":30.0,
            "use_double_wide_mlp":false,
            "rope_parameters":{{"sliding_attention":{{"rope_type":"default","rope_theta":10000.0}},
            "full_attention":{{"rope_type":"proportional","rope_theta":1000000.0,"partial_rotary_factor":0.25}}}}}}}}"#,
            types.join(",")
        )
    }

    #[test]
    fn e4b_table_matches_the_published_geometry() {
        let config = Config::parse(&e4b_text_config()).unwrap();
        let table = layer_table(&config.text).unwrap();
        assert_eq!(table.len(), 42);
        let full: Vec<usize> = table
            .iter()
            .filter(|l| l.kind == AttentionKind::Full)
            .map(|l| l.index)
            .collect();
        assert_eq!(full, [5, 11, 17, 23, 29, 35, 41]);
        assert_eq!(table.iter().filter(|l| l.owns_kv()).count(), 24);
        for layer in &table[24..] {
            let expected = if layer.kind == AttentionKind::Full {
                23
            } else {
                22
            };
            assert_eq!(
                layer.kv,
                KvSource::Shared { producer: expected },
                "layer {}",
                layer.index
            );
        }
        assert_eq!(table[5].head_dim, 512);
        assert_eq!(table[4].head_dim, 256);
        assert!(table.iter().all(|l| l.mlp_width == 10240));
        assert_eq!(
            table[0].rope,
            Rope::Default {
                dims: 256,
                base: 10000.0
            }
        );
        let Rope::Proportional { dims, periods } = &table[5].rope else {
            panic!("full layers use proportional rope")
        };
        assert_eq!(*dims, 512);
        assert_eq!(periods.len(), 256);
        assert_eq!(periods.iter().filter(|p| p.is_finite()).count(), 64);
        assert!((periods[1] - 1e6f32.powf(2.0 / 512.0)).abs() < 1e-3);
    }

    #[test]
    fn wrong_model_type_and_inconsistent_layer_types_are_reported() {
        let text = e4b_text_config().replace("\"gemma4\"", "\"llama\"");
        assert!(Config::parse(&text).unwrap_err().contains("llama"));
        let text =
            e4b_text_config().replace("\"num_hidden_layers\":42", "\"num_hidden_layers\":40");
        assert!(Config::parse(&text)
            .unwrap_err()
            .contains("layer_types has 42 entries for 40 layers"));
    }
}
