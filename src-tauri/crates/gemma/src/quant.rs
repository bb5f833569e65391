//! Linear layers and embeddings, dense or MLX-affine-quantized. A module is quantized iff
//! `<path>.scales` exists; bits and group size come from the config's per-module entry, else the
//! default, and must agree with the tensor shapes.

use std::sync::OnceLock;

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{concatenate, dequantize, quantized_matmul, zeros_dtype};
use mlx_rs::{with_stream, Array, Device, Dtype, Stream};

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

    /// Applies the layer to `x` (`[..., in]` → `[..., out]`). A quantized layer given at least as
    /// many rows as [`dense_from`] names for this backend and dtype dequantizes its weights and
    /// runs a dense matmul (the same values up to rounding, through a faster kernel there).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let dense = dense_from(x.dtype()).is_some_and(|min| rows(x) >= min);
        match dense_bucket() {
            Some(bucket) if dense => self.forward_dense_padded(x, bucket),
            _ => self.product_on_lanes(x, dense),
        }
    }

    /// The dense path of [`forward`](Self::forward) with `x`'s rows padded with zero rows to a
    /// multiple of `bucket` (their outputs dropped): prefills of different lengths then share
    /// the dense matmul's shapes, and what a backend does once per shape (CUDA: cuBLAS kernel
    /// selection and loading, graph instantiation) is paid once per bucket.
    pub fn forward_dense_padded(&self, x: &Array, bucket: usize) -> Result<Array> {
        let (n, bucket) = (rows(x), bucket.max(1));
        let padded = n.div_ceil(bucket) * bucket;
        if padded == n || matches!(self, Linear::Dense { .. }) {
            return self.product_on_lanes(x, true);
        }
        let shape = x.shape();
        let inp = shape[shape.len() - 1];
        let zeros = zeros_dtype(&[(padded - n) as i32, inp], x.dtype())?;
        let rows_in = concatenate(&[x.reshape(&[n as i32, inp])?, zeros], 0)?;
        let out = self.product_on_lanes(&rows_in, true)?;
        let mut out_shape = shape[..shape.len() - 1].to_vec();
        out_shape.push(out.shape()[1]);
        Ok(out.index(..n as i32).reshape(&out_shape)?)
    }

    /// Applies the layer to `x` with its weights as stored: MLX's quantized matmul for a
    /// quantized layer, whatever the number of rows.
    pub fn forward_as_stored(&self, x: &Array) -> Result<Array> {
        self.product_on_lanes(x, false)
    }

    /// The layer's product: a dense layer's matmul, or a quantized layer's (through its
    /// dequantized weights when `dense`) with its output rows shared among the CPU lanes (see
    /// [`LANES`]; the same values as in one piece: each output column is computed alone).
    fn product_on_lanes(&self, x: &Array, dense: bool) -> Result<Array> {
        let (weight, scales, biases, spec) = match self {
            Linear::Dense { weight } => return Ok(x.matmul(weight.transpose()?)?),
            Linear::Quantized {
                weight,
                scales,
                biases,
                spec,
            } => (weight, scales, biases, spec),
        };
        let product = |w: &Array, s: &Array, b: &Array| -> Result<Array> {
            Ok(if dense {
                x.matmul(dequantize(w, s, b, spec.group_size, spec.bits)?.transpose()?)?
            } else {
                quantized_matmul(x, w, s, b, true, spec.group_size, spec.bits)?
            })
        };
        LANES.with(|lanes| {
            let out = weight.shape()[0];
            let parts = lanes.len() as i32 + 1;
            if parts == 1 || out < parts * MIN_ROWS_PER_LANE {
                return product(weight, scales, biases);
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
                    n => with_stream(&lanes[n - 1], || product(&w, &s, &b))?,
                });
            }
            Ok(concatenate(&outputs, -1)?)
        })
    }
}

/// Output rows below which a layer is not worth sharing among lanes.
const MIN_ROWS_PER_LANE: i32 = 256;

thread_local! {
    /// On MLX's CPU backend, extra streams of the CPU device: MLX runs each stream's operations
    /// on a thread of its own, and its CPU quantized matmul (and dequantize) use one thread, so a
    /// layer's output rows split among the calling thread's default stream and these run on as
    /// many cores ([`cpu_lanes`] in all). None on a GPU, where one stream fills the device.
    static LANES: Vec<Stream> = (1..cpu_lanes())
        .map(|_| Stream::new_with_device(&Device::cpu()))
        .collect();
}

