//! Backend tuning: which kernels and how much parallelism the model uses on this MLX build.
//! A value passed in through [`LoadOptions`](crate::LoadOptions), so that one process can run
//! two models tuned differently; [`Tuning::for_backend`] is the one place defaults are chosen.

use mlx_rs::Dtype;

/// How the model is tuned for the backend it runs on. The defaults come from
/// [`Tuning::for_backend`]; the measurements behind them are in `bench/results.md`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuning {
    /// How a decode step composes attention where MLX has no fused kernel for the head size.
    pub decode_attention: DecodeAttention,
    /// Lanes (≥ 1) a quantized layer's output rows are shared among on MLX's CPU backend: MLX
    /// runs each stream on a thread of its own and its CPU quantized matmul uses one thread.
    pub cpu_lanes: usize,
    /// Input rows from which a quantized layer runs as dequantize + dense matmul, per dtype.
    pub dense_from: DenseFrom,
    /// Row multiple the dense path pads its input to (`None` or ≤ 1: no padding), so that
    /// prefills of different lengths share the dense matmul's shapes.
    pub dense_bucket: Option<usize>,
    /// Head sizes for which this MLX build runs one query's attention as a fused kernel.
    pub fused_single_query_head_dims: &'static [i32],
    /// Tokens of the warm-up's first message after a load (0: a one-word message), so that the
    /// first follow-ups over a long history find the backend's kernels loaded.
    pub warm_up_history: usize,
    /// Input rows up to which a quantized layer multiplies each row as a vector of its own (a
    /// batch of matrix-vector products) instead of through the tiled quantized GEMM: a
    /// speculative verify's few rows then cost about what one decode step's row costs where
    /// the GEMM tiles many rows (CUDA: 64). 0 or 1: off.
    pub vector_rows: usize,
    /// Drafts accepted per round below which speculative decoding costs more than it saves on
    /// this backend: a round costs a draft block and a verify of several rows, plain decoding
    /// one step per token, so the break-even is `round time / step time − 1` accepted drafts
    /// (docs/SPECULATIVE.md). Measured on CUDA and the CPU; estimated for Metal.
    pub min_drafts_accepted: f32,
    /// Whether decode rows of several sequences step over buffers shared by the rows (one
    /// cache write and one attention per layer for all rows, `rows.rs`) rather than each over
    /// its own caches (a write and an attention per row and layer). On by default; off for
    /// A/B measurements.
    pub batched_rows: bool,
    /// Decode rows of several sequences (`[n, 1, in]`, n ≥ 2) are multiplied by a quantized
    /// layer as one matrix of at least this many rows, padded with zero rows (0: off, each
    /// row a vector of its own, the kernel a lone step uses). Off everywhere: on MLX-CUDA
    /// 0.32.2 (H100) a padded matrix of 8 runs the tiled kernel at ~46 µs a product in the
    /// model, ~3.5× a lone row's matrix-vector product, while n rows as vectors cost ~1.7×
    /// (2 rows) to ~3.1× (4 rows) one; end to end 4 streams decoded 293 against 244 tok/s
    /// (bench/results.md, 2026-12-06). The matrix kernel also rounds differently, so a row's
    /// bf16 logits would differ from its lone ones in the last bits.
    pub matrix_rows: usize,
    /// Whether decode steps run as one MLX compiled function per shape (rows × buffer
    /// capacities), replayed step after step over the rows' buffers (`compiled.rs`), rather
    /// than as a graph built anew each step. A lone answer then steps as a row of one. Needs
    /// `batched_rows`; caches stored quantized step eagerly. Off by default: on MLX-CUDA
    /// 0.32.2 (H100) a replayed step cost what an eager one does (build 1.09 vs 1.06 ms,
    /// dispatch 5.2 vs 4.9 ms per token) plus ~15–25 ms per new shape, and on the CPU decode
    /// ran at 0.98× (bench/results.md, 2026-12-06); unmeasured on Metal.
    pub compiled_decode: bool,
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
            // MLX-CUDA 0.32.2 multiplies the grouped rows with cuBLAS (~11 µs of host time a
            // call) and one query head per row with its own matrix-vector kernel: one decode
            // attention ~25 → ~19 µs on an H100 (bench/cuda/attention_variants.py, measured in
            // one process). The CPU is faster with the grouped rows; Metal is unmeasured.
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
            dense_bucket: None,
            // MLX 0.32.2: Metal's vector kernel takes these sizes, CUDA's only 64 to 128.
            fused_single_query_head_dims: match flavor {
                "metal" => &[64, 96, 128, 256],
                _ if cuda => &[64, 96, 128],
                _ => &[],
            },
            // GPU GEMM libraries load kernels per shape class on first use; the CPU has none
            // to load, and prefilling 2k tokens there would take minutes.
            warm_up_history: match flavor {
                "cpu" => 0,
                _ => 2048,
            },
            vector_rows: 0,
            // H200: a round of 4 rows costs ~3.2 pipelined steps (host-bound dispatch), so rounds
            // pay from ~2.2 accepted drafts; the CPU ~2.4. Metal, unmeasured: between ~0.3 (a
            // step is bound by reading the weights, which a verify reads once for all its rows)
            // and ~1.5 (mlx-vlm's round cost measured on a MacBook Pro, its issue #1121): 1.0
            // until measured on a Mac (docs/SPECULATIVE.md, bench/results.md).
            min_drafts_accepted: match flavor {
                "metal" => 1.0,
                _ if cuda => 2.2,
                _ => 2.4,
            },
            batched_rows: true,
            matrix_rows: 0,
            compiled_decode: false,
        }
    }

    /// Whether MLX runs attention for one query of head size `head_dim` as a fused kernel.
    /// Where it has none, MLX composes it generically and the model composes the same math in
    /// fewer primitives (see [`DecodeAttention`]), which is what a decode step is bound by.
    pub fn fused_single_query(&self, head_dim: i32) -> bool {
        self.fused_single_query_head_dims.contains(&head_dim)
    }

    /// Whether decode steps run compiled over the rows' buffers, a lone answer's too
    /// (`compiled_decode` needs `batched_rows`).
    pub fn compiled_steps(&self) -> bool {
        self.compiled_decode && self.batched_rows
    }

    /// The row multiple the dense path pads to, if padding applies.
    pub fn dense_bucket(&self) -> Option<usize> {
        self.dense_bucket.filter(|&rows| rows > 1)
    }
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
