//! Whether a model fits the machine, and the defaults the machine suggests: read before a load
//! from the checkpoint's headers and config (no weight is loaded) and from
//! [`gemma::memory::device_info`]. See `docs/MODEL.md` ("Knowing the machine").
//!
//! What a model needs in MLX memory: its weights as stored, less the per-layer token table
//! (read from the file a row at a time unless `LoadOptions::ple_resident`) and the vision and
//! audio towers (counted apart: held while an image or a recording is read); the K/V caches of
//! one conversation of the chosen context; and room for a step's transients and MLX's buffer
//! cache. It must fit the machine's working set (Metal's recommended working-set size, else
//! its memory): beyond it the system pages, and a model in swap answers a word a minute.

use std::fmt;
use std::path::Path;

use gemma::config::AttentionKind;
use gemma::memory::{DeviceInfo, DEFAULT_CACHE_LIMIT};
use gemma::{Config, LoadOptions};

const GB: f64 = 1e9;
const GIB: u64 = 1 << 30;

/// Transients of a step beyond the weights and the caches (a prefill chunk's activations and
/// logits), on top of MLX's buffer cache ([`DEFAULT_CACHE_LIMIT`]).
pub const TRANSIENT_BYTES: u64 = 512 << 20;

/// The parts of a checkpoint the memory table names (`gemma-desk-bench --memory`), in its order.
pub const PARTS: [&str; 7] = [
    "decoder layers",
    "embedding / tied head",
    "PLE table",
    "PLE projection",
    "vision tower",
    "audio tower",
    "other",
];

/// The part a checkpoint tensor belongs to (one of [`PARTS`]).
pub fn part_of(name: &str) -> &'static str {
    let text = "language_model.model.";
    match name.strip_prefix(text) {
        Some(rest) if rest.starts_with("layers.") => "decoder layers",
        Some(rest) if rest.starts_with("embed_tokens_per_layer.") => "PLE table",
        Some(rest) if rest.starts_with("embed_tokens.") => "embedding / tied head",
        Some(rest)
            if rest.starts_with("per_layer_model_projection.")
                || rest.starts_with("per_layer_projection_norm.") =>
        {
            "PLE projection"
        }
        _ if name.starts_with("vision_tower.") || name.starts_with("embed_vision.") => {
            "vision tower"
        }
        _ if name.starts_with("audio_tower.") || name.starts_with("embed_audio.") => "audio tower",
        _ => "other",
    }
}

/// Bytes of the checkpoint in `dir` by part (every one of [`PARTS`], in order), as stored: read
/// from the safetensors headers only.
pub fn stored_by_part(dir: &Path) -> gemma::Result<Vec<(&'static str, u64)>> {
    Ok(by_part(&headers(dir)?))
}

/// Every tensor header of the checkpoint in `dir`.
fn headers(dir: &Path) -> gemma::Result<Vec<(String, gemma::weights::TensorHeader)>> {
    let mut all = Vec::new();
    for path in gemma::weights::checkpoint_files(dir)? {
        all.extend(gemma::weights::read_header(&path)?);
    }
    Ok(all)
}

fn by_part(headers: &[(String, gemma::weights::TensorHeader)]) -> Vec<(&'static str, u64)> {
    let mut sums = [0u64; PARTS.len()];
    for (name, h) in headers {
        let bytes = h.shape.iter().product::<usize>() as u64 * h.dtype.bitsize() as u64 / 8;
        let part = PARTS.iter().position(|p| *p == part_of(name)).unwrap_or(6);
        sums[part] += bytes;
    }
    PARTS.iter().copied().zip(sums).collect()
}

/// What a checkpoint needs in MLX memory, estimated before loading it (the default: nothing).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Needs {
    /// Weights held from the load on: decoder layers, embedding / tied head, PLE projection
    /// and the rest (and the PLE table when it is held resident).
    pub weights: u64,
    /// The per-layer token table as stored, read from the file (0 in MLX) unless resident.
    pub ple_table: u64,
    /// The vision and audio towers: held while a question with an image or a recording is read.
    pub towers: u64,
    /// The K/V cache of each layer that owns one.
    kv_layers: Vec<KvLayer>,
}

