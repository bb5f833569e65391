//! The per-layer embedding table (PLE, `embed_tokens_per_layer`) read from the checkpoint file
//! a row at a time instead of held in MLX memory.
//!
//! E4B's table is logically `[262144, 10752]` (1.59 GB at 4 bits) and each token reads one row
//! of it (~6 KB: its packed words, scales and biases). The table therefore stays in the
//! safetensors file: each forward gathers the rows of its token ids with positioned reads
//! (`read_at`: no memory map, so a file that shrinks under the model is a short read, reported
//! in words, never a SIGBUS), makes MLX arrays of exactly those bytes and dequantizes them as
//! MLX's `QuantizedEmbedding` does after its own gather, so the values are the same bit for
//! bit. A table stored dense is gathered the same way and cast to the compute dtype.
//!
//! Before each gather the file is checked against what it was at load (length and
//! modification time, of the open handle and of the path): a checkpoint rewritten, truncated
//! or replaced under a loaded model is an error asking to reload it. See `docs/MODEL.md`
//! ("Where the per-layer rows come from").

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use mlx_rs::ops::dequantize;
use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};
use crate::quant::Embedding;
use crate::weights::{to_dtype, Weights};

/// The per-layer token table: in MLX memory, or read from the checkpoint file per forward.
pub struct PleTable {
    source: Source,
}

enum Source {
    Resident(Embedding),
    File(Box<FileRows>),
}

impl PleTable {
    /// Loads the table at `weights` (logical shape `[vocab, width]`): read from its file when
    /// `from_file`, else into MLX memory like any other weight. A table whose tensors are
    /// missing or wrong is loaded the resident way, which records the problems in the store.
    pub fn load(
        weights: &Weights<'_>,
        vocab: usize,
        width: usize,
        from_file: bool,
    ) -> Result<Self> {
        // Lazy arrays: nothing is read from the file unless they are evaluated (which the
        // file-backed table never does; they are dropped below).
        let resident = Embedding::load(weights, vocab, width)?;
        if !from_file {
            return Ok(Self {
                source: Source::Resident(resident),
            });
        }
        match FileRows::locate(weights, vocab, width)? {
            Some(rows) => Ok(Self {
                source: Source::File(Box::new(rows)),
            }),
            None => Ok(Self {
                source: Source::Resident(resident),
            }),
        }
    }

    /// Rows of `ids` (any shape of integer ids) → `[..., width]` in the compute dtype.
    /// From the file, `ids` are read back to the host first (a device-resident id waits for
    /// the computation that makes it).
    pub fn lookup(&self, ids: &Array) -> Result<Array> {
        match &self.source {
            Source::Resident(table) => table.lookup(ids),
            Source::File(rows) => rows.lookup(ids),
        }
    }

    /// The arrays held in MLX memory (none when read from the file).
    pub fn arrays(&self) -> Vec<&Array> {
        match &self.source {
            Source::Resident(table) => table.arrays(),
            Source::File(_) => Vec::new(),
        }
    }

    /// True when rows are read from the checkpoint file.
    pub fn from_file(&self) -> bool {
        matches!(self.source, Source::File(_))
    }

    /// Bytes of the table as stored in the checkpoint (packed words, scales and biases).
    pub fn stored_bytes(&self) -> u64 {
        match &self.source {
            Source::Resident(table) => table.arrays().iter().map(|a| a.nbytes() as u64).sum(),
            Source::File(rows) => rows.columns().map(|c| c.rows * c.row_bytes as u64).sum(),
        }
    }
}

/// A checkpoint file as it was when the model was loaded.
struct WatchedFile {
    path: PathBuf,
    file: File,
    stamp: Stamp,
}

#[derive(PartialEq, Eq, Debug, Clone, Copy)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

