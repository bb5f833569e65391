//! Reading a checkpoint's tensors: shard discovery, strict header validation, and a store that
//! hands tensors to modules and then reports every missing and every unexpected name at once.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use mlx_rs::ops::zeros_dtype;
use mlx_rs::{Array, Dtype};

use crate::config::Quantization;
use crate::error::{Error, Result};
use crate::tuning::Tuning;

/// Name, dtype and shape of one tensor as its file header declares it.
#[derive(Debug, Clone)]
pub struct TensorHeader {
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub file: PathBuf,
    /// Where the tensor's data starts in `file`, in bytes from the file's start.
    pub offset: u64,
}

/// The safetensors files of a model folder: from `model.safetensors.index.json` (which may list
/// sidecars such as `optiq_vision.safetensors`) or else every `model*.safetensors`.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|source| Error::Io {
            path: index.clone(),
            source,
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Config {
            path: index.clone(),
            message: e.to_string(),
        })?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::Config {
                path: index.clone(),
                message: "weight_map is missing".into(),
            })?;
        let mut files = BTreeSet::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| Error::Config {
                path: index.clone(),
                message: format!("weight_map entry {tensor} is {file}, not a file name"),
            })?;
            files.insert(file);
        }
        let mut paths = Vec::new();
        for file in files {
            if file.contains("..") || Path::new(file).is_absolute() {
                return Err(Error::Config {
                    path: index.clone(),
                    message: format!("weight file \"{file}\" is outside the model folder"),
                });
            }
            let path = dir.join(file);
            if !path.is_file() {
                return Err(Error::Config {
                    path: index.clone(),
                    message: format!("lists {file}, which does not exist"),
                });
            }
            paths.push(path);
        }
        return Ok(paths);
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("model") && name.ends_with(".safetensors")
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(Error::Unsupported(format!(
            "{} holds no model*.safetensors files",
            dir.display()
        )));
    }
    Ok(paths)
}

/// Longest header accepted: real checkpoints use well under 1 MB even for thousands of tensors.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Reads and validates one file's header without touching its tensor data: every entry must
/// parse, offsets must be contiguous from 0, sizes must match dtype × shape, and the data must
/// end exactly at the file's end. Every problem names the tensor it is about.
pub fn read_header(path: &Path) -> Result<BTreeMap<String, TensorHeader>> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(Error::Safetensors {
            path: path.to_path_buf(),
            message: "is not a file".into(),
        });
    }
    let file_len = meta.len();
    let too_short = || Error::Safetensors {
        path: path.to_path_buf(),
        message: format!("file is too short to be safetensors ({file_len} bytes; truncated?)"),
    };
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes).map_err(|_| too_short())?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES || header_len > file_len - 8 {
        return Err(Error::Safetensors {
            path: path.to_path_buf(),
            message: format!(
                "header length {header_len} does not fit a {file_len}-byte file (truncated or not safetensors)"
            ),
        });
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io)?;
    parse_header_entries(&header, file_len - 8 - header_len)
        .map(|tensors| {
            tensors
                .into_iter()
                .map(|(name, (dtype, shape, start))| {
                    let file = path.to_path_buf();
                    let offset = 8 + header_len + start;
                    let header = TensorHeader {
                        dtype,
                        shape,
                        file,
                        offset,
                    };
                    (name, header)
                })
                .collect()
        })
        .map_err(|message| Error::Safetensors {
            path: path.to_path_buf(),
            message,
        })
}

/// Name → (dtype, shape) of a safetensors header (the JSON after the length prefix), checked
/// against `data_len`, the bytes that follow it. Errors are messages in words.
pub fn parse_header(
    header: &[u8],
    data_len: u64,
) -> std::result::Result<BTreeMap<String, (safetensors::Dtype, Vec<usize>)>, String> {
    parse_header_entries(header, data_len).map(|tensors| {
        tensors
            .into_iter()
            .map(|(name, (dtype, shape, _))| (name, (dtype, shape)))
            .collect()
    })
}

/// [`parse_header`] with each tensor's start within the data.
type Entries = BTreeMap<String, (safetensors::Dtype, Vec<usize>, u64)>;

