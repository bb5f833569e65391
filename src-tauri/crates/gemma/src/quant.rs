//! Linear layers and embeddings, dense or MLX-affine-quantized. A module is quantized iff
//! `<path>.scales` exists; bits and group size come from the config's per-module entry, else the
//! default, and must agree with the tensor shapes.

use std::cell::RefCell;

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{concatenate, dequantize, quantized_matmul};
use mlx_rs::{with_stream, Array, Device, Stream};

use crate::config::QuantSpec;
use crate::error::Result;
use crate::lora::Delta;
use crate::tuning::LinearKernels;
use crate::weights::{DtypeClass, Weights};

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
        /// Which kernel by rows and dtype, and the CPU lanes: [`Tuning`](crate::Tuning)'s
        /// share, kept from load time.
        kernels: LinearKernels,
    },
}

/// Bits and group size of a quantized module: from the config, checked against (or, when the
/// config is silent, derived from) the shapes of `.weight` and `.scales`.
fn quant_spec(weights: &Weights<'_>, inp: usize) -> Option<QuantSpec> {
    let path = weights.path();
    let from_shapes = || -> Option<QuantSpec> {
        let packed = *weights.shape("weight")?.last()?;
        let groups = *weights.shape("scales")?.last()?;
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
    match (weights.quantization().for_module(path), from_shapes()) {
        (Some(spec), _) if [2, 3, 4, 5, 6, 8].contains(&spec.bits) && spec.group_size > 0 => {
            Some(spec)
        }
        (None, Some(spec)) => Some(spec),
        (Some(spec), _) => {
            weights.problem(format!(
                "{path}: unsupported quantization {} bits, group {}",
                spec.bits, spec.group_size
            ));
            None
        }
        (None, None) => {
            weights.problem(format!(
                "{path}: quantized tensors whose shapes fit no bits/group size"
            ));
            None
        }
    }
}

impl Linear {
    /// Loads the module at `weights` with logical shape `[out, inp]`, dense or quantized; a
    /// problem is recorded in the store and the layer stands in as zeros.
    pub fn load(weights: &Weights<'_>, out: usize, inp: usize) -> Result<Self> {
        if !weights.contains("scales") {
            return Ok(Linear::Dense {
                weight: weights.float("weight", &[out, inp])?,
            });
        }
        let Some(spec) = quant_spec(weights, inp) else {
            // The module's tensors stay untaken: they are reported as unexpected too.
            return Ok(Linear::Dense {
                weight: weights.placeholder(&[out, inp], DtypeClass::Float)?,
            });
        };
        let packed = inp * spec.bits as usize / 32;
        let groups = inp / spec.group_size as usize;
        Ok(Linear::Quantized {
            weight: weights.take("weight", &[out, packed], DtypeClass::U32)?,
            scales: weights.float("scales", &[out, groups])?,
            biases: weights.float("biases", &[out, groups])?,
            spec,
            kernels: weights.tuning().linear(),
        })
    }

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

    /// The weight as a dense `[out, in]` matrix (dequantized when stored quantized).
    pub fn dense_weight(&self) -> Result<Array> {
        Ok(match self {
            Linear::Dense { weight } => weight.clone(),
            Linear::Quantized {
                weight,
                scales,
                biases,
                spec,
                ..
            } => dequantize(weight, scales, biases, spec.group_size, spec.bits)?,
        })
    }

    /// [`Self::forward`] with an adapter's update of this layer, when it has one.
    pub(crate) fn forward_with(&self, x: &Array, delta: Option<&Delta>) -> Result<Array> {
        let y = self.forward(x)?;
        match delta {
            Some(delta) => delta.apply(x, &y),
            None => Ok(y),
        }
    }

    /// Applies the layer to `x` (`[..., in]` → `[..., out]`). A quantized layer given at least as
    /// many positions per sequence as its `dense_from` names for `x`'s dtype dequantizes its
    /// weights and runs a dense matmul (the same values up to rounding, through a faster kernel
    /// there). Rows per sequence decide: a decode step of several sequences (`[n, 1, in]`) is
    /// n vectors, multiplied as each alone would be.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let dense = match self {
            Linear::Dense { .. } => false,
            Linear::Quantized { kernels, .. } => kernels
                .dense_from
                .rows(x.dtype())
                .is_some_and(|min| positions(x) >= min),
        };
        self.product_on_lanes(x, dense)
    }

    /// Applies the layer to `x` with its weights as stored: MLX's quantized matmul for a
    /// quantized layer, whatever the number of rows, its output rows shared among the CPU
    /// lanes.
    pub fn forward_as_stored(&self, x: &Array) -> Result<Array> {
        self.product_on_lanes(x, false)
    }

    /// The layer's product: a dense layer's matmul, or a quantized layer's (through its
    /// dequantized weights when `dense`) with its output rows shared among its CPU lanes (see
    /// [`EXTRA_LANES`]; the same values as in one piece: each output column is computed
    /// alone).
    fn product_on_lanes(&self, x: &Array, dense: bool) -> Result<Array> {
        let (weight, scales, biases, spec, lanes) = match self {
            Linear::Dense { weight } => return Ok(x.matmul(weight.transpose()?)?),
            Linear::Quantized {
                weight,
                scales,
                biases,
                spec,
                kernels,
            } => (weight, scales, biases, spec, kernels.cpu_lanes),
        };
        let product = |w: &Array, s: &Array, b: &Array| -> Result<Array> {
            Ok(if dense {
                x.matmul(dequantize(w, s, b, spec.group_size, spec.bits)?.transpose()?)?
            } else {
                quantized_matmul(x, w, s, b, true, spec.group_size, spec.bits)?
            })
        };
        let out = weight.shape()[0];
        let parts = lanes.max(1) as i32;
        if parts == 1 || out < parts * MIN_ROWS_PER_LANE {
            return product(weight, scales, biases);
        }
        EXTRA_LANES.with_borrow_mut(|extra| {
            while extra.len() + 1 < parts as usize {
                extra.push(Stream::new_with_device(&Device::cpu()));
            }
            let step = (out + parts - 1) / parts;
            let mut outputs = Vec::with_capacity(parts as usize);
            for (lane, start) in (0..out).step_by(step as usize).enumerate() {
                let r = start..(start + step).min(out);
                let (w, s, b) = (
                    weight.index(r.clone()),
                    scales.index(r.clone()),
                    biases.index(r),
                );
                outputs.push(match lane {
                    0 => product(&w, &s, &b)?,
                    n => with_stream(&extra[n - 1], || product(&w, &s, &b))?,
                });
            }
            Ok(concatenate(&outputs, -1)?)
        })
    }
}

