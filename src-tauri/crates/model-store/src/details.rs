//! What a checkpoint is, read from its files without loading it: parameter count (from the
//! safetensors headers), context limit, quantization, and which towers it carries.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

/// The header of a safetensors file is at most this long (the real E4B's are ~100 KB); a
/// longer one is not read, so a damaged file cannot make us allocate without bound.
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Group size of mlx quantization when the config does not say.
const DEFAULT_GROUP_SIZE: u64 = 64;

/// The parameters stored in `files`: quantized weights counted unpacked (as the float matrix
/// they stand for), their scales and biases not counted. `None` when a header cannot be read.
pub(crate) fn parameter_count(files: &[impl AsRef<Path>], config: &Value) -> Option<u64> {
    let mut tensors = serde_json::Map::new();
    for file in files {
        tensors.extend(header(file.as_ref())?);
    }
    let mut total: u64 = 0;
    for (name, info) in &tensors {
        if name == "__metadata__" || name.ends_with(".scales") || name.ends_with(".biases") {
            continue;
        }
        let dims = shape(info)?;
        let module = name.strip_suffix(".weight");
        let scales = module.and_then(|m| tensors.get(&format!("{m}.scales")));
        let count = match (scales, dims.split_last()) {
            // Packed: each row holds `scales` groups of `group_size` values.
            (Some(scales), Some((_, rows))) => {
                let groups = *shape(scales)?.last()?;
                let group_size = group_size(config, module.unwrap_or(name));
                rows.iter()
                    .try_fold(1u64, |n, &d| n.checked_mul(d))?
                    .checked_mul(groups.checked_mul(group_size)?)?
            }
            _ => dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?,
        };
        total = total.checked_add(count)?;
    }
    Some(total)
}

fn shape(info: &Value) -> Option<Vec<u64>> {
    info.get("shape")?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect()
}

/// The group size of one module: its own entry in `quantization`, else the default one.
fn group_size(config: &Value, module: &str) -> u64 {
    let quantization = ["quantization", "quantization_config"]
        .iter()
        .find_map(|key| config.get(key));
    quantization
        .and_then(|q| {
            q.get(module)
                .and_then(|m| m.get("group_size"))
                .or_else(|| q.get("group_size"))
        })
        .and_then(Value::as_u64)
        .filter(|&g| g > 0)
        .unwrap_or(DEFAULT_GROUP_SIZE)
}

/// The JSON header of a safetensors file: tensor name → `{dtype, shape, data_offsets}`.
fn header(path: &Path) -> Option<serde_json::Map<String, Value>> {
    let mut file = File::open(path).ok()?;
    let mut length = [0u8; 8];
    file.read_exact(&mut length).ok()?;
    let length = u64::from_le_bytes(length);
    if length > MAX_HEADER_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(length).read_to_end(&mut text).ok()?;
    match serde_json::from_slice(&text).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// The most positions the text model supports (`text_config.max_position_embeddings`).
pub(crate) fn context_length(config: &Value) -> Option<u32> {
    config
        .get("text_config")?
        .get("max_position_embeddings")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

/// Whether the config describes a tower of this kind (`vision_config`, `audio_config`).
pub(crate) fn has_tower(config: &Value, key: &str) -> bool {
    config.get(key).is_some_and(|tower| tower.is_object())
}

/// The quantization mode (`affine`, `mxfp4`, …), if the weights are quantized.
pub(crate) fn quantization_mode(config: &Value) -> Option<String> {
    let quantization = ["quantization", "quantization_config"]
        .iter()
        .find_map(|key| config.get(key))?;
    let mode = quantization
        .get("mode")
        .and_then(Value::as_str)
        .unwrap_or("affine");
    Some(short_text(mode))
}

/// The type unquantized weights are stored in (`bfloat16`, …), as the config says.
pub(crate) fn dtype(config: &Value) -> Option<String> {
    ["dtype", "torch_dtype"]
        .iter()
        .find_map(|key| config.get(key).and_then(Value::as_str))
        .or_else(|| {
            config
                .get("text_config")
                .and_then(|t| t.get("dtype"))
                .and_then(Value::as_str)
        })
        .map(short_text)
}

/// Text from a file, shown as a label: printable and short.
pub(crate) fn short_text(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(40).collect()
}