static CPU_LANES: OnceLock<usize> = OnceLock::new();

/// Sets, for this process, how many lanes (≥ 1) a quantized layer's rows are shared among on
/// MLX's CPU backend, in place of [`cpu_lanes`]' default; before the first forward pass. For
/// benchmarks; only the first call counts (false after it).
pub fn set_cpu_lanes(lanes: usize) -> bool {
    CPU_LANES.set(lanes.max(1)).is_ok()
}

/// Lanes a quantized layer's output rows are shared among: on MLX's CPU backend one per core,
/// at most 4; 1 (no sharing) on a GPU.
pub fn cpu_lanes() -> usize {
    if let Some(lanes) = CPU_LANES.get() {
        return *lanes;
    }
    match mlx_sys::FLAVOR {
        "cpu" => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
        _ => 1,
    }
}

/// Input rows of `x` (`[..., in]`): the product of its leading dimensions.
fn rows(x: &Array) -> usize {
    let shape = x.shape();
    shape[..shape.len().saturating_sub(1)]
        .iter()
        .map(|&d| d.max(0) as usize)
        .product()
}

static DENSE_FROM: OnceLock<Option<usize>> = OnceLock::new();
static DENSE_BUCKET: OnceLock<Option<usize>> = OnceLock::new();

/// Sets, for this process, the row multiple the dense path pads its input to (`None`: no
/// padding, the default; see [`Linear::forward_dense_padded`]). For benchmarks; only the first
/// call counts (false after it).
pub fn set_dense_bucket(rows: Option<usize>) -> bool {
    DENSE_BUCKET.set(rows.filter(|&r| r > 1)).is_ok()
}

/// The row multiple the dense path pads its input to, if any.
pub fn dense_bucket() -> Option<usize> {
    DENSE_BUCKET.get().copied().flatten()
}

/// Sets, for this process, the input row count from which quantized layers run as dequantize +
/// dense matmul (`None`: never), in place of the measured default of [`dense_from`]. For
/// benchmarks comparing the two kernels; only the first call counts (false after it).
pub fn set_dense_from(rows: Option<usize>) -> bool {
    DENSE_FROM.set(rows).is_ok()
}

/// The input row count from which a quantized layer of activations in `dtype` is faster as
/// dequantize + dense matmul than as MLX's quantized matmul, on this MLX build (measured, MLX
/// 0.32.2, E4B layer shapes). The CPU's quantized matmul runs on one thread and accumulates in
/// the activation dtype: a 38-row 2560 → 2048 layer takes 1.94 s in bf16 (9.0 s in f16) against
/// 135 ms (233 ms) dequantized, with a 24× smaller error; one bf16 row is a little faster
/// quantized (62 against 71 ms); in float32 the two are level from ~38 rows and the quantized
/// one is faster below. On CUDA (H200, full-size E4B) MLX takes its sm80 quantized GEMM for
/// group size 64, whose 64-row tile makes 38 rows cost what 64 do: dequantized, a 512-token
/// prefill takes 19–21 ms against 34–35 and a 38-token one 15–18 against 20–21, but each new row
/// count's first dense prefill pays ~20 ms of one-time work, so a chat's follow-up (each turn a
/// new count, usually short) got slower (first follow-up 46–69 ms against 33–41); from 128 rows
/// the gain outweighs it (follow-up unchanged, 512 tokens and images faster). Metal's quantized
/// kernels are MLX's tuned path: unchanged there.
pub fn dense_from(dtype: Dtype) -> Option<usize> {
    if let Some(rows) = DENSE_FROM.get() {
        return *rows;
    }
    match (mlx_sys::FLAVOR, dtype) {
        ("cpu", Dtype::Bfloat16) => Some(2),
        ("cpu", Dtype::Float16) => Some(1),
        (cuda, _) if cuda.starts_with("cuda") => Some(128),
        _ => None,
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
        // Quantized whatever the rows: the dense table would be vocab × dim (1.3 GB for E4B).
        self.table.forward_as_stored(x)
    }
}