fn parse_header_entries(header: &[u8], data_len: u64) -> std::result::Result<Entries, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        dtype: safetensors::Dtype,
        shape: Vec<usize>,
        data_offsets: (u64, u64),
    }
    let entries: HeaderEntries = serde_json::from_slice(header)
        .map_err(|e| format!("the header is not a safetensors JSON header: {e}"))?;
    let mut tensors = BTreeMap::new();
    let mut spans = Vec::new();
    for (name, value) in entries.0 {
        if name == "__metadata__" {
            continue;
        }
        if tensors.contains_key(&name) {
            return Err(format!("tensor {name} is listed twice"));
        }
        let entry: Entry =
            serde_json::from_value(value).map_err(|e| format!("tensor {name}: {e}"))?;
        if !loadable(entry.dtype) {
            return Err(format!(
                "tensor {name}: dtype {:?} is not supported (only float32/16, bfloat16 and integers)",
                entry.dtype
            ));
        }
        let (start, end) = entry.data_offsets;
        let bytes = entry
            .shape
            .iter()
            .try_fold(entry.dtype.bitsize() as u64, |n, &d| n.checked_mul(d as u64))
            .filter(|bits| bits % 8 == 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| {
                format!(
                    "tensor {name}: shape {:?} of {:?} is not a whole number of bytes that fits in memory",
                    entry.shape, entry.dtype
                )
            })?;
        if end < start || end - start != bytes {
            return Err(format!(
                "tensor {name}: shape {:?} of {:?} needs {bytes} bytes, but its offsets [{start}, {end}] span {}",
                entry.shape,
                entry.dtype,
                end.saturating_sub(start)
            ));
        }
        spans.push((start, end, name.clone()));
        tensors.insert(name, (entry.dtype, entry.shape, start));
    }
    spans.sort();
    let mut expected = 0;
    for (start, end, name) in &spans {
        if *start != expected {
            let what = if *start < expected {
                "overlaps"
            } else {
                "leaves a gap before"
            };
            return Err(format!(
                "tensor {name} starts at byte {start} of the data, which {what} the previous tensor (ending at {expected})"
            ));
        }
        expected = *end;
    }
    if expected != data_len {
        return Err(format!(
            "header describes {expected} bytes of tensor data but the file holds {data_len} (truncated or corrupt)"
        ));
    }
    Ok(tensors)
}

/// Dtypes MLX reads from safetensors; anything else (F64, 8-bit and smaller floats) is refused
/// here with the tensor's name rather than by MLX with a C++ source location.
fn loadable(dtype: safetensors::Dtype) -> bool {
    use safetensors::Dtype as D;
    matches!(
        dtype,
        D::BOOL
            | D::U8
            | D::I8
            | D::U16
            | D::I16
            | D::U32
            | D::I32
            | D::U64
            | D::I64
            | D::F16
            | D::BF16
            | D::F32
    )
}

/// The top-level entries of a header in file order, duplicates kept (a JSON map would silently
/// keep only the last, while MLX's own reader might keep another).
struct HeaderEntries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for HeaderEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = HeaderEntries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<HeaderEntries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(HeaderEntries(entries))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// All tensors of a checkpoint, handed out by name through [`Weights`]; what nobody takes is
/// reported as unexpected.
pub struct WeightStore {
    headers: BTreeMap<String, TensorHeader>,
    arrays: HashMap<String, Array>,
    record: RefCell<Record>,
}

/// What loading found: names taken, and every problem, in the order modules met them.
#[derive(Default)]
struct Record {
    taken: BTreeSet<String>,
    missing: Vec<String>,
    problems: Vec<String>,
}

impl WeightStore {
    /// Opens every file of the checkpoint. MLX reads each tensor's bytes from its file once,
    /// lazily, into the array that the model keeps: no intermediate host copy.
    pub fn open(dir: &Path) -> Result<Self> {
        let mut headers = BTreeMap::new();
        let mut arrays = HashMap::new();
        for path in checkpoint_files(dir)? {
            let file_headers = read_header(&path)?;
            let loaded = Array::load_safetensors(&path).map_err(|e| Error::Safetensors {
                path: path.clone(),
                message: e.to_string(),
            })?;
            for (name, header) in file_headers {
                if let Some(previous) = headers.get(&name) {
                    let TensorHeader { file, .. } = previous;
                    return Err(Error::Tensors(format!(
                        "{name} appears in both {} and {}",
                        file.display(),
                        path.display()
                    )));
                }
                if let Some(array) = loaded.get(&name) {
                    arrays.insert(name.clone(), array.clone());
                }
                headers.insert(name, header);
            }
        }
        Ok(Self {
            headers,
            arrays,
            record: RefCell::default(),
        })
    }

