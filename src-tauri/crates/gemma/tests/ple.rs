//! The per-layer embedding table read from the checkpoint file (`ple.rs`): its bytes are not in
//! MLX memory, every path through the decoder gives the logits of the resident table bit for
//! bit (prompt, a token never seen before, batched rows, a verify's rows, a dense table), and a
//! file damaged or changed under a loaded model is an error in words.

mod common;

use std::path::Path;
use std::sync::Mutex;

use gemma::weights::read_header;
use gemma::{BatchKvCache, KvCache, LoadOptions, Model};
use mlx_rs::ops::{abs, max};
use mlx_rs::{Array, Dtype};

/// MLX's counters are the process's: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const PLE: &str = "language_model.model.embed_tokens_per_layer";

fn load(dir: &Path, resident: bool) -> Model {
    let options = LoadOptions {
        ple_resident: resident,
        ..LoadOptions::default()
    };
    Model::load(dir, &options).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// Bytes of every tensor of the checkpoint in `dir`, and of those of the per-layer table.
fn stored_bytes(dir: &Path) -> (u64, u64) {
    let (mut all, mut ple) = (0, 0);
    for path in gemma::weights::checkpoint_files(dir).unwrap() {
        for (name, h) in read_header(&path).unwrap() {
            let bytes = h.shape.iter().product::<usize>() as u64 * h.dtype.bitsize() as u64 / 8;
            all += bytes;
            if name.starts_with(PLE) {
                ple += bytes;
            }
        }
    }
    (all, ple)
}

/// MLX's active bytes with its buffer cache emptied.
fn active() -> usize {
    gemma::memory::release_cache().unwrap();
    gemma::memory::counters().unwrap().active
}

fn max_diff(a: &Array, b: &Array) -> f32 {
    assert_eq!(a.shape(), b.shape());
    let d = max(
        abs(a
            .as_dtype(Dtype::Float32)
            .unwrap()
            .subtract(b.as_dtype(Dtype::Float32).unwrap())
            .unwrap())
        .unwrap(),
        None,
    )
    .unwrap();
    d.item_exact::<f32>()
}

#[test]
fn the_table_s_bytes_stay_in_the_file() {
    let _serial = serial();
    let dir = common::fixture("tiny");
    let (weights, ple) = stored_bytes(&dir);
    assert!(ple > 100_000, "the tiny fixture's table is {ple} bytes");

    let before = active();
    let resident = load(&dir, true);
    let resident_bytes = active() - before;
    assert!(!resident.ple_table().unwrap().from_file());
    drop(resident);

    let before = active();
    let model = load(&dir, false);
    let from_file = active() - before;
    let table = model.ple_table().unwrap();
    assert!(table.from_file());
    assert_eq!(table.stored_bytes(), ple);
    // The rest of the checkpoint is resident (vision and audio towers included); the table is
    // not: what loading holds is the weights less the table, with a little room for MLX's
    // rounding of each buffer.
    let margin = 32 * 1024;
    assert!(
        (from_file as u64) < weights - ple + margin,
        "MLX holds {from_file} bytes after loading, the checkpoint less its per-layer table is {}",
        weights - ple
    );
    assert!(
        from_file as u64 + ple <= resident_bytes as u64 + margin,
        "from the file {from_file} bytes, resident {resident_bytes}: the table ({ple} bytes) is not what differs"
    );
    eprintln!(
        "tiny: checkpoint {weights} bytes, table {ple}; MLX active after load: resident {resident_bytes}, from the file {from_file}"
    );
}

/// Logits of `ids` after a prompt, then of a decode step of a token the prompt never held, on
/// one model.
fn prompt_then_step(model: &Model, prompt: &[u32], next: u32) -> (Array, Array) {
    let mut caches = model.new_caches();
    let prompt_logits = model.forward(prompt, &[], &mut caches, None).unwrap();
    let id = Array::from_slice(&[next], &[1]);
    let step = model.forward_array(&id, &mut caches, None).unwrap();
    (prompt_logits, step)
}

#[test]
fn rows_from_the_file_give_the_resident_logits() {
    let _serial = serial();
    let dir = common::fixture("tiny");
    let resident = load(&dir, true);
    let model = load(&dir, false);
    let prompt: Vec<u32> = vec![4, 105, 236, 107, 9, 17, 17, 300, 512, 7];
    // Never in the prompt, and never read by this process before: its row is gathered now.
    let unseen = 1000;
    let (a, a_step) = prompt_then_step(&resident, &prompt, unseen);
    let (b, b_step) = prompt_then_step(&model, &prompt, unseen);
    assert_eq!(max_diff(&a, &b), 0.0, "prompt logits differ");
    assert_eq!(
        max_diff(&a_step, &b_step),
        0.0,
        "the unseen token's step differs"
    );

    // A verify's rows (several device-resident ids at once, with the hidden states).
    let ids = Array::from_slice(&[5u32, 1000, 1016, 0], &[4]);
    let mut ca = resident.new_caches();
    let mut cb = model.new_caches();
    resident.forward(&prompt, &[], &mut ca, Some(1)).unwrap();
    model.forward(&prompt, &[], &mut cb, Some(1)).unwrap();
    let (ha, la) = resident.forward_array_with_hidden(&ids, &mut ca).unwrap();
    let (hb, lb) = model.forward_array_with_hidden(&ids, &mut cb).unwrap();
    assert_eq!(max_diff(&ha, &hb), 0.0, "verify hidden states differ");
    assert_eq!(max_diff(&la, &lb), 0.0, "verify logits differ");

    // Batched rows: two conversations stepping together.
    let rows = |m: &Model| -> Array {
        let mut first = m.new_caches();
        let mut second = m.new_caches();
        m.forward(&prompt, &[], &mut first, Some(1)).unwrap();
        m.forward(&prompt[..4], &[], &mut second, Some(1)).unwrap();
        let ids = Array::from_slice(&[999u32, 3], &[2]);
        let mut caches: Vec<&mut [KvCache]> = vec![&mut first, &mut second];
        m.forward_rows(&ids, &mut caches, &mut BatchKvCache::new())
            .unwrap()
    };
    assert_eq!(
        max_diff(&rows(&resident), &rows(&model)),
        0.0,
        "batched rows differ"
    );
}

#[test]
fn a_dense_table_is_gathered_too() {
    let _serial = serial();
    let tmp = common::copy_of("tiny");
    let dir = tmp.path();
    // Store the table dense (bf16), as a checkpoint converted without quantizing it would.
    let shard = gemma::weights::checkpoint_files(dir)
        .unwrap()
        .into_iter()
        .find(|p| {
            read_header(p)
                .unwrap()
                .contains_key(&format!("{PLE}.weight"))
        })
        .unwrap();
    let mut tensors = common::read_tensors(&shard);
    let part = |t: &mut common::Tensors, leaf: &str, dtype: Dtype| -> Array {
        let (_, shape, bytes) = t.remove(&format!("{PLE}.{leaf}")).unwrap();
        let shape: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
        match dtype {
            Dtype::Uint32 => {
                let words: Vec<u32> = bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                Array::from_slice(&words, &shape)
            }
            _ => {
                let halves: Vec<half::bf16> = bytes
                    .chunks_exact(2)
                    .map(|c| half::bf16::from_bits(u16::from_le_bytes(c.try_into().unwrap())))
                    .collect();
                Array::from_slice(&halves, &shape)
            }
        }
    };
    let w = part(&mut tensors, "weight", Dtype::Uint32);
    let s = part(&mut tensors, "scales", Dtype::Bfloat16);
    let b = part(&mut tensors, "biases", Dtype::Bfloat16);
    let dense = mlx_rs::ops::dequantize(&w, &s, &b, 64, 4)
        .unwrap()
        .as_dtype(Dtype::Bfloat16)
        .unwrap();
    dense.eval().unwrap();
    let bytes: Vec<u8> = dense
        .as_slice::<half::bf16>()
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect();
    let shape: Vec<usize> = dense.shape().iter().map(|&d| d as usize).collect();
    tensors.insert(
        format!("{PLE}.weight"),
        (safetensors::Dtype::BF16, shape, bytes),
    );
    common::write_tensors(&shard, &tensors);
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
        let map = json["weight_map"].as_object_mut().unwrap();
        map.remove(&format!("{PLE}.scales"));
        map.remove(&format!("{PLE}.biases"));
        std::fs::write(&index, json.to_string()).unwrap();
    }

    let resident = load(dir, true);
    let model = load(dir, false);
    assert!(model.ple_table().unwrap().from_file());
    let prompt = [4u32, 105, 236, 107, 9, 1000, 17];
    let (a, a_step) = prompt_then_step(&resident, &prompt, 1016);
    let (b, b_step) = prompt_then_step(&model, &prompt, 1016);
    assert_eq!(max_diff(&a, &b), 0.0, "prompt logits differ");
    assert_eq!(max_diff(&a_step, &b_step), 0.0, "step logits differ");
}