/// Output rows below which a layer is not worth sharing among lanes.
const MIN_ROWS_PER_LANE: i32 = 256;

thread_local! {
    /// Extra streams of the CPU device, made on first use: MLX runs each stream's operations on
    /// a thread of its own, and its CPU quantized matmul (and dequantize) use one thread, so a
    /// layer's output rows split among the calling thread's default stream and these run on as
    /// many cores. Only a layer of more than one lane (MLX's CPU backend) uses them.
    static EXTRA_LANES: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
}

/// Positions per sequence of `x` (`[..., positions, in]`).
fn positions(x: &Array) -> usize {
    let shape = x.shape();
    match shape.len() {
        0 | 1 => 1,
        n => shape[n - 2].max(0) as usize,
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
            [Linear::Quantized { spec, kernels, .. }, ..] => {
                let quantized: Vec<(&Array, &Array, &Array)> = parts
                    .iter()
                    .filter_map(|l| match l {
                        Linear::Quantized {
                            weight,
                            scales,
                            biases,
                            spec: s,
                            ..
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
                        kernels: *kernels,
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

    /// [`Self::forward_joined`] with an adapter's update of the group (over every output).
    pub(crate) fn forward_joined_with(
        &self,
        x: &Array,
        delta: Option<&Delta>,
    ) -> Result<Option<Array>> {
        match (self.forward_joined(x)?, delta) {
            (Some(y), Some(delta)) => Ok(Some(delta.apply(x, &y)?)),
            (joined, _) => Ok(joined),
        }
    }

    /// [`Self::forward`] with an adapter's update of the group: applied to the outputs side by
    /// side, then split.
    pub(crate) fn forward_with(&self, x: &Array, delta: Option<&Delta>) -> Result<Vec<Array>> {
        let Some(delta) = delta else {
            return self.forward(x);
        };
        let (joined, splits) = match self {
            SideBySide::Fused { linear, splits } => (linear.forward(x)?, splits.clone()),
            SideBySide::Separate(parts) => {
                let outs = parts
                    .iter()
                    .map(|l| l.forward(x))
                    .collect::<Result<Vec<_>>>()?;
                let splits = outs
                    .iter()
                    .take(outs.len().saturating_sub(1))
                    .scan(0, |end, y| {
                        *end += y.shape()[y.ndim() - 1];
                        Some(*end)
                    })
                    .collect();
                (concatenate(&outs, -1)?, splits)
            }
        };
        let y = delta.apply(x, &joined)?;
        Ok(match splits.is_empty() {
            true => vec![y],
            false => y.split_at_indices(&splits, -1)?,
        })
    }

    /// Part `index`'s weight as a dense `[out, in]` matrix.
    pub fn part_weight(&self, index: usize) -> Result<Option<Array>> {
        match self {
            SideBySide::Fused { linear, splits } => {
                let weight = linear.dense_weight()?;
                let rows = weight.shape()[0];
                let start = match index {
                    0 => 0,
                    i => match splits.get(i - 1) {
                        Some(&s) => s,
                        None => return Ok(None),
                    },
                };
                let end = splits.get(index).copied().unwrap_or(rows);
                Ok(Some(weight.index(start..end)))
            }
            SideBySide::Separate(parts) => parts.get(index).map(Linear::dense_weight).transpose(),
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
    /// Loads the table at `weights` with logical shape `[vocab, dim]`.
    pub fn load(weights: &Weights<'_>, vocab: usize, dim: usize) -> Result<Self> {
        Ok(Self {
            table: Linear::load(weights, vocab, dim)?,
        })
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
                ..
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
        // Quantized whatever the rows: the dense table would be vocab × dim (1.3 GB for E4B).
        self.table.forward_as_stored(x)
    }
}
