//! A corpus of damaged model folders, each made from the tiny fixture and loaded the way the app
//! loads one (`LoadedModel::load`: config, weights, tokenizer, template, special ids). Every case
//! must fail — no panic, no hang — with a message naming the file and what is wrong in it.
//! (`gemma/tests/loader.rs` checks the loader's tensor report in finer detail.)

mod common;
use common::fixture;

#[path = "../../tensor_files.rs"]
mod tensor_files;
use tensor_files::{read_tensors, write_tensors};

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use engine::loaded::LoadedModel;
use gemma::LoadOptions;
use serde_json::{json, Value};

fn copy_of_fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    tmp
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    edit_json(&dir.join("config.json"), edit);
}

/// The shard holding `tensor`, from the index.
fn shard_of(dir: &Path, tensor: &str) -> PathBuf {
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    dir.join(index["weight_map"][tensor].as_str().unwrap())
}

/// A safetensors file split into its header entries (in file order) and its data bytes.
struct Safetensors {
    header: Vec<(String, Value)>,
    data: Vec<u8>,
}

impl Safetensors {
    fn read(path: &Path) -> Self {
        let bytes = std::fs::read(path).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let map: serde_json::Map<String, Value> =
            serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        let mut header: Vec<(String, Value)> = map.into_iter().collect();
        header.sort_by_key(|(name, v)| {
            (
                name != "__metadata__",
                v["data_offsets"][0].as_u64().unwrap_or(0),
            )
        });
        Self {
            header,
            data: bytes[8 + len..].to_vec(),
        }
    }

    fn entry(&mut self, name: &str) -> &mut Value {
        &mut self
            .header
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} is not in this shard"))
            .1
    }

    /// Writes the header as given (duplicates and all) followed by the data.
    fn write(&self, path: &Path) {
        let entries: Vec<String> = self
            .header
            .iter()
            .map(|(name, v)| format!("{}:{}", json!(name), v))
            .collect();
        let header = format!("{{{}}}", entries.join(","));
        self.write_raw(path, header.as_bytes());
    }

    fn write_raw(&self, path: &Path, header: &[u8]) {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header);
        out.extend_from_slice(&self.data);
        std::fs::write(path, out).unwrap();
    }
}

/// Changes one tensor's header entry in whichever shard holds it.
fn edit_entry(dir: &Path, tensor: &str, edit: impl FnOnce(&mut Value)) {
    let path = shard_of(dir, tensor);
    let mut file = Safetensors::read(&path);
    edit(file.entry(tensor));
    file.write(&path);
}

/// Rewrites one tensor (dtype, shape and bytes) through the safetensors writer, so that the
/// file itself is valid and only its content is wrong for the model.
fn replace_tensor(dir: &Path, tensor: &str, dtype: safetensors::Dtype, shape: &[usize]) {
    let path = shard_of(dir, tensor);
    let mut tensors = read_tensors(&path);
    let size = shape.iter().product::<usize>() * dtype.bitsize() / 8;
    tensors.insert(tensor.into(), (dtype, shape.to_vec(), vec![0; size]));
    write_tensors(&path, &tensors);
}

const NORM: &str = "language_model.model.norm.weight";
const Q_PROJ: &str = "language_model.model.layers.0.self_attn.q_proj.weight";
const SHARD_1: &str = "model-00001-of-00002.safetensors";
const SHARD_2: &str = "model-00002-of-00002.safetensors";

/// One damaged folder: what is done to it and what the message must say.
struct Case {
    name: &'static str,
    damage: Box<dyn Fn(&Path)>,
    expect: &'static [&'static str],
}

fn case(
    name: &'static str,
    expect: &'static [&'static str],
    damage: impl Fn(&Path) + 'static,
) -> Case {
    Case {
        name,
        damage: Box::new(damage),
        expect,
    }
}

