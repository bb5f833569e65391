//! Linear layers and embeddings, dense or MLX-affine-quantized. A module is quantized iff
//! `<path>.scales` exists; bits and group size come from the config's per-module entry, else the
//! default, and must agree with the tensor shapes.

use mlx_rs::ops::{dequantize, quantized_matmul};
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

    /// The table as a linear layer (the tied LM head): `[..., dim]` → `[..., vocab]`.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.table.forward(x)
    }
}
