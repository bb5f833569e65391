//! Finding Gemma 4 checkpoints in the app's models folder and in fake Hugging Face caches
//! (snapshots of symlinks into blobs), and the plain-words errors for a folder the user picks.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use anyhow::Result;
use model_store::{check_folder, discover, FolderError, HfCache, ModelSource};

const GEMMA4_4BIT: &str =
    r#"{"model_type": "gemma4", "quantization": {"group_size": 64, "bits": 4}}"#;
const GEMMA4_8BIT: &str = r#"{"model_type": "gemma4", "quantization_config": {"bits": 8}}"#;
const GEMMA4_BF16: &str = r#"{"model_type": "gemma4"}"#;
const LLAMA: &str = r#"{"model_type": "llama"}"#;

/// A plain model folder: config, tokenizer and weights of `weight_bytes`.
fn model_folder(dir: &Path, config: &str, weight_bytes: usize) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("config.json"), config)?;
    fs::write(dir.join("tokenizer.json"), "{}")?;
    fs::write(dir.join("model.safetensors"), vec![0u8; weight_bytes])?;
    Ok(dir.to_path_buf())
}

/// A cached repository in the hub's layout: every file a symlink into `blobs/`, `refs/main`
/// naming `main_commit`. Each snapshot is `(commit, config)`; weights of `weight_bytes`.
fn cached_repo(
    hub: &Path,
    repo: &str,
    snapshots: &[(&str, &str)],
    main_commit: &str,
    weight_bytes: usize,
) -> Result<PathBuf> {
    let root = hub.join(format!("models--{}", repo.replace('/', "--")));
    let blobs = root.join("blobs");
    fs::create_dir_all(&blobs)?;
    fs::create_dir_all(root.join("refs"))?;
    fs::write(root.join("refs").join("main"), format!("{main_commit}\n"))?;
    for (commit, config) in snapshots {
        let snapshot = root.join("snapshots").join(commit);
        fs::create_dir_all(&snapshot)?;
        let files: [(&str, Vec<u8>); 3] = [
            ("config.json", config.as_bytes().to_vec()),
            ("tokenizer.json", b"{}".to_vec()),
            ("model.safetensors", vec![1u8; weight_bytes]),
        ];
        for (name, bytes) in files {
            let blob = blobs.join(format!("{commit}-{name}"));
            fs::write(&blob, bytes)?;
            symlink(format!("../../blobs/{commit}-{name}"), snapshot.join(name))?;
        }
    }
    Ok(root)
}

#[test]
fn the_hf_cache_is_located_as_huggingface_hub_does() {
    let home = Path::new("/home/ada");
    let locate = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let env = move |key: &str| vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        HfCache::from_env(env, Some(home))
            .hub_dir()
            .map(Path::to_path_buf)
    };
    let all = [
        ("HF_HUB_CACHE", "/a/hub"),
        ("HF_HOME", "/b"),
        ("XDG_CACHE_HOME", "/c"),
    ];
    assert_eq!(locate(&all), Some("/a/hub".into()));
    assert_eq!(locate(&all[1..]), Some("/b/hub".into()));
    assert_eq!(locate(&all[2..]), Some("/c/huggingface/hub".into()));
    assert_eq!(locate(&[]), Some("/home/ada/.cache/huggingface/hub".into()));
    assert_eq!(
        locate(&[("HF_HOME", "~/hf")]),
        Some("/home/ada/hf/hub".into())
    );
    assert_eq!(
        locate(&[("HF_HOME", ""), ("XDG_CACHE_HOME", "/c")]),
        Some("/c/huggingface/hub".into()),
        "an empty variable counts as unset"
    );
    assert_eq!(
        locate(&[("HUGGINGFACE_HUB_CACHE", "/old"), ("HF_HOME", "/b")]),
        Some("/old".into())
    );
    assert_eq!(HfCache::from_env(|_| None, None).hub_dir(), None);
}