/// The shard of `dir` holding the per-layer table.
fn table_shard(dir: &Path) -> std::path::PathBuf {
    gemma::weights::checkpoint_files(dir)
        .unwrap()
        .into_iter()
        .find(|p| {
            read_header(p)
                .unwrap()
                .contains_key(&format!("{PLE}.weight"))
        })
        .unwrap()
}

fn step_error(model: &Model, ids: &[u32]) -> String {
    let mut caches = model.new_caches();
    match model.forward(ids, &[], &mut caches, None) {
        Ok(_) => panic!("the forward ran over a damaged table"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_file_truncated_after_loading_is_an_error_in_words() {
    let _serial = serial();
    let tmp = common::copy_of("tiny");
    let model = load(tmp.path(), false);
    let shard = table_shard(tmp.path());
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let error = step_error(&model, &[2, 105, 1000]);
    assert!(
        error.contains("changed on disk") && error.contains("reload the model"),
        "{error}"
    );
    assert!(
        error.contains(&format!("{} bytes, it was {len}", len / 2)),
        "{error}"
    );
}

#[test]
fn a_file_rewritten_or_replaced_under_the_model_asks_to_reload() {
    let _serial = serial();
    let tmp = common::copy_of("tiny");
    let model = load(tmp.path(), false);
    let shard = table_shard(tmp.path());
    let bytes = std::fs::read(&shard).unwrap();
    // The same length, other contents, written in place a moment later.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut changed = bytes.clone();
    let last = changed.len() - 1;
    changed[last] ^= 0xff;
    std::fs::write(&shard, &changed).unwrap();
    let error = step_error(&model, &[2, 105]);
    assert!(
        error.contains("changed on disk") && error.contains("new modification time"),
        "{error}"
    );

    // Another file put in its place (the original bytes, a new file).
    let tmp = common::copy_of("tiny");
    let model = load(tmp.path(), false);
    let shard = table_shard(tmp.path());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let other = shard.with_extension("new");
    std::fs::write(&other, &bytes).unwrap();
    std::fs::rename(&other, &shard).unwrap();
    let error = step_error(&model, &[2, 105]);
    assert!(error.contains("the file at its path"), "{error}");
    assert!(error.contains("reload the model"), "{error}");
}

#[test]
fn a_row_outside_the_table_is_an_error_in_words() {
    let _serial = serial();
    let model = load(&common::fixture("tiny"), false);
    let mut caches = model.new_caches();
    // Device-resident ids skip the host-side vocabulary check: the table's own check answers.
    let ids = Array::from_slice(&[2u32, 5000], &[2]);
    let error = match model.forward_array(&ids, &mut caches, None) {
        Ok(_) => panic!("a row past the table's end was read"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("token id 5000") && error.contains("per-layer embedding table (1024 rows)"),
        "{error}"
    );
    let ids = Array::from_slice(&[-3i32], &[1]);
    let error = match model.forward_array(&ids, &mut model.new_caches(), None) {
        Ok(_) => panic!("a negative row was read"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("token id -3"), "{error}");
}