    /// The first tensor stored quantized (packed words, or a module's `scales`), if any.
    pub fn first_quantized(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(name, h)| h.dtype == safetensors::Dtype::U32 || name.ends_with(".scales"))
            .map(|(name, _)| name.as_str())
    }

    /// Elements of every tensor in the checkpoint.
    pub fn parameter_count(&self) -> usize {
        self.headers
            .values()
            .map(|h| h.shape.iter().product::<usize>())
            .sum()
    }

    /// Declared dtype of `name`, if present.
    pub fn header_dtype(&self, name: &str) -> Option<safetensors::Dtype> {
        self.headers.get(name).map(|h| h.dtype)
    }

    /// Marks tensors as knowingly unused (e.g. audio tower, K/V of shared layers).
    pub fn ignore_where(&mut self, unused: impl Fn(&str) -> bool) {
        let names: Vec<String> = self.headers.keys().filter(|n| unused(n)).cloned().collect();
        let taken = &mut self.record.get_mut().taken;
        for name in names {
            self.arrays.remove(&name);
            taken.insert(name);
        }
    }

    /// The root of the checkpoint's names, handing out weights in `dtype` and quantized as
    /// `quantization` says, for blocks tuned as `tuning` (each keeps its share).
    pub fn root<'a>(
        &'a self,
        quantization: &'a Quantization,
        dtype: Dtype,
        tuning: Tuning,
    ) -> Weights<'a> {
        Weights {
            store: self,
            quantization,
            dtype,
            tuning,
            prefix: String::new(),
            stored: false,
        }
    }

    /// Ends loading: one error listing every missing, unexpected and misshapen tensor.
    pub fn finish(self) -> Result<()> {
        let Record {
            taken,
            missing,
            problems,
        } = self.record.into_inner();
        let unexpected: Vec<String> = self
            .headers
            .keys()
            .filter(|n| !taken.contains(*n))
            .cloned()
            .collect();
        if missing.is_empty() && unexpected.is_empty() && problems.is_empty() {
            return Ok(());
        }
        let mut report = String::new();
        let mut section = |title: &str, items: Vec<String>| {
            if !items.is_empty() {
                report.push_str(&format!("{title} ({}):\n", items.len()));
                for item in items {
                    report.push_str(&format!("  {item}\n"));
                }
            }
        };
        section("missing tensors", missing);
        section("unexpected tensors", unexpected);
        section("wrong tensors", problems);
        Err(Error::Tensors(report.trim_end().to_string()))
    }
}

/// The store seen from one module's path (`language_model.model.layers.3`), as the checkpoint
/// names it. A tensor that is missing or wrong is recorded and stands in as zeros of the
/// expected shape, so that loading goes on and [`WeightStore::finish`] reports every problem.
#[derive(Clone)]
pub struct Weights<'a> {
    store: &'a WeightStore,
    quantization: &'a Quantization,
    dtype: Dtype,
    tuning: Tuning,
    prefix: String,
    /// [`Self::float`] leaves tensors in their stored dtype (see [`Self::as_stored`]).
    stored: bool,
}