fn corpus() -> Vec<Case> {
    vec![
        // ---- config.json
        case("missing config", &["config.json", "No such file"], |d| {
            std::fs::remove_file(d.join("config.json")).unwrap()
        }),
        case(
            "empty config",
            &["config.json is not a valid Gemma 4 file", "EOF"],
            |d| std::fs::write(d.join("config.json"), "").unwrap(),
        ),
        case(
            "truncated config",
            &["config.json is not a valid Gemma 4 file", "line"],
            |d| {
                let text = std::fs::read_to_string(d.join("config.json")).unwrap();
                std::fs::write(d.join("config.json"), &text[..text.len() / 3]).unwrap()
            },
        ),
        case(
            "config is a list",
            &["config.json", "expected a JSON object"],
            |d| std::fs::write(d.join("config.json"), "[1, 2, 3]").unwrap(),
        ),
        case("config is binary", &["config.json", "UTF-8"], |d| {
            std::fs::write(d.join("config.json"), [0xFF, 0xFE, 0x00, 0x9C]).unwrap()
        }),
        case(
            "wrong model_type",
            &["config.json", "model_type is \"llama\""],
            |d| edit_config(d, |c| c["model_type"] = json!("llama")),
        ),
        case(
            "missing model_type",
            &["config.json", "model_type is missing"],
            |d| edit_config(d, |c| drop(c.as_object_mut().unwrap().remove("model_type"))),
        ),
        case(
            "missing text_config",
            &["config.json", "missing field `text_config`"],
            |d| {
                edit_config(d, |c| {
                    drop(c.as_object_mut().unwrap().remove("text_config"))
                })
            },
        ),
        case(
            "size as a string",
            &["config.json", "invalid type: string \"big\""],
            |d| edit_config(d, |c| c["text_config"]["hidden_size"] = json!("big")),
        ),
        case(
            "negative size",
            &["config.json", "invalid value: integer `-4`"],
            |d| edit_config(d, |c| c["text_config"]["num_attention_heads"] = json!(-4)),
        ),
        case(
            "zero layers",
            &["config.json", "text_config.num_hidden_layers is 0"],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["num_hidden_layers"] = json!(0);
                    c["text_config"]["layer_types"] = json!([]);
                })
            },
        ),
        case(
            "zero width",
            &["config.json", "text_config.hidden_size is 0"],
            |d| edit_config(d, |c| c["text_config"]["hidden_size"] = json!(0)),
        ),
        case(
            "absurd width",
            &[
                "config.json",
                "text_config.intermediate_size is 4611686018427387904",
            ],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["intermediate_size"] = json!(1u64 << 62)
                })
            },
        ),
        case(
            "zero patch size",
            &["config.json", "vision_config.patch_size is 0"],
            |d| edit_config(d, |c| c["vision_config"]["patch_size"] = json!(0)),
        ),
        case(
            "layer_types too short",
            &["config.json", "layer_types has 11 entries for 12 layers"],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["layer_types"]
                        .as_array_mut()
                        .unwrap()
                        .pop();
                })
            },
        ),
        case(
            "unknown attention kind",
            &["config.json", "unknown variant `chunked_attention`"],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["layer_types"][0] = json!("chunked_attention")
                })
            },
        ),
        case(
            "missing rope parameters",
            &["config.json", "rope_parameters.full_attention is missing"],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["rope_parameters"]
                        .as_object_mut()
                        .unwrap()
                        .remove("full_attention");
                })
            },
        ),
        case("unknown rope type", &["rope_type \"yarn\""], |d| {
            edit_config(d, |c| {
                c["text_config"]["rope_parameters"]["sliding_attention"]["rope_type"] =
                    json!("yarn")
            })
        }),
        case(
            "NaN-like rope theta",
            &["config.json", "rope_theta is 0"],
            |d| {
                edit_config(d, |c| {
                    c["text_config"]["rope_parameters"]["sliding_attention"]["rope_theta"] =
                        json!(0.0)
                })
            },
        ),
        case(
            "mixture of experts",
            &["config.json", "mixture-of-experts", "not supported"],
            |d| edit_config(d, |c| c["text_config"]["enable_moe_block"] = json!(true)),
        ),
        case(
            "unsupported quantization bits",
            &["config.json", "quantization: 7 bits is not supported"],
            |d| edit_config(d, |c| c["quantization"]["bits"] = json!(7)),
        ),
        case(
            "quantization group of zero",
            &["config.json", "quantization: group size 0 is not supported"],
            |d| edit_config(d, |c| c["quantization"]["group_size"] = json!(0)),
        ),
        case(
            "quantization bits disagree with the tensors",
            &["do not match its config", "wrong tensors", Q_PROJ],
            |d| edit_config(d, |c| c["quantization"]["bits"] = json!(8)),
        ),
        case(
            "vision config removed, vision tensors left",
            &[
                "unexpected tensors",
                "vision_tower.patch_embedder.input_proj.weight",
            ],
            |d| {
                edit_config(d, |c| {
                    drop(c.as_object_mut().unwrap().remove("vision_config"))
                })
            },
        ),
        // ---- the shard list
        case(
            "no weights at all",
            &["holds no model*.safetensors files"],
            |d| {
                for f in [SHARD_1, SHARD_2, "model.safetensors.index.json"] {
                    std::fs::remove_file(d.join(f)).unwrap();
                }
            },
        ),
        case(
            "index lists a missing shard",
            &["model.safetensors.index.json", SHARD_2, "does not exist"],
            |d| std::fs::remove_file(d.join(SHARD_2)).unwrap(),
        ),
        case(
            "index is not JSON",
            &["model.safetensors.index.json is not a valid Gemma 4 file"],
            |d| {
                std::fs::write(d.join("model.safetensors.index.json"), "{\"weight_map\": {")
                    .unwrap()
            },
        ),
        case(
            "index without weight_map",
            &["model.safetensors.index.json", "weight_map is missing"],
            |d| {
                edit_json(&d.join("model.safetensors.index.json"), |v| {
                    v.as_object_mut().unwrap().remove("weight_map");
                })
            },
        ),
        case(
            "index entry is not a file name",
            &["model.safetensors.index.json", NORM, "not a file name"],
            |d| {
                edit_json(&d.join("model.safetensors.index.json"), |v| {
                    v["weight_map"][NORM] = json!(7);
                })
            },
        ),
        case(
            "index points outside the folder",
            &["../secrets.safetensors", "outside the model folder"],
            |d| {
                edit_json(&d.join("model.safetensors.index.json"), |v| {
                    v["weight_map"][NORM] = json!("../secrets.safetensors");
                })
            },
        ),
        case(
            "index points to an absolute path",
            &["/etc/passwd", "outside the model folder"],
            |d| {
                edit_json(&d.join("model.safetensors.index.json"), |v| {
                    v["weight_map"][NORM] = json!("/etc/passwd");
                })
            },
        ),
        case("a shard is a folder", &[SHARD_2, "is not a file"], |d| {
            std::fs::remove_file(d.join("model.safetensors.index.json")).unwrap();
            std::fs::remove_file(d.join(SHARD_2)).unwrap();
            std::fs::create_dir(d.join(SHARD_2)).unwrap();
        }),
        case(
            "a shard deleted, no index",
            &["missing tensors", NORM],
            |d| {
                let shard = shard_of(d, NORM);
                std::fs::remove_file(d.join("model.safetensors.index.json")).unwrap();
                std::fs::remove_file(shard).unwrap();
            },
        ),
        // ---- tensors
        case("a missing tensor", &["missing tensors (1)", NORM], |d| {
            let path = shard_of(d, NORM);
            let bytes = std::fs::read(&path).unwrap();
            let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            let kept: Vec<_> = st
                .tensors()
                .into_iter()
                .filter(|(n, _)| n != NORM)
                .collect();
            safetensors::serialize_to_file(kept, None, &path).unwrap();
        }),
        case(
            "an extra tensor",
            &[
                "unexpected tensors (1)",
                "language_model.model.extra.weight",
            ],
            |d| {
                replace_tensor(d, NORM, safetensors::Dtype::BF16, &[256]);
                let path = shard_of(d, NORM);
                let bytes = std::fs::read(&path).unwrap();
                let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
                let extra = [0u8; 8];
                let mut views: Vec<_> = st.tensors();
                views.push((
                    "language_model.model.extra.weight".into(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![4], &extra)
                        .unwrap(),
                ));
                safetensors::serialize_to_file(views, None, &path).unwrap();
            },
        ),
        case(
            "a misshapen tensor",
            &[NORM, "shape [128], expected [256]"],
            |d| replace_tensor(d, NORM, safetensors::Dtype::BF16, &[128]),
        ),
        case(
            "an integer norm",
            &[NORM, "dtype I32, expected a float type"],
            |d| replace_tensor(d, NORM, safetensors::Dtype::I32, &[256]),
        ),
        case(
            "a float64 norm",
            &[SHARD_1, NORM, "dtype F64 is not supported"],
            |d| replace_tensor(d, NORM, safetensors::Dtype::F64, &[256]),
        ),
        case(
            "packed weights stored as floats",
            &[Q_PROJ, "dtype F32, expected U32"],
            |d| {
                let path = shard_of(d, Q_PROJ);
                let st = Safetensors::read(&path);
                let shape = st.header.iter().find(|(n, _)| n == Q_PROJ).unwrap().1["shape"].clone();
                let shape: Vec<usize> = serde_json::from_value(shape).unwrap();
                replace_tensor(d, Q_PROJ, safetensors::Dtype::F32, &shape)
            },
        ),
        case(
            "an exotic dtype",
            &[SHARD_1, NORM, "F8_E4M3 is not supported"],
            |d| replace_tensor(d, NORM, safetensors::Dtype::F8_E4M3, &[256]),
        ),
        case(
            "the same tensor in two shards",
            &[NORM, "appears in both"],
            |d| {
                let other = if shard_of(d, NORM).ends_with(SHARD_1) {
                    SHARD_2
                } else {
                    SHARD_1
                };
                std::fs::remove_file(d.join("model.safetensors.index.json")).unwrap();
                let path = d.join(other);
                let bytes = std::fs::read(&path).unwrap();
                let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
                let extra = [0u8; 512];
                let mut views = st.tensors();
                views.push((
                    NORM.into(),
                    safetensors::tensor::TensorView::new(
                        safetensors::Dtype::BF16,
                        vec![256],
                        &extra,
                    )
                    .unwrap(),
                ));
                safetensors::serialize_to_file(views, None, &path).unwrap();
            },
        ),
        // ---- safetensors files that lie
        case("truncated shard", &[SHARD_1, "truncated"], |d| {
            let path = d.join(SHARD_1);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() * 2 / 3]).unwrap();
        }),
        case(
            "shard cut inside its header",
            &[SHARD_1, "does not fit"],
            |d| {
                let path = d.join(SHARD_1);
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..100]).unwrap();
            },
        ),
        case(
            "shard cut inside its length",
            &[SHARD_1, "too short"],
            |d| {
                std::fs::write(d.join(SHARD_1), [1, 2, 3]).unwrap();
            },
        ),
        case("empty shard", &[SHARD_1, "too short"], |d| {
            std::fs::write(d.join(SHARD_1), []).unwrap();
        }),
        case(
            "trailing bytes after the data",
            &[SHARD_1, "but the file holds"],
            |d| {
                let path = d.join(SHARD_1);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes.extend([0; 64]);
                std::fs::write(&path, bytes).unwrap();
            },
        ),
        case(
            "header length of zero",
            &[SHARD_1, "not a safetensors JSON header"],
            |d| {
                let path = d.join(SHARD_1);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[..8].copy_from_slice(&0u64.to_le_bytes());
                std::fs::write(&path, bytes).unwrap();
            },
        ),
        case(
            "header length past the end",
            &[SHARD_1, "does not fit"],
            |d| {
                let path = d.join(SHARD_1);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                std::fs::write(&path, bytes).unwrap();
            },
        ),
        case(
            "header is not JSON",
            &[SHARD_1, "not a safetensors JSON header"],
            |d| {
                let path = d.join(SHARD_1);
                let st = Safetensors::read(&path);
                st.write_raw(&path, b"\x00\x01 definitely not json");
            },
        ),
        case(
            "header is a JSON list",
            &[SHARD_1, "not a safetensors JSON header"],
            |d| {
                let path = d.join(SHARD_1);
                let st = Safetensors::read(&path);
                st.write_raw(&path, b"[]");
            },
        ),
        case(
            "unknown dtype",
            &[SHARD_1, NORM, "unknown variant `Q4`"],
            |d| edit_entry(d, NORM, |e| e["dtype"] = json!("Q4")),
        ),
        case(
            "shape larger than its bytes",
            &[NORM, "needs 1024 bytes", "span 512"],
            |d| edit_entry(d, NORM, |e| e["shape"] = json!([512])),
        ),
        case("offsets overlap", &["overlaps"], |d| {
            edit_entry(d, NORM, |e| {
                let start = e["data_offsets"][0].as_u64().unwrap();
                if start >= 2 {
                    e["data_offsets"] = json!([start - 2, start + 510]);
                } else {
                    // The first tensor: claim its bytes start later instead.
                    e["data_offsets"] = json!([start + 2, start + 514]);
                }
            })
        }),
        case("offsets leave a gap", &["leaves a gap"], |d| {
            edit_entry(d, NORM, |e| {
                let start = e["data_offsets"][0].as_u64().unwrap();
                e["data_offsets"] = json!([start + 2, start + 514]);
            })
        }),
        case("offsets backwards", &[NORM, "offsets [512, 0]"], |d| {
            edit_entry(d, NORM, |e| e["data_offsets"] = json!([512, 0]))
        }),
        case(
            "offsets negative",
            &[NORM, "invalid value: integer `-512`"],
            |d| edit_entry(d, NORM, |e| e["data_offsets"] = json!([-512, 0])),
        ),
        case("shape overflows", &[NORM, "fits in memory"], |d| {
            edit_entry(d, NORM, |e| {
                e["shape"] = json!([u64::MAX / 2, 1u64 << 40]);
            })
        }),
        case(
            "offsets in the exabytes",
            &[SHARD_2, "header describes 2305843009213693952 bytes"],
            |d| {
                // Sizes and offsets near 2^61 must be compared, never summed into an overflow.
                let path = d.join(SHARD_2);
                let st = Safetensors::read(&path);
                let n = 1u64 << 60;
                let header = format!(
                    r#"{{"a":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}},"b":{{"dtype":"U8","shape":[{n}],"data_offsets":[{n},{}]}}}}"#,
                    2 * n
                );
                st.write_raw(&path, header.as_bytes());
            },
        ),
        case(
            "a tensor listed twice in one header",
            &[NORM, "listed twice"],
            |d| {
                let path = shard_of(d, NORM);
                let mut st = Safetensors::read(&path);
                let entry = st.entry(NORM).clone();
                st.header.push((NORM.into(), entry));
                st.write(&path);
            },
        ),
        case(
            "an entry with an unknown field",
            &[NORM, "unknown field `stride`"],
            |d| edit_entry(d, NORM, |e| e["stride"] = json!([1])),
        ),
        // ---- tokenizer
        case(
            "missing tokenizer",
            &["tokenizer.json", "No such file"],
            |d| std::fs::remove_file(d.join("tokenizer.json")).unwrap(),
        ),
        case(
            "truncated tokenizer",
            &["tokenizer.json is not valid JSON"],
            |d| {
                let text = std::fs::read_to_string(d.join("tokenizer.json")).unwrap();
                std::fs::write(d.join("tokenizer.json"), &text[..text.len() / 2]).unwrap();
            },
        ),
        case(
            "tokenizer that is not a tokenizer",
            &["tokenizer.json is not a valid tokenizer"],
            |d| {
                std::fs::write(d.join("tokenizer.json"), r#"{"version": "1.0"}"#).unwrap();
            },
        ),
        case(
            "tokenizer without turn markers",
            &["tokenizer.json", "<turn|>", "chat format needs"],
            |d| {
                edit_json(&d.join("tokenizer.json"), |v| {
                    for t in v["added_tokens"].as_array_mut().unwrap() {
                        if t["content"] == "<turn|>" {
                            t["content"] = json!("<end_of_turn>");
                        }
                    }
                    let vocab = v["model"]["vocab"].as_object_mut().unwrap();
                    let id = vocab.remove("<turn|>").unwrap();
                    vocab.insert("<end_of_turn>".into(), id);
                })
            },
        ),
        // ---- special ids
        case("bos id missing", &["config.json", "bos_token_id"], |d| {
            edit_config(d, |c| {
                c.as_object_mut().unwrap().remove("bos_token_id");
                c["text_config"]
                    .as_object_mut()
                    .unwrap()
                    .remove("bos_token_id");
            })
        }),
        case(
            "image id outside the vocabulary",
            &["config.json", "image_token_id", "999999"],
            |d| edit_config(d, |c| c["image_token_id"] = json!(999_999)),
        ),
        case(
            "stop ids empty",
            &["generation_config.json", "eos_token_id", "non-empty list"],
            |d| {
                edit_json(&d.join("generation_config.json"), |v| {
                    v["eos_token_id"] = json!([])
                })
            },
        ),
        case(
            "generation_config not JSON",
            &["generation_config.json is not valid JSON"],
            |d| std::fs::write(d.join("generation_config.json"), "eos = 1").unwrap(),
        ),
        // ---- chat template and tokenizer_config.json
        case(
            "template syntax error",
            &["chat_template.jinja", "does not parse", "chat_template:1"],
            |d| {
                std::fs::write(
                    d.join("chat_template.jinja"),
                    "{{ bos_token }}{% for m in messages %}{{ m.content }",
                )
                .unwrap()
            },
        ),
        case(
            "template unclosed block",
            &["chat_template.jinja", "does not parse"],
            |d| {
                std::fs::write(
                    d.join("chat_template.jinja"),
                    "{{ bos_token }}{% for m in messages %}{{ m.content }}",
                )
                .unwrap()
            },
        ),
        case(
            "template fails on every conversation",
            &[
                "chat_template.jinja",
                "a one-message conversation",
                "unknown filter",
            ],
            |d| {
                std::fs::write(
                    d.join("chat_template.jinja"),
                    "{{ bos_token }}{% for m in messages %}{{ m.content | shout }}{% endfor %}",
                )
                .unwrap()
            },
        ),
        case(
            "template raises",
            &[
                "chat_template.jinja",
                "a one-message conversation",
                "no chats today",
            ],
            |d| {
                std::fs::write(
                    d.join("chat_template.jinja"),
                    "{{ raise_exception('no chats today') }}",
                )
                .unwrap()
            },
        ),
        case(
            "template is binary",
            &["chat_template.jinja", "UTF-8"],
            |d| std::fs::write(d.join("chat_template.jinja"), [0xC3, 0x28, 0xA0, 0xA1]).unwrap(),
        ),
        case("no template anywhere", &["has no chat template"], |d| {
            std::fs::remove_file(d.join("chat_template.jinja")).unwrap()
        }),
        case(
            "template in tokenizer_config of the wrong type",
            &["tokenizer_config.json", "chat_template"],
            |d| {
                std::fs::remove_file(d.join("chat_template.jinja")).unwrap();
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v["chat_template"] = json!(42)
                });
            },
        ),
        case(
            "missing tokenizer_config",
            &[
                "bos_token",
                "tokenizer_config.json",
                "(the file is missing)",
            ],
            |d| std::fs::remove_file(d.join("tokenizer_config.json")).unwrap(),
        ),
        case(
            "tokenizer_config not JSON",
            &["tokenizer_config.json is not valid JSON"],
            |d| std::fs::write(d.join("tokenizer_config.json"), "{'bos_token': '<bos>'}").unwrap(),
        ),
        case(
            "tokenizer_config without bos_token",
            &["bos_token", "tokenizer_config.json"],
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v.as_object_mut().unwrap().remove("bos_token");
                })
            },
        ),
        case(
            "bos_token of the wrong type",
            &["tokenizer_config.json", "bos_token"],
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v["bos_token"] = json!(4)
                })
            },
        ),
        case(
            "eos_token an object without content",
            &[
                "tokenizer_config.json",
                "eos_token",
                "a string or an object",
            ],
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v["eos_token"] = json!({"text": "<eos>"})
                })
            },
        ),
        case(
            "bos_token not in the vocabulary",
            &["tokenizer_config.json", "bos_token", "<s>", "not a token"],
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v["bos_token"] = json!("<s>")
                })
            },
        ),
        case(
            "bos_token disagrees with config.json",
            &[
                "tokenizer_config.json",
                "bos_token",
                "<eos>",
                "bos_token_id",
            ],
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |v| {
                    v["bos_token"] = json!("<eos>")
                })
            },
        ),
    ]
}

