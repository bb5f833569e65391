//! Linear layers and embeddings, dense or MLX-affine-quantized. A module is quantized iff
//! `<path>.scales` exists; bits and group size come from the config's per-module entry, else the
//! default, and must agree with the tensor shapes.

use mlx_rs::ops::{concatenate, dequantize, quantized_matmul};
use mlx_rs::{Array, Dtype};

use crate::config::{QuantSpec, Quantization};
use crate::error::Result;
use crate::weights::{to_dtype, DtypeClass, WeightStore};

/// A bias-free linear layer `y = x · Wᵀ`.
pub enum Linear {
    Dense {
        weight: Array,
    },
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        spec: QuantSpec,
    },
}

/// Loads `<path>` with logical shape `[out, inp]` (dense or quantized). `None` = a problem was recorded.
pub fn load_linear(
    store: &mut WeightStore,
    quant: &Quantization,
    path: &str,
    out: usize,
    inp: usize,
    dtype: Dtype,
) -> Result<Option<Linear>> {
    let scales_name = format!("{path}.scales");
    if !store.contains(&scales_name) {
        let Some(weight) = store.take(&format!("{path}.weight"), &[out, inp], DtypeClass::Float)
        else {
            return Ok(None);
        };
        return Ok(Some(Linear::Dense {
            weight: to_dtype(weight, dtype)?,
        }));
    }
    let Some(spec) = quant_spec(store, quant, path, inp) else {
        return Ok(None);
    };
    let packed = inp * spec.bits as usize / 32;
    let groups = inp / spec.group_size as usize;
    let weight = store.take(&format!("{path}.weight"), &[out, packed], DtypeClass::U32);
    let scales = store.take(&scales_name, &[out, groups], DtypeClass::Float);
    let biases = store.take(&format!("{path}.biases"), &[out, groups], DtypeClass::Float);
    let (Some(weight), Some(scales), Some(biases)) = (weight, scales, biases) else {
        return Ok(None);
    };
    Ok(Some(Linear::Quantized {
        weight,
        scales: to_dtype(scales, dtype)?,
        biases: to_dtype(biases, dtype)?,
        spec,
    }))
}

/// Bits and group size of a quantized module: from the config, checked against (or, when the
/// config is silent, derived from) the shapes of `.weight` and `.scales`.
fn quant_spec(
    store: &mut WeightStore,
    quant: &Quantization,
    path: &str,
    inp: usize,
) -> Option<QuantSpec> {
    let from_shapes = || -> Option<QuantSpec> {
        let packed = *store.shape(&format!("{path}.weight"))?.last()?;
        let groups = *store.shape(&format!("{path}.scales"))?.last()?;
        if packed == 0
            || groups == 0
            || !inp.is_multiple_of(groups)
            || !(packed * 32).is_multiple_of(inp)
        {
            return None;
        }
        Some(QuantSpec {
            bits: (packed * 32 / inp) as i32,
            group_size: (inp / groups) as i32,
        })
    };
    match (quant.for_module(path), from_shapes()) {
        (Some(spec), _) if [2, 3, 4, 5, 6, 8].contains(&spec.bits) && spec.group_size > 0 => {
            Some(spec)
        }
        (None, Some(spec)) => Some(spec),
        (Some(spec), _) => {
            store.problem(format!(
                "{path}: unsupported quantization {} bits, group {}",
                spec.bits, spec.group_size
            ));
            None
        }
        (None, None) => {
            store.problem(format!(
                "{path}: quantized tensors whose shapes fit no bits/group size"
            ));
            None
        }
    }
}

impl Linear {
    /// The layer's weight arrays (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Linear::Dense { weight } => vec![weight],
            Linear::Quantized {
                weight,
                scales,
                biases,
                ..
            } => vec![weight, scales, biases],
        }
    }

    /// Applies the layer to `x` (`[..., in]` → `[..., out]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Linear::Dense { weight } => x.matmul(weight.transpose()?)?,
            Linear::Quantized {
                weight,
                scales,
                biases,
                spec,
            } => quantized_matmul(x, weight, scales, biases, true, spec.group_size, spec.bits)?,
        })
    }
}

/// Linear layers of the same input. When they share their kind and quantization, their rows
/// are concatenated at load and one matmul computes them all (one primitive instead of one per
/// layer); otherwise they run one by one.
pub enum SideBySide {
    Fused { linear: Linear, splits: Vec<i32> },
    Separate(Vec<Linear>),
}