/// One layer's K/V cache, in the terms `gemma::Model::kv_bytes` counts it in.
#[derive(Debug, Clone, PartialEq)]
struct KvLayer {
    /// K and V values a position adds (2 × K/V heads × head size).
    values_per_position: usize,
    /// Bytes a value takes: the activation dtype's, or with quantized K/V its bits plus a
    /// scale and a bias (in the dtype) per group.
    bytes_per_value: f64,
    /// Positions held whatever the context (a sliding layer's buffer); `None`: a full layer's,
    /// which grows with the context.
    fixed: Option<usize>,
}

impl Needs {
    /// Reads `dir`'s config and safetensors headers (not its weights) for a load with `options`
    /// (and, with `options.kv_quantization`, its `kv_config.json`).
    pub fn of(dir: &Path, options: &LoadOptions) -> gemma::Result<Self> {
        let config = Config::load(dir)?;
        let headers = headers(dir)?;
        let parts = by_part(&headers);
        let part = |name: &str| {
            parts
                .iter()
                .find(|(p, _)| *p == name)
                .map_or(0, |(_, bytes)| *bytes)
        };
        let ple_table = part("PLE table");
        let weights = part("decoder layers")
            + part("embedding / tied head")
            + part("PLE projection")
            + part("other");
        let towers = part("vision tower")
            + if config.audio.is_some() {
                part("audio tower")
            } else {
                0
            };
        // The K/V caches in the activation dtype (bf16 unless the checkpoint computes in
        // float32), with the opt-in K/V bits where asked for, as `gemma::Model::kv_bytes`
        // counts them.
        let dtype_bytes = match options.dtype {
            Some(mlx_rs::Dtype::Float32) => 4.0,
            Some(_) => 2.0,
            // The checkpoint's own, as the model chooses it: its final norm's.
            None => match headers
                .iter()
                .find(|(name, _)| name == "language_model.model.norm.weight")
            {
                Some((_, h)) if h.dtype == safetensors::Dtype::F32 => 4.0,
                _ => 2.0,
            },
        };
        let text = &config.text;
        let mut table = gemma::layers::layer_table(text)?;
        if options.kv_quantization {
            gemma::model::apply_kv_config(dir, &mut table)?;
        }
        let kv_layers = table
            .iter()
            .filter(|l| l.owns_kv())
            .map(|l| KvLayer {
                values_per_position: 2 * text.num_key_value_heads * l.head_dim,
                bytes_per_value: match l.kv_quant {
                    Some(q) => q.bits as f64 / 8.0 + 2.0 * dtype_bytes / q.group_size as f64,
                    None => dtype_bytes,
                },
                fixed: (l.kind == AttentionKind::Sliding)
                    .then(|| gemma::cache::sliding_capacity(text.sliding_window)),
            })
            .collect();
        let needs = Self {
            weights,
            ple_table,
            towers,
            kv_layers,
        };
        Ok(if options.ple_resident {
            needs.with_ple_table()
        } else {
            needs
        })
    }

    /// The same needs for a load that holds the per-layer token table in MLX memory
    /// (`LoadOptions::ple_resident`): what [`Needs::of`] gives with it, without reading the
    /// headers again.
    pub fn with_ple_table(self) -> Self {
        Self {
            weights: self.weights + self.ple_table,
            ..self
        }
    }

    /// K/V bytes of one conversation of `positions` (the full layers' buffers grow in steps of
    /// `gemma::cache::FULL_STEP`; the sliding layers' hold their window).
    pub fn kv_bytes(&self, positions: usize) -> u64 {
        self.kv_layers
            .iter()
            .map(|l| {
                let held = l
                    .fixed
                    .unwrap_or_else(|| gemma::cache::full_capacity(positions));
                ((held * l.values_per_position) as f64 * l.bytes_per_value).ceil() as u64
            })
            .sum()
    }

    /// Everything held with a conversation of `context` positions: weights, its K/V, and room
    /// for transients and MLX's buffer cache; with the towers when `towers`.
    pub fn total(&self, context: usize, towers: bool) -> u64 {
        self.weights
            + self.kv_bytes(context)
            + if towers { self.towers } else { 0 }
            + TRANSIENT_BYTES
            + DEFAULT_CACHE_LIMIT as u64
    }
}

/// What the machine offers, in the figures the check uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// What the model may hold (the recommended working set), in bytes.
    pub working_set: u64,
    /// The machine's memory, in bytes.
    pub memory: u64,
}