#[test]
fn discovery_finds_gemma4_in_the_app_folder_and_the_hf_cache() -> Result<()> {
    let root = tempfile::tempdir()?;
    let models = root.path().join("models");
    let hub = root.path().join("hub");

    // App folder: one good model, junk around it, a staged download that must stay hidden.
    let mine = model_folder(&models.join("my-gemma-8bit"), GEMMA4_8BIT, 1000)?;
    fs::create_dir_all(models.join("empty-folder"))?;
    fs::write(models.join("notes.txt"), "not a folder")?;
    model_folder(&models.join("a-llama"), LLAMA, 10)?;
    model_folder(&models.join("broken"), "{ not json", 10)?;
    model_folder(&models.join(".downloads").join("half"), GEMMA4_4BIT, 10)?;
    let no_tokenizer = model_folder(&models.join("no-tokenizer"), GEMMA4_4BIT, 10)?;
    fs::remove_file(no_tokenizer.join("tokenizer.json"))?;

    // HF cache: E4B (refs/main names the older snapshot, which also sorts last), E2B, a llama,
    // a broken config, a dataset, and a repo whose blob is missing.
    let e4b = cached_repo(
        &hub,
        "mlx-community/gemma-4-e4b-it-4bit",
        &[("bbb222", GEMMA4_4BIT), ("aaa111", GEMMA4_BF16)],
        "bbb222",
        4096,
    )?;
    let e2b = cached_repo(
        &hub,
        "mlx-community/gemma-4-e2b-it-4bit",
        &[("ccc333", GEMMA4_4BIT)],
        "ccc333",
        2048,
    )?;
    cached_repo(&hub, "meta/llama", &[("ddd444", LLAMA)], "ddd444", 10)?;
    cached_repo(
        &hub,
        "x/broken",
        &[("eee555", "{\"model_type\":")],
        "eee555",
        10,
    )?;
    cached_repo(&hub, "x/gone", &[("fff666", GEMMA4_4BIT)], "fff666", 10)?;
    let blobs = hub.join("models--x--gone").join("blobs");
    fs::remove_file(blobs.join("fff666-model.safetensors"))?;
    fs::create_dir_all(hub.join("datasets--x--data").join("snapshots").join("123"))?;
    fs::create_dir_all(hub.join(".locks"))?;

    let found = discover(&models, &HfCache::at(&hub));
    let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "my-gemma-8bit",
            "mlx-community/gemma-4-e4b-it-4bit",
            "mlx-community/gemma-4-e2b-it-4bit"
        ]
    );

    assert_eq!(found[0].dir, mine);
    assert_eq!(found[0].source, ModelSource::AppFolder);
    assert_eq!(found[0].quantization_bits, Some(8));
    assert_eq!(found[0].size_bytes, 1000);

    let e4b_found = &found[1];
    assert_eq!(e4b_found.dir, e4b.join("snapshots").join("bbb222"));
    assert_eq!(e4b_found.source, ModelSource::HuggingFaceCache);
    assert_eq!(e4b_found.quantization_bits, Some(4));
    assert_eq!(e4b_found.size_bytes, 4096, "sizes follow the symlinks");
    assert_eq!(found[2].dir, e2b.join("snapshots").join("ccc333"));

    let json = serde_json::to_value(e4b_found)?;
    assert_eq!(json["source"], "huggingFaceCache");
    assert_eq!(json["sizeBytes"], 4096);
    assert_eq!(json["quantizationBits"], 4);
    assert!(json["dir"].is_string());
    Ok(())
}

#[test]
fn a_missing_refs_main_snapshot_falls_back_to_another_one() -> Result<()> {
    let root = tempfile::tempdir()?;
    let hub = root.path().join("hub");
    let repo = cached_repo(
        &hub,
        "mlx-community/gemma-4-e4b-it-4bit",
        &[("aaa111", GEMMA4_4BIT)],
        "not-downloaded",
        10,
    )?;
    let found = discover(&root.path().join("no-models-folder"), &HfCache::at(&hub));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].dir, repo.join("snapshots").join("aaa111"));
    Ok(())
}

#[test]
fn missing_folders_find_nothing() {
    let nowhere = Path::new("/nonexistent/gemma-desk-test");
    assert!(discover(nowhere, &HfCache::at(nowhere)).is_empty());
    assert!(discover(nowhere, &HfCache::none()).is_empty());
}