impl WatchedFile {
    fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let stamp = Stamp::of(&file.metadata().map_err(io)?);
        Ok(Self {
            path: path.to_path_buf(),
            file,
            stamp,
        })
    }

    /// The file is still what was loaded: the open handle's length and modification time (a
    /// rewrite or truncation in place) and the path's (a file put in its place) are unchanged.
    fn check(&self) -> Result<()> {
        let changed = |what: String| Error::Safetensors {
            path: self.path.clone(),
            message: format!(
                "the model file changed on disk after it was loaded ({what}); reload the model"
            ),
        };
        let open = self
            .file
            .metadata()
            .map_err(|e| changed(format!("it can no longer be inspected: {e}")))?;
        let at_path = std::fs::metadata(&self.path)
            .map_err(|e| changed(format!("it can no longer be found: {e}")))?;
        for (now, which) in [
            (Stamp::of(&open), "the open file"),
            (Stamp::of(&at_path), "the file at its path"),
        ] {
            if now.len != self.stamp.len {
                return Err(changed(format!(
                    "{which} is {} bytes, it was {}",
                    now.len, self.stamp.len
                )));
            }
            if now.modified != self.stamp.modified {
                return Err(changed(format!("{which} has a new modification time")));
            }
        }
        Ok(())
    }

    /// Fills `buf` from byte `offset` of the file.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
        }
        #[cfg(windows)]
        {
            let mut done = 0;
            while done < buf.len() {
                let n = std::os::windows::fs::FileExt::seek_read(
                    &self.file,
                    &mut buf[done..],
                    offset + done as u64,
                )?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                done += n;
            }
            Ok(())
        }
    }
}

/// One stored tensor of the table, `[rows, cols]` row-major from `offset` of its file.
struct Column {
    name: String,
    file: Arc<WatchedFile>,
    offset: u64,
    rows: u64,
    cols: usize,
    row_bytes: usize,
    dtype: Dtype,
}

impl Column {
    /// The rows `ids` (checked in range by the caller) as an array `[ids.len(), cols]`.
    fn gather(&self, ids: &[u32]) -> Result<Array> {
        let mut bytes = vec![0u8; ids.len() * self.row_bytes];
        for (row, &id) in bytes.chunks_exact_mut(self.row_bytes).zip(ids) {
            let at = self.offset + id as u64 * self.row_bytes as u64;
            self.file
                .read_exact_at(row, at)
                .map_err(|e| Error::Safetensors {
                    path: self.file.path.clone(),
                    message: format!(
                        "row {id} of {} (byte {at}) cannot be read: {e}; the file may have been \
                         truncated or changed on disk — reload the model",
                        self.name
                    ),
                })?;
        }
        let shape = [ids.len() as i32, self.cols as i32];
        Ok(match self.dtype {
            Dtype::Uint32 => {
                Array::from_slice(&words::<4, u32>(&bytes, u32::from_le_bytes), &shape)
            }
            Dtype::Bfloat16 => Array::from_slice(
                &words::<2, half::bf16>(&bytes, |b| half::bf16::from_bits(u16::from_le_bytes(b))),
                &shape,
            ),
            Dtype::Float16 => Array::from_slice(
                &words::<2, half::f16>(&bytes, |b| half::f16::from_bits(u16::from_le_bytes(b))),
                &shape,
            ),
            _ => Array::from_slice(&words::<4, f32>(&bytes, f32::from_le_bytes), &shape),
        })
    }
}

/// Little-endian elements of `bytes`.
fn words<const N: usize, T>(bytes: &[u8], from: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| from(c.try_into().expect("chunks_exact yields N bytes")))
        .collect()
}

/// The table read from its file.
struct FileRows {
    vocab: usize,
    width: usize,
    dtype: Dtype,
    layout: Layout,
    files: Vec<Arc<WatchedFile>>,
}

enum Layout {
    Quantized {
        weight: Column,
        scales: Column,
        biases: Column,
        group_size: i32,
        bits: i32,
    },
    Dense {
        weight: Column,
    },
}

