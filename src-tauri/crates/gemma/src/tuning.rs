//! Backend tuning: which kernels and how much parallelism the model uses on this MLX build.
//! A value passed in through [`LoadOptions`](crate::LoadOptions), so that one process can run
//! two models tuned differently; [`Tuning::for_backend`] is the one place defaults are chosen.

use mlx_rs::Dtype;

/// How the model is tuned for the backend it runs on. The defaults come from
/// [`Tuning::for_backend`]; the measurements behind them are in `bench/results.md`. Each block
/// keeps its share from load time ([`LinearKernels`], the attention's kernel choices).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuning {
    /// How a decode step composes attention where MLX has no fused kernel for the head size.
    pub decode_attention: DecodeAttention,
    /// Lanes (≥ 1) a quantized layer's output rows are shared among on MLX's CPU backend: MLX
    /// runs each stream on a thread of its own and its CPU quantized matmul uses one thread.
    pub cpu_lanes: usize,
    /// Input rows from which a quantized layer runs as dequantize + dense matmul, per dtype.
    pub dense_from: DenseFrom,
    /// Head sizes for which this MLX build runs one query's attention as a fused kernel.
    pub fused_single_query_head_dims: &'static [i32],
    /// Whether decode rows of several sequences step over a batch's shared buffers (one cache
    /// write and one attention per layer for all rows) rather than each over its own caches:
    /// the per-row kernels are what a GPU's decode step is bound by. Off only for A/B runs.
    pub batched_rows: bool,
}

impl Tuning {
    /// The defaults for the MLX build this crate is linked against (`mlx_sys::FLAVOR`).
    pub fn for_backend() -> Self {
        Self::for_flavor(mlx_sys::FLAVOR)
    }

    /// The defaults for an MLX build of `flavor` (`"cpu"`, `"metal"`, `"cuda…"`).
    pub fn for_flavor(flavor: &str) -> Self {
        let cuda = flavor.starts_with("cuda");
        Self {
            // On CUDA one query head per row as its own matrix-vector product saves a cuBLAS
            // call's host time; the CPU is faster with the grouped rows.
            decode_attention: if cuda {
                DecodeAttention::HeadScores
            } else {
                DecodeAttention::GroupedRows
            },
            // One lane per core, at most 4, on the CPU; a GPU is filled by one stream.
            cpu_lanes: match flavor {
                "cpu" => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
                _ => 1,
            },
            // The CPU's quantized matmul is single-threaded and accumulates in the activation
            // dtype; CUDA's quantized GEMM tiles 64 rows; Metal's quantized kernels are tuned.
            dense_from: match flavor {
                "cpu" => DenseFrom {
                    float32: None,
                    float16: Some(1),
                    bfloat16: Some(2),
                },
                _ if cuda => DenseFrom::all(Some(128)),
                _ => DenseFrom::all(None),
            },
            // The head sizes MLX's vector attention kernel takes on each backend.
            fused_single_query_head_dims: match flavor {
                "metal" => &[64, 96, 128, 256],
                _ if cuda => &[64, 96, 128],
                _ => &[],
            },
            batched_rows: true,
        }
    }

    /// Whether MLX runs attention for one query of head size `head_dim` as a fused kernel.
    /// Where it has none, MLX composes it generically and the model composes the same math in
    /// fewer primitives (see [`DecodeAttention`]), which is what a decode step is bound by.
    pub fn fused_single_query(&self, head_dim: i32) -> bool {
        self.fused_single_query_head_dims.contains(&head_dim)
    }

    /// A quantized layer's share: which kernel by rows and dtype, and its CPU lanes.
    pub fn linear(&self) -> LinearKernels {
        LinearKernels {
            dense_from: self.dense_from,
            cpu_lanes: self.cpu_lanes,
        }
    }
}

/// What a quantized layer keeps of [`Tuning`] from load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearKernels {
    /// See [`Tuning::dense_from`].
    pub dense_from: DenseFrom,
    /// See [`Tuning::cpu_lanes`].
    pub cpu_lanes: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self::for_backend()
    }
}

/// Per activation dtype, the input rows from which a quantized layer is faster as dequantize +
/// dense matmul than as MLX's quantized matmul (`None`: never). Measured per backend: "Why the
/// defaults" in `bench/results.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseFrom {
    /// For float32 activations.
    pub float32: Option<usize>,
    /// For float16 activations.
    pub float16: Option<usize>,
    /// For bfloat16 activations.
    pub bfloat16: Option<usize>,
}

impl DenseFrom {
    /// The same threshold for every dtype.
    pub fn all(rows: Option<usize>) -> Self {
        Self {
            float32: rows,
            float16: rows,
            bfloat16: rows,
        }
    }

    /// The threshold for activations in `dtype`.
    pub fn rows(&self, dtype: Dtype) -> Option<usize> {
        match dtype {
            Dtype::Float32 => self.float32,
            Dtype::Float16 => self.float16,
            Dtype::Bfloat16 => self.bfloat16,
            _ => None,
        }
    }
}

/// How a decode step composes attention where MLX has no fused kernel for the head size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeAttention {
    /// The `heads / kv_heads` query heads of a K/V head are the rows of one matrix, for both
    /// products: no head is broadcast and the result is already in head order (on CUDA both
    /// products are cuBLAS GEMMs of that many rows).
    GroupedRows,
    /// Scores one query head per row against its K/V head, broadcast over the group (not
    /// copied): MLX's batched GEMV kernel on CUDA, in place of a cuBLAS call. The values are
    /// weighted as in `GroupedRows` (as a matrix-vector product they would need V stored
    /// transposed: MLX's GEMV takes a vector times a matrix only with the matrix's rows
    /// contiguous along the product). The default on CUDA.
    HeadScores,
}