impl<'a> Weights<'a> {
    /// The sub-module `name` (dots allowed: `self_attn.q_proj`).
    pub fn at(&self, name: &str) -> Weights<'a> {
        Weights {
            prefix: self.name(name),
            ..self.clone()
        }
    }

    /// The full checkpoint name of `leaf` under this path.
    pub fn name(&self, leaf: &str) -> String {
        if self.prefix.is_empty() {
            leaf.to_string()
        } else {
            format!("{}.{leaf}", self.prefix)
        }
    }

    /// This module's full path.
    pub fn path(&self) -> &str {
        &self.prefix
    }

    /// The compute dtype weights are cast to.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The tuning the blocks loaded from here keep their share of.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The checkpoint's quantization config.
    pub fn quantization(&self) -> &'a Quantization {
        self.quantization
    }

    /// True when the checkpoint holds `leaf`.
    pub fn contains(&self, leaf: &str) -> bool {
        self.store.headers.contains_key(&self.name(leaf))
    }

    /// Declared shape of `leaf`, if present.
    pub fn shape(&self, leaf: &str) -> Option<&'a [usize]> {
        let store: &'a WeightStore = self.store;
        store
            .headers
            .get(&self.name(leaf))
            .map(|h| h.shape.as_slice())
    }

    /// Where `leaf` lies in its file (for a table read a row at a time, `ple.rs`).
    pub fn located(&self, leaf: &str) -> Option<&'a TensorHeader> {
        let store: &'a WeightStore = self.store;
        store.headers.get(&self.name(leaf))
    }

    /// Records a problem found by a module (e.g. inconsistent quantization).
    pub fn problem(&self, message: String) {
        self.store.record.borrow_mut().problems.push(message);
    }

    /// Takes `leaf`, checking its shape and dtype class, as stored; a missing or wrong tensor
    /// is recorded and replaced by zeros of `shape` (the compute dtype for floats).
    pub fn take(&self, leaf: &str, shape: &[usize], kind: DtypeClass) -> Result<Array> {
        let name = self.name(leaf);
        match self.checked(&name, shape, kind) {
            Some(array) => Ok(array),
            None => self.placeholder(shape, kind),
        }
    }

    /// Takes a float tensor and casts it to the compute dtype (see [`Self::take`]), or leaves
    /// it as stored under [`Self::as_stored`].
    pub fn float(&self, leaf: &str, shape: &[usize]) -> Result<Array> {
        let array = self.take(leaf, shape, DtypeClass::Float)?;
        if self.stored {
            Ok(array)
        } else {
            to_dtype(array, self.dtype)
        }
    }

    /// This path with float tensors handed out in their stored dtype (the audio tower computes
    /// in float32 from its weights as stored, as the reference does).
    pub fn as_stored(&self) -> Weights<'a> {
        Weights {
            stored: true,
            ..self.clone()
        }
    }

    /// Zeros standing in for a tensor that could not be taken.
    pub fn placeholder(&self, shape: &[usize], kind: DtypeClass) -> Result<Array> {
        let dtype = match kind {
            DtypeClass::U32 => Dtype::Uint32,
            DtypeClass::Int => Dtype::Int32,
            DtypeClass::Float => self.dtype,
        };
        let shape: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
        Ok(zeros_dtype(&shape, dtype)?)
    }

    fn checked(&self, name: &str, shape: &[usize], kind: DtypeClass) -> Option<Array> {
        let mut record = self.store.record.borrow_mut();
        let Some(header) = self.store.headers.get(name) else {
            record.missing.push(name.to_string());
            return None;
        };
        record.taken.insert(name.to_string());
        if header.shape != shape {
            record.problems.push(format!(
                "{name}: shape {:?}, expected {:?}",
                header.shape, shape
            ));
            return None;
        }
        if !kind.accepts(header.dtype) {
            record.problems.push(format!(
                "{name}: dtype {:?}, expected {}",
                header.dtype,
                kind.describe()
            ));
            return None;
        }
        let array = self.store.arrays.get(name).cloned();
        if array.is_none() {
            record
                .problems
                .push(format!("{name}: listed in its file's header but not read"));
        }
        array
    }
}

/// What dtypes a tensor may have.
#[derive(Debug, Clone, Copy)]
pub enum DtypeClass {
    /// Packed quantized weights.
    U32,
    /// Floating-point weights, scales and biases.
    Float,
    /// Integer buffers (a drafter's token ordering).
    Int,
}

impl DtypeClass {
    fn accepts(self, dtype: safetensors::Dtype) -> bool {
        use safetensors::Dtype as D;
        match self {
            DtypeClass::U32 => dtype == D::U32,
            DtypeClass::Float => matches!(dtype, D::BF16 | D::F16 | D::F32),
            DtypeClass::Int => matches!(dtype, D::I64 | D::I32),
        }
    }
    fn describe(self) -> &'static str {
        match self {
            DtypeClass::U32 => "U32 (packed quantized weights)",
            DtypeClass::Float => "a float type (BF16, F16 or F32)",
            DtypeClass::Int => "an integer type (I64 or I32)",
        }
    }
}

/// Casts a float weight to the compute dtype (a no-op when equal).
pub fn to_dtype(array: Array, dtype: Dtype) -> Result<Array> {
    if array.dtype() == dtype {
        Ok(array)
    } else {
        Ok(array.as_dtype(dtype)?)
    }
}