impl SideBySide {
    /// Combines `parts` (in output order).
    pub fn new(parts: Vec<Linear>) -> Result<Self> {
        if parts.len() < 2 {
            return Ok(SideBySide::Separate(parts));
        }
        let rows: Vec<i32> = parts
            .iter()
            .map(|l| match l {
                Linear::Dense { weight } | Linear::Quantized { weight, .. } => weight.shape()[0],
            })
            .collect();
        let splits: Vec<i32> = rows
            .iter()
            .scan(0, |end, r| {
                *end += r;
                Some(*end)
            })
            .take(rows.len() - 1)
            .collect();
        let stack = |arrays: Vec<&Array>| concatenate(&arrays, 0);
        let fused = match parts.as_slice() {
            [Linear::Dense { .. }, ..]
                if parts.iter().all(|l| matches!(l, Linear::Dense { .. })) =>
            {
                let weights = parts
                    .iter()
                    .filter_map(|l| match l {
                        Linear::Dense { weight } => Some(weight),
                        Linear::Quantized { .. } => None,
                    })
                    .collect();
                Some(Linear::Dense {
                    weight: stack(weights)?,
                })
            }
            [Linear::Quantized { spec, .. }, ..] => {
                let quantized: Vec<(&Array, &Array, &Array)> = parts
                    .iter()
                    .filter_map(|l| match l {
                        Linear::Quantized {
                            weight,
                            scales,
                            biases,
                            spec: s,
                        } if s == spec => Some((weight, scales, biases)),
                        _ => None,
                    })
                    .collect();
                if quantized.len() == parts.len() {
                    Some(Linear::Quantized {
                        weight: stack(quantized.iter().map(|p| p.0).collect())?,
                        scales: stack(quantized.iter().map(|p| p.1).collect())?,
                        biases: stack(quantized.iter().map(|p| p.2).collect())?,
                        spec: *spec,
                    })
                } else {
                    None
                }
            }
            _ => None,
        };
        Ok(match fused {
            Some(linear) => SideBySide::Fused { linear, splits },
            None => SideBySide::Separate(parts),
        })
    }

    /// The outputs side by side (`[..., Σ out]`), when the layers were fused.
    pub fn forward_joined(&self, x: &Array) -> Result<Option<Array>> {
        match self {
            SideBySide::Fused { linear, .. } => Ok(Some(linear.forward(x)?)),
            SideBySide::Separate(_) => Ok(None),
        }
    }

    /// Every layer's output, in order.
    pub fn forward(&self, x: &Array) -> Result<Vec<Array>> {
        match self {
            SideBySide::Fused { linear, splits } => {
                Ok(linear.forward(x)?.split_at_indices(splits, -1)?)
            }
            SideBySide::Separate(parts) => parts.iter().map(|l| l.forward(x)).collect(),
        }
    }

    /// The weight arrays.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            SideBySide::Fused { linear, .. } => linear.arrays(),
            SideBySide::Separate(parts) => parts.iter().flat_map(Linear::arrays).collect(),
        }
    }
}

/// A token embedding table, dense or quantized; also usable as the tied output head.
pub struct Embedding {
    table: Linear,
}

impl Embedding {
    /// Loads `<path>` with logical shape `[vocab, dim]`.
    pub fn load(
        store: &mut WeightStore,
        quant: &Quantization,
        path: &str,
        vocab: usize,
        dim: usize,
        dtype: Dtype,
    ) -> Result<Option<Self>> {
        Ok(load_linear(store, quant, path, vocab, dim, dtype)?.map(|table| Self { table }))
    }

    /// Rows of `ids` (any shape of integer ids) → `[..., dim]`. Only the gathered rows of a
    /// quantized table are dequantized.
    pub fn lookup(&self, ids: &Array) -> Result<Array> {
        Ok(match &self.table {
            Linear::Dense { weight } => weight.take_axis(ids, 0)?,
            Linear::Quantized {
                weight,
                scales,
                biases,
                spec,
            } => {
                let w = weight.take_axis(ids, 0)?;
                let s = scales.take_axis(ids, 0)?;
                let b = biases.take_axis(ids, 0)?;
                dequantize(&w, &s, &b, spec.group_size, spec.bits)?
            }
        })
    }

    /// The table's arrays.
    pub fn arrays(&self) -> Vec<&Array> {
        self.table.arrays()
    }

    /// The table as a linear layer (the tied LM head): `[..., dim]` → `[..., vocab]`.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.table.forward(x)
    }
}