impl FileRows {
    /// Where the table's tensors lie in the checkpoint, once [`Embedding::load`] has checked
    /// them; `None` when that recorded a problem (the table then loads the resident way, and
    /// the store reports the problem).
    fn locate(weights: &Weights<'_>, vocab: usize, width: usize) -> Result<Option<Self>> {
        let mut opened: HashMap<PathBuf, Arc<WatchedFile>> = HashMap::new();
        let mut column = |leaf: &str| -> Result<Option<Column>> {
            let Some(header) = weights.located(leaf) else {
                return Ok(None);
            };
            let dtype = match header.dtype {
                safetensors::Dtype::U32 => Dtype::Uint32,
                safetensors::Dtype::BF16 => Dtype::Bfloat16,
                safetensors::Dtype::F16 => Dtype::Float16,
                safetensors::Dtype::F32 => Dtype::Float32,
                _ => return Ok(None),
            };
            let [rows, cols] = header.shape[..] else {
                return Ok(None);
            };
            if rows != vocab {
                return Ok(None);
            }
            let file = match opened.get(&header.file) {
                Some(file) => file.clone(),
                None => {
                    let file = Arc::new(WatchedFile::open(&header.file)?);
                    opened.insert(header.file.clone(), file.clone());
                    file
                }
            };
            Ok(Some(Column {
                name: weights.name(leaf),
                file,
                offset: header.offset,
                rows: rows as u64,
                cols,
                row_bytes: cols * header.dtype.bitsize() / 8,
                dtype,
            }))
        };
        let layout = if weights.contains("scales") {
            let (Some(weight), Some(scales), Some(biases)) =
                (column("weight")?, column("scales")?, column("biases")?)
            else {
                return Ok(None);
            };
            if weight.dtype != Dtype::Uint32
                || scales.cols == 0
                || scales.cols != biases.cols
                || !width.is_multiple_of(scales.cols)
                || !(weight.cols * 32).is_multiple_of(width)
            {
                return Ok(None);
            }
            let group_size = (width / scales.cols) as i32;
            let bits = (weight.cols * 32 / width) as i32;
            // What `Embedding::load` used (the config's entry for this module when it has one).
            if let Some(spec) = weights.quantization().for_module(weights.path()) {
                if (spec.bits, spec.group_size) != (bits, group_size) {
                    return Ok(None);
                }
            }
            Layout::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            }
        } else {
            match column("weight")? {
                Some(weight) if weight.dtype != Dtype::Uint32 && weight.cols == width => {
                    Layout::Dense { weight }
                }
                _ => return Ok(None),
            }
        };
        Ok(Some(Self {
            vocab,
            width,
            dtype: weights.dtype(),
            layout,
            files: opened.into_values().collect(),
        }))
    }

    fn columns(&self) -> impl Iterator<Item = &Column> {
        let columns: Vec<&Column> = match &self.layout {
            Layout::Quantized {
                weight,
                scales,
                biases,
                ..
            } => vec![weight, scales, biases],
            Layout::Dense { weight } => vec![weight],
        };
        columns.into_iter()
    }

    fn lookup(&self, ids: &Array) -> Result<Array> {
        let host = ids.as_dtype(Dtype::Int64)?.contiguous()?;
        let host: &[i64] = host
            .try_as_slice()
            .map_err(|e| Error::Input(format!("the token ids cannot be read back: {e}")))?;
        if let Some(&bad) = host.iter().find(|&&id| id < 0 || id >= self.vocab as i64) {
            return Err(Error::Input(format!(
                "token id {bad} has no row in the per-layer embedding table ({} rows)",
                self.vocab
            )));
        }
        let host: Vec<u32> = host.iter().map(|&id| id as u32).collect();
        let host = host.as_slice();
        for file in &self.files {
            file.check()?;
        }
        let rows = match &self.layout {
            Layout::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => {
                let w = weight.gather(host)?;
                let s = to_dtype(scales.gather(host)?, self.dtype)?;
                let b = to_dtype(biases.gather(host)?, self.dtype)?;
                dequantize(&w, &s, &b, *group_size, *bits)?
            }
            Layout::Dense { weight } => to_dtype(weight.gather(host)?, self.dtype)?,
        };
        let mut shape = ids.shape().to_vec();
        shape.push(self.width as i32);
        Ok(rows.reshape(&shape)?)
    }
}