impl Room {
    /// The figures of `device`; `None` where neither MLX nor the system gave any.
    pub fn of(device: &DeviceInfo) -> Option<Self> {
        let memory = device.memory_bytes?;
        Some(Self {
            working_set: device.working_set_bytes.unwrap_or(memory).min(memory),
            memory,
        })
    }
}

/// A model that does not fit: the numbers, and what would help, for the words the user reads.
#[derive(Debug, Clone, PartialEq)]
pub struct NoFit {
    /// Bytes needed with the context asked for (towers not counted).
    pub needs: u64,
    /// The context asked for, in positions.
    pub context: usize,
    /// What the machine offers.
    pub room: Room,
    /// Whether the shortest context ([`MIN_CONTEXT`]) would fit.
    pub shorter_context_fits: bool,
    /// Whether the weights are stored in more than 4 bits a value (a 4-bit checkpoint is smaller).
    pub smaller_quantization_exists: bool,
}

/// The shortest context the check suggests.
pub const MIN_CONTEXT: usize = 4096;

impl fmt::Display for NoFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let machine = if cfg!(target_os = "macos") {
            "this Mac"
        } else {
            "this computer"
        };
        write!(
            f,
            "it needs about {:.1} GB of memory with a {}-token context, and {machine} has {:.1} GB \
             for it ({:.1} GB in all): it would run out of memory. ",
            self.needs as f64 / GB,
            self.context,
            self.room.working_set as f64 / GB,
            self.room.memory as f64 / GB,
        )?;
        let mut helps = Vec::new();
        if self.shorter_context_fits {
            helps.push(format!(
                "set a shorter context length in Settings (such as {MIN_CONTEXT} tokens)"
            ));
        }
        if self.smaller_quantization_exists {
            helps.push("choose a 4-bit version of the model".to_owned());
        }
        helps.push("close other apps and try again".to_owned());
        if helps.len() == 1 && !self.shorter_context_fits {
            helps.insert(0, "choose a smaller model".to_owned());
        }
        write!(f, "To load it, {}.", join_or(&helps))
    }
}

impl std::error::Error for NoFit {}

/// "a, b or c".
fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Checks that a model of `needs` with a conversation of `context` positions fits `room`
/// (towers are not counted: they are loaded when used). `bits`: the weights' quantization.
pub fn check(needs: &Needs, context: usize, room: Room, bits: Option<u32>) -> Result<(), NoFit> {
    let total = needs.total(context, false);
    if total <= room.working_set {
        return Ok(());
    }
    Err(NoFit {
        needs: total,
        context,
        room,
        shorter_context_fits: context > MIN_CONTEXT
            && needs.total(MIN_CONTEXT, false) <= room.working_set,
        smaller_quantization_exists: bits.is_none_or(|b| b > 4),
    })
}

/// Defaults chosen from the machine (`docs/MODEL.md`, "Knowing the machine").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineDefaults {
    /// Positions a conversation may use unless the user chose.
    pub context_length: usize,
    /// Whether speculative decoding ("Faster answers") is on unless the user chose.
    pub drafting: bool,
    /// Whether the vision and audio towers stay loaded between questions that use them.
    pub towers_warm: bool,
    /// Whether the per-layer token table is held in MLX memory (`LoadOptions::ple_resident`)
    /// instead of read from the file a row at a time: reading the rows needs each step's id on
    /// the host before the next step can be built, which costs decode speed (bench/results.md,
    /// "PLE rows from the file"), so a machine with room to spare keeps the table resident.
    pub ple_resident: bool,
}

/// The context lengths offered as defaults, longest first.
const CONTEXTS: [usize; 3] = [16_384, 8192, MIN_CONTEXT];