#[test]
fn a_chosen_folder_is_explained_in_plain_words() -> Result<()> {
    let root = tempfile::tempdir()?;
    let message = |dir: &Path| match check_folder(dir) {
        Ok(c) => format!("accepted {}", c.name),
        Err(e) => e.to_string(),
    };

    let good = model_folder(&root.path().join("good"), GEMMA4_4BIT, 10)?;
    let candidate = check_folder(&good)?;
    assert_eq!(candidate.name, "good");
    assert_eq!(candidate.source, ModelSource::UserFolder);

    assert_eq!(
        message(&root.path().join("missing")),
        "this folder does not exist"
    );
    assert_eq!(
        message(&good.join("config.json")),
        "this is a file, not a folder"
    );
    let empty = root.path().join("empty");
    fs::create_dir_all(&empty)?;
    assert_eq!(message(&empty), "this folder has no config.json");

    let broken = model_folder(&root.path().join("broken"), "{ nope", 10)?;
    assert!(message(&broken).starts_with("config.json is not valid JSON: "));
    let llama = model_folder(&root.path().join("llama"), LLAMA, 10)?;
    assert_eq!(
        message(&llama),
        r#"This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B"#
    );
    let untyped = model_folder(&root.path().join("untyped"), "{}", 10)?;
    assert!(message(&untyped).contains("no model_type"));

    let no_tokenizer = model_folder(&root.path().join("no-tok"), GEMMA4_4BIT, 10)?;
    fs::remove_file(no_tokenizer.join("tokenizer.json"))?;
    assert_eq!(message(&no_tokenizer), "this folder has no tokenizer.json");

    let no_weights = model_folder(&root.path().join("no-weights"), GEMMA4_4BIT, 10)?;
    fs::remove_file(no_weights.join("model.safetensors"))?;
    assert_eq!(
        message(&no_weights),
        "this folder has no .safetensors weights"
    );

    let sharded = model_folder(&root.path().join("sharded"), GEMMA4_4BIT, 10)?;
    let index =
        r#"{"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}"#;
    fs::write(sharded.join("model.safetensors.index.json"), index)?;
    assert_eq!(
        message(&sharded),
        "the weights are incomplete: model-00002-of-00002.safetensors is missing"
    );
    assert!(matches!(
        check_folder(&sharded),
        Err(FolderError::MissingWeights(_))
    ));
    fs::write(sharded.join("model-00002-of-00002.safetensors"), [0u8; 5])?;
    assert_eq!(check_folder(&sharded)?.size_bytes, 15);
    Ok(())
}