/// Loads `dir` on its own thread: `Ok(message)` for an error, `Err(what went wrong)` for a
/// load that succeeded, panicked or hung.
fn load_error(dir: &Path) -> Result<String, String> {
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_path_buf();
    let thread = std::thread::spawn(move || {
        let result = LoadedModel::load(&dir, &LoadOptions::default()).map(|_| ());
        let _ = tx.send(result.map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => Err("loaded, but the folder is broken".into()),
        Ok(Err(message)) => {
            let _ = thread.join();
            Ok(message)
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err("still loading after 60 s".into()),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("panicked".into()),
    }
}

#[test]
fn every_damaged_folder_gets_a_clear_error() {
    let corpus = corpus();
    let mut failures = Vec::new();
    for case in &corpus {
        let tmp = copy_of_fixture();
        (case.damage)(tmp.path());
        match load_error(tmp.path()) {
            Ok(message) => {
                let shown: String = message.replace('\n', " ⏎ ").chars().take(240).collect();
                eprintln!("{:<44} {shown}", case.name);
                let missing: Vec<&&str> = case
                    .expect
                    .iter()
                    .filter(|e| !message.contains(**e))
                    .collect();
                if !missing.is_empty() {
                    failures.push(format!("{}: {message:?} lacks {missing:?}", case.name));
                }
            }
            Err(problem) => failures.push(format!("{}: {problem}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
}

#[test]
fn the_undamaged_copy_loads() {
    // Guards the corpus: the copy itself is a good folder, so each failure above is the damage's.
    let tmp = copy_of_fixture();
    LoadedModel::load(tmp.path(), &LoadOptions::default()).unwrap();
}

#[test]
fn tokenizer_configs_that_transformers_accepts_load_and_answer() {
    use engine::options::GenerateOptions;
    use engine::stream::{Session, StreamRequest};
    use engine::template::{Message, Role};
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 4] = [
        ("boolean add_*_token", |v| {
            v["add_bos_token"] = json!(false);
            v["add_eos_token"] = json!(true);
        }),
        ("AddedToken objects", |v| {
            for name in ["bos_token", "eos_token", "image_token"] {
                let content = v[name].clone();
                v[name] = json!({"__type": "AddedToken", "content": content, "lstrip": false});
            }
        }),
        ("extra_special_tokens as names", |v| {
            let image = v["image_token"].take();
            v.as_object_mut().unwrap().remove("image_token");
            v["extra_special_tokens"] = json!({"image_token": image});
        }),
        ("nulls and unknown fields", |v| {
            v["sep_token"] = Value::Null;
            v["legacy_token"] = json!(3);
            v["clean_up_tokenization_spaces"] = json!(false);
        }),
    ];
    for (name, edit) in cases {
        let tmp = copy_of_fixture();
        edit_json(&tmp.path().join("tokenizer_config.json"), edit);
        let m = LoadedModel::load(tmp.path(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let prompt = m
            .prompt(&[Message::text(Role::User, "Hello")], false, &[])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let options = GenerateOptions {
            max_tokens: 2,
            ..GenerateOptions::default()
        };
        let cancel = std::sync::atomic::AtomicBool::new(false);
        m.generate(
            StreamRequest::new(Session::new(&m.model), &prompt, &options, &cancel),
            |_| {},
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