impl MachineDefaults {
    /// The defaults for a model of `needs` on `device`:
    /// - context: 16k (8k on a machine of 8 GB or less), shortened while it does not fit;
    /// - drafting: on Metal only from Apple GPU generation 15 (M3) on, whose few-row quantized
    ///   kernel (`qmv_wide`) reads the weights once for a verify of 2–5 rows (on M1/M2 a
    ///   verify of 4 rows costs about 4 steps, so drafting loses); on other backends, on;
    /// - towers warm: when the model with its towers and the context still leaves a quarter of
    ///   the working set free;
    /// - PLE table resident: when the model with the table and the context still leaves half
    ///   the working set free (a 32 GB Mac, not an 8 or 16 GB one); where the machine's memory
    ///   is not known, read from the file.
    ///
    /// `needs` is the estimate for a load with the table read from the file.
    pub fn choose(device: &DeviceInfo, needs: &Needs) -> Self {
        let room = Room::of(device);
        let longest = match room {
            Some(room) if room.memory <= 8 * GIB => 8192,
            _ => CONTEXTS[0],
        };
        let context_length = CONTEXTS
            .iter()
            .copied()
            .filter(|&c| c <= longest)
            .find(|&c| room.is_none_or(|r| needs.total(c, false) <= r.working_set))
            .unwrap_or(MIN_CONTEXT);
        let drafting = match device.backend.as_str() {
            "metal" => device.gpu_generation().is_some_and(|g| g >= 15),
            _ => true,
        };
        let towers_warm = room
            .is_none_or(|r| needs.total(context_length, true) <= r.working_set - r.working_set / 4);
        let ple_resident = room.is_some_and(|r| {
            needs.total(context_length, false) + needs.ple_table <= r.working_set / 2
        });
        Self {
            context_length,
            drafting,
            towers_warm,
            ple_resident,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    /// E4B at 4 bits as the mlx-community layout stores it (bench/results.md): ~2.9 GB held,
    /// the PLE table 1.59 GB, towers ~0.9 GB; 4 full layers of 2 KV heads of 512, 20 sliding
    /// of 256 holding 640 positions; bf16 K/V.
    fn e4b() -> Needs {
        let layer = |head_dim: usize, fixed: Option<usize>| KvLayer {
            values_per_position: 2 * 2 * head_dim,
            bytes_per_value: 2.0,
            fixed,
        };
        Needs {
            weights: 2_900_000_000,
            ple_table: 1_590_000_000,
            towers: 900_000_000,
            kv_layers: std::iter::repeat_n(layer(512, None), 4)
                .chain(std::iter::repeat_n(layer(256, Some(640)), 20))
                .collect(),
        }
    }

    /// Bytes of the sliding layers' buffers in [`e4b`].
    const E4B_SLIDING: u64 = 20 * 2 * 2 * 256 * 2 * 640;

    fn mac(memory: u64, working_set: u64, architecture: &str) -> DeviceInfo {
        DeviceInfo {
            backend: "metal".into(),
            device_name: Some("Apple M".into()),
            architecture: Some(architecture.into()),
            memory_bytes: Some(memory),
            working_set_bytes: Some(working_set),
        }
    }

    fn cpu(memory: Option<u64>) -> DeviceInfo {
        DeviceInfo {
            backend: "cpu".into(),
            device_name: Some("AMD EPYC".into()),
            architecture: Some("x86_64".into()),
            memory_bytes: memory,
            working_set_bytes: memory,
        }
    }

    #[test]
    fn tensors_are_sorted_into_the_parts_of_the_memory_table() {
        let cases = [
            (
                "language_model.model.layers.3.mlp.up_proj.weight",
                "decoder layers",
            ),
            (
                "language_model.model.embed_tokens.scales",
                "embedding / tied head",
            ),
            (
                "language_model.model.embed_tokens_per_layer.weight",
                "PLE table",
            ),
            (
                "language_model.model.per_layer_model_projection.weight",
                "PLE projection",
            ),
            ("vision_tower.encoder.layers.0.weight", "vision tower"),
            ("embed_audio.embedding_projection.weight", "audio tower"),
            ("language_model.model.norm.weight", "other"),
        ];
        for (name, part) in cases {
            assert_eq!(part_of(name), part, "{name}");
        }
    }

    #[test]
    fn kv_grows_with_the_full_layers_only() {
        let needs = e4b();
        // 4 full layers × 2 (K, V) × 2 heads × 512 × 2 bytes = 16 KiB a position.
        assert_eq!(needs.kv_bytes(16_384) - needs.kv_bytes(8192), 8192 * 16_384);
        assert_eq!(
            needs.kv_bytes(1) - E4B_SLIDING,
            256 * 16_384,
            "a 256-position step"
        );
    }

    #[test]
    fn a_model_that_fits_passes_and_one_that_does_not_says_what_would_help() {
        let needs = e4b();
        let big = Room {
            working_set: 11 * GB,
            memory: 16 * GB,
        };
        assert_eq!(check(&needs, 131_072, big, Some(4)), Ok(()));

        // 4.3 GB of working set: 128k does not fit (2.9 + 2.2 of K/V + 1.07 of room), 4k does.
        let small = Room {
            working_set: 4_300_000_000,
            memory: 8 * GB,
        };
        let err = check(&needs, 131_072, small, Some(8)).unwrap_err();
        assert!(err.shorter_context_fits && err.smaller_quantization_exists);
        let words = err.to_string();
        assert!(words.contains("131072-token context"), "{words}");
        assert!(
            words.contains("has 4.3 GB for it (8.0 GB in all)"),
            "{words}"
        );
        assert!(words.contains("shorter context length"), "{words}");
        assert!(words.contains("4-bit version"), "{words}");
        assert!(words.contains("close other apps"), "{words}");

        // Nothing fits: a 4-bit model at the shortest context still does not.
        let tiny = Room {
            working_set: 2 * GB,
            memory: 4 * GB,
        };
        let err = check(&needs, MIN_CONTEXT, tiny, Some(4)).unwrap_err();
        let words = err.to_string();
        assert!(!words.contains("shorter context"), "{words}");
        assert!(!words.contains("4-bit"), "{words}");
        assert!(
            words.contains("choose a smaller model or close other apps"),
            "{words}"
        );
    }

    #[test]
    fn the_per_layer_table_and_the_towers_count_only_when_held() {
        let needs = e4b();
        let base = needs.total(4096, false);
        assert_eq!(needs.total(4096, true) - base, needs.towers);
        assert!(
            base < needs.weights + needs.ple_table,
            "the PLE table is read from the file"
        );
    }

    #[test]
    fn an_8_gb_mac_gets_a_shorter_context_and_no_towers_kept_warm() {
        let needs = e4b();
        let m1_8gb = mac(8 * GIB, 5_700_000_000, "applegpu_g13g");
        let d = MachineDefaults::choose(&m1_8gb, &needs);
        assert_eq!(d.context_length, 8192);
        assert!(!d.towers_warm);
        let m3_36gb = mac(36 * GIB, 28 * GB, "applegpu_g15s");
        let d = MachineDefaults::choose(&m3_36gb, &needs);
        assert_eq!(d.context_length, 16_384);
        assert!(d.towers_warm);
        // A working set too small for 8k: the default steps down to what fits.
        let cramped = mac(8 * GIB, 4_100_000_000, "applegpu_g15s");
        assert_eq!(
            MachineDefaults::choose(&cramped, &needs).context_length,
            4096
        );
    }

    #[test]
    fn only_a_mac_with_room_to_spare_keeps_the_per_layer_table_in_memory() {
        let needs = e4b();
        let resident = |device: &DeviceInfo| MachineDefaults::choose(device, &needs).ple_resident;
        assert!(
            !resident(&mac(8 * GIB, 5_700_000_000, "applegpu_g15s")),
            "8 GB"
        );
        assert!(!resident(&mac(16 * GIB, 11 * GB, "applegpu_g15s")), "16 GB");
        assert!(resident(&mac(32 * GIB, 22 * GB, "applegpu_g15s")), "32 GB");
        assert!(!resident(&cpu(None)), "memory not known");
        assert!(resident(&cpu(Some(64 * GIB))), "a CPU machine of 64 GB");
    }

    #[test]
    fn drafting_is_on_by_default_on_m3_and_later_and_off_on_m1_and_m2() {
        let needs = e4b();
        let drafting =
            |arch: &str| MachineDefaults::choose(&mac(16 * GIB, 11 * GB, arch), &needs).drafting;
        assert!(!drafting("applegpu_g13g"), "M1");
        assert!(!drafting("applegpu_g14s"), "M2");
        assert!(drafting("applegpu_g15s"), "M3");
        assert!(drafting("applegpu_g16p"), "M4");
        assert!(!drafting("something new"), "unknown GPU: not assumed fast");
        // CPU and CUDA keep today's default: on.
        assert!(MachineDefaults::choose(&cpu(Some(24 * GIB)), &needs).drafting);
        let mut cuda = cpu(Some(80 * GIB));
        cuda.backend = "cuda-13".into();
        assert!(MachineDefaults::choose(&cuda, &needs).drafting);
    }

    #[test]
    fn a_machine_that_gives_no_memory_figure_keeps_the_defaults() {
        let d = MachineDefaults::choose(&cpu(None), &e4b());
        assert_eq!(
            d,
            MachineDefaults {
                context_length: 16_384,
                drafting: true,
                towers_warm: true,
                ple_resident: false,
            }
        );
        assert_eq!(Room::of(&cpu(None)), None);
    }
}