#[test]
fn another_architecture_or_gemma_4_size_is_refused_in_words() -> Result<()> {
    let root = tempfile::tempdir()?;
    let message = |name: &str, config: &str| -> Result<String> {
        let dir = model_folder(&root.path().join(name), config, 10)?;
        Ok(match check_folder(&dir) {
            Ok(c) => format!("accepted {}", c.name),
            Err(e) => e.to_string(),
        })
    };
    assert_eq!(
        message("qwen", r#"{"model_type": "qwen2"}"#)?,
        r#"This is a Qwen model (model_type "qwen2"); Gemma Desk runs Gemma 4 E4B"#
    );
    assert_eq!(
        message("olmo", r#"{"model_type": "olmo2"}"#)?,
        r#"This is an OLMo model (model_type "olmo2"); Gemma Desk runs Gemma 4 E4B"#
    );
    assert_eq!(
        message("gemma3", r#"{"model_type": "gemma3"}"#)?,
        r#"This is a Gemma 3 model (model_type "gemma3"); Gemma Desk runs Gemma 4 E4B"#
    );
    // A name nobody knows is quoted as data: control characters cannot reach the message.
    assert_eq!(
        message("odd", r#"{"model_type": "zz\u0007top"}"#)?,
        r#"This is another kind of model (model_type "zztop"); Gemma Desk runs Gemma 4 E4B"#
    );
    assert_eq!(
        message(
            "moe",
            r#"{"model_type": "gemma4", "text_config": {"enable_moe_block": true}}"#
        )?,
        "This is Gemma 4 26B A4B (a mixture of experts); Gemma Desk runs Gemma 4 E4B"
    );
    assert_eq!(
        message(
            "big",
            r#"{"model_type": "gemma4", "text_config": {"attention_k_eq_v": true}}"#
        )?,
        "This is Gemma 4 31B (its attention shares keys and values); Gemma Desk runs Gemma 4 E4B"
    );
    assert_eq!(
        message(
            "e4b",
            r#"{"model_type": "gemma4", "text_config": {"enable_moe_block": false}}"#
        )?,
        "accepted e4b"
    );
    Ok(())
}

#[test]
fn a_hugging_face_cache_folder_stands_for_its_snapshot() -> Result<()> {
    let root = tempfile::tempdir()?;
    let hub = root.path().join("hub");
    // refs/main names the older snapshot: it wins over the newer one.
    let repo = cached_repo(
        &hub,
        "mlx-community/gemma-4-e4b-it-8bit",
        &[("old111", GEMMA4_8BIT), ("new222", GEMMA4_4BIT)],
        "old111",
        64,
    )?;
    let main = repo.join("snapshots").join("old111");
    for picked in [repo.clone(), repo.join("snapshots"), main.clone()] {
        let candidate = check_folder(&picked)?;
        assert_eq!(candidate.dir, main, "picked {}", picked.display());
        assert_eq!(candidate.name, "mlx-community/gemma-4-e4b-it-8bit");
        assert_eq!(candidate.quantization_bits, Some(8));
        assert_eq!(candidate.size_bytes, 64);
    }

    // Without a usable refs/main: the newest snapshot.
    let other = cached_repo(
        &hub,
        "me/gemma-copy",
        &[("aaa111", GEMMA4_8BIT), ("bbb222", GEMMA4_4BIT)],
        "gone",
        10,
    )?;
    let newest = other.join("snapshots").join("bbb222");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    fs::File::open(&newest)?.set_modified(later)?;
    assert_eq!(check_folder(&other)?.dir, newest);
    assert_eq!(check_folder(&other)?.name, "me/gemma-copy");

    // A snapshot that is not a model explains itself; a repository with none says so.
    let llama = cached_repo(&hub, "meta/llama", &[("ccc333", LLAMA)], "ccc333", 10)?;
    assert!(check_folder(&llama)
        .unwrap_err()
        .to_string()
        .starts_with("This is a Llama model"));
    let empty = hub.join("models--me--nothing");
    fs::create_dir_all(empty.join("snapshots"))?;
    assert_eq!(
        check_folder(&empty).unwrap_err().to_string(),
        "this Hugging Face cache folder holds no downloaded snapshot"
    );
    Ok(())
}

/// A safetensors file holding `tensors` (name, dtype, shape), with zeroed data.
fn safetensors(path: &Path, tensors: &[(&str, &str, &[u64])]) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * 4;
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let text = serde_json::to_vec(&header)?;
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend(text);
    file.extend(vec![0u8; offset as usize]);
    fs::write(path, file)?;
    Ok(())
}

#[test]
fn a_checkpoint_tells_its_parameters_context_and_towers() -> Result<()> {
    let root = tempfile::tempdir()?;
    let config = r#"{"model_type": "gemma4", "dtype": "bfloat16",
        "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
                         "embed": {"group_size": 32, "bits": 8}},
        "text_config": {"max_position_embeddings": 131072},
        "vision_config": {"hidden_size": 8}, "audio_config": {"hidden_size": 8}}"#;
    let dir = model_folder(&root.path().join("e4b"), config, 0)?;
    safetensors(
        &dir.join("model.safetensors"),
        &[
            // 8 rows of 64 values packed 8 to a u32, one group each: 512 parameters.
            ("layer.weight", "U32", &[8, 8]),
            ("layer.scales", "BF16", &[8, 1]),
            ("layer.biases", "BF16", &[8, 1]),
            // Its own group size: 4 rows of 2 groups of 32 at 8 bits: 256.
            ("embed.weight", "U32", &[4, 16]),
            ("embed.scales", "BF16", &[4, 2]),
            ("norm.weight", "BF16", &[16]),
        ],
    )?;
    let candidate = check_folder(&dir)?;
    assert_eq!(candidate.parameters, Some(512 + 256 + 16));
    assert_eq!(candidate.context_length, Some(131_072));
    assert_eq!(candidate.quantization_bits, Some(4));
    assert_eq!(candidate.quantization_mode.as_deref(), Some("affine"));
    assert_eq!(candidate.dtype.as_deref(), Some("bfloat16"));
    assert!(candidate.vision && candidate.audio);

    // Text only, unquantized, weights that are not safetensors: nothing made up.
    let plain = model_folder(&root.path().join("plain"), GEMMA4_BF16, 10)?;
    let candidate = check_folder(&plain)?;
    assert_eq!(candidate.parameters, None);
    assert_eq!(candidate.context_length, None);
    assert_eq!(candidate.quantization_mode, None);
    assert!(!candidate.vision && !candidate.audio);
    Ok(())
}
