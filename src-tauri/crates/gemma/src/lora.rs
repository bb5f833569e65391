//! LoRA and DoRA adapters over the decoder's projections, read from the formats trainers write
//! (mlx-lm / mlx-vlm `adapters.safetensors`, their legacy form, PEFT `adapter_model.safetensors`)
//! and applied unfused: the base layer's output plus `scale · (x · A) · B`, and for DoRA that
//! sum scaled per output column by `m / ‖W + scale · Bᵀ Aᵀ‖` as mlx-vlm's `DoRALinear` does.
//! The base weights are never rewritten, so an adapter is switched or removed without a reload.
//! Formats, names and what is refused: `docs/ADAPTERS.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};

use crate::config::TextConfig;
use crate::error::{Error, Result};
use crate::layers::LayerSpec;
use crate::weights::read_header;

mod files;

use files::{parse_name, read_f32, read_settings, Part, Settings};

/// A projection an adapter may reach, named as the checkpoint names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    QProj,
    KProj,
    VProj,
    OProj,
    GateProj,
    UpProj,
    DownProj,
    PerLayerInputGate,
    PerLayerProjection,
}

impl Target {
    /// Every target, in the order a layer runs them.
    pub const ALL: [Target; 9] = [
        Target::QProj,
        Target::KProj,
        Target::VProj,
        Target::OProj,
        Target::GateProj,
        Target::UpProj,
        Target::DownProj,
        Target::PerLayerInputGate,
        Target::PerLayerProjection,
    ];

    /// The module's path inside a decoder layer (`self_attn.q_proj`).
    pub fn path(self) -> &'static str {
        match self {
            Target::QProj => "self_attn.q_proj",
            Target::KProj => "self_attn.k_proj",
            Target::VProj => "self_attn.v_proj",
            Target::OProj => "self_attn.o_proj",
            Target::GateProj => "mlp.gate_proj",
            Target::UpProj => "mlp.up_proj",
            Target::DownProj => "mlp.down_proj",
            Target::PerLayerInputGate => "per_layer_input_gate",
            Target::PerLayerProjection => "per_layer_projection",
        }
    }

    /// The module's own name (`q_proj`), as PEFT's `target_modules` lists it.
    pub fn name(self) -> &'static str {
        let path = self.path();
        path.rsplit('.').next().unwrap_or(path)
    }

    /// `(inputs, outputs)` of this projection in layer `spec` of a decoder of `config`.
    fn dims(self, config: &TextConfig, spec: &LayerSpec) -> (usize, usize) {
        let hidden = config.hidden_size;
        let q = config.num_attention_heads * spec.head_dim;
        let kv = config.num_key_value_heads * spec.head_dim;
        let per_layer = config.hidden_size_per_layer_input;
        match self {
            Target::QProj => (hidden, q),
            Target::KProj | Target::VProj => (hidden, kv),
            Target::OProj => (q, hidden),
            Target::GateProj | Target::UpProj => (hidden, spec.mlp_width),
            Target::DownProj => (spec.mlp_width, hidden),
            Target::PerLayerInputGate => (hidden, per_layer),
            Target::PerLayerProjection => (per_layer, hidden),
        }
    }
}

/// Projections the decoder runs as one product (their outputs side by side): an adapter's
/// update of a group is one product too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    /// `q_proj`, or `q_proj | k_proj | v_proj` in layers that own their K/V.
    Qkv,
    O,
    /// `gate_proj | up_proj`.
    GateUp,
    Down,
    PerLayerInputGate,
    PerLayerProjection,
}

impl Group {
    const ALL: [Group; 6] = [
        Group::Qkv,
        Group::O,
        Group::GateUp,
        Group::Down,
        Group::PerLayerInputGate,
        Group::PerLayerProjection,
    ];

    /// The group's projections in output order, in layer `spec`.
    fn parts(self, spec: &LayerSpec) -> &'static [Target] {
        match self {
            Group::Qkv if spec.owns_kv() => &[Target::QProj, Target::KProj, Target::VProj],
            Group::Qkv => &[Target::QProj],
            Group::O => &[Target::OProj],
            Group::GateUp => &[Target::GateProj, Target::UpProj],
            Group::Down => &[Target::DownProj],
            Group::PerLayerInputGate => &[Target::PerLayerInputGate],
            Group::PerLayerProjection => &[Target::PerLayerProjection],
        }
    }
}

/// LoRA, or DoRA (weight-decomposed: a learned magnitude per output column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Lora,
    Dora,
}

/// The file layout an adapter came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// mlx-lm / mlx-vlm: `lora_parameters` and `adapters.safetensors` (`lora_a`, `lora_b`, `m`).
    Mlx,
    /// mlx-vlm's legacy layout: `rank`/`alpha` and `A`, `B`.
    MlxLegacy,
    /// Hugging Face PEFT: `r`/`lora_alpha` and `adapter_model.safetensors`.
    Peft,
}

/// What an adapter is, as its folder says and its tensors confirm.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterInfo {
    pub dir: PathBuf,
    pub format: Format,
    pub method: Method,
    pub rank: usize,
    /// The update's factor (`scale`, `alpha / rank`, or `lora_alpha / √r` with rsLoRA).
    pub scale: f32,
    /// The base model the trainer names, when it names one.
    pub base_model: Option<String>,
    /// The projections the adapter changes, in any layer.
    pub targets: Vec<Target>,
    /// The layers it changes.
    pub layers: Vec<usize>,
    /// Bytes of its weights file.
    pub bytes: u64,
}

/// One group's update: `y + (x · a) · b`, then per output column `× column_scale` (DoRA). The
/// scale is folded into `b`; projections of the group the adapter leaves alone have zero rows
/// in `b` and a column scale of 1.
#[derive(Clone)]
pub(crate) struct Delta {
    /// `[in, Σ rank]`.
    a: Array,
    /// `[Σ rank, Σ out]`, block-diagonal over the group's projections.
    b: Array,
    /// `[Σ out]` in the compute dtype.
    column_scale: Option<Array>,
}

impl Delta {
    /// The base output `y` of `x` with the update applied, in `y`'s dtype.
    pub fn apply(&self, x: &Array, y: &Array) -> Result<Array> {
        let z = x.matmul(&self.a)?.matmul(&self.b)?;
        let out = y.add(z.as_dtype(y.dtype())?)?;
        Ok(match &self.column_scale {
            Some(scale) => out.multiply(scale)?,
            None => out,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.a, &self.b];
        out.extend(self.column_scale.iter());
        out
    }
}

/// The updates of one decoder layer, by group.
#[derive(Clone, Default)]
pub(crate) struct LayerAdapter {
    pub qkv: Option<Delta>,
    pub o: Option<Delta>,
    pub gate_up: Option<Delta>,
    pub down: Option<Delta>,
    pub per_layer_input_gate: Option<Delta>,
    pub per_layer_projection: Option<Delta>,
}

impl LayerAdapter {
    fn slot(&mut self, group: Group) -> &mut Option<Delta> {
        match group {
            Group::Qkv => &mut self.qkv,
            Group::O => &mut self.o,
            Group::GateUp => &mut self.gate_up,
            Group::Down => &mut self.down,
            Group::PerLayerInputGate => &mut self.per_layer_input_gate,
            Group::PerLayerProjection => &mut self.per_layer_projection,
        }
    }
}

/// An adapter made for one base model, ready to apply: cheap to clone (the arrays are shared),
/// so several can be kept and switched with [`crate::Model::set_adapter`].
#[derive(Clone)]
pub struct Adapter {
    info: AdapterInfo,
    layers: Vec<LayerAdapter>,
    /// Hidden size and layer count of the base it was checked against.
    base: (usize, usize),
}

impl Adapter {
    /// What the adapter is.
    pub fn info(&self) -> &AdapterInfo {
        &self.info
    }

    /// Layer `index`'s updates (`None` where it changes nothing there).
    pub(crate) fn layer(&self, index: usize) -> Option<&LayerAdapter> {
        self.layers.get(index)
    }

    /// Whether it was checked against a decoder of this geometry.
    pub(crate) fn fits(&self, config: &TextConfig) -> bool {
        self.base == (config.hidden_size, config.num_hidden_layers)
    }

    /// Every array (to evaluate them at load).
    pub(crate) fn arrays(&self) -> Vec<&Array> {
        self.layers
            .iter()
            .flat_map(|l| {
                [
                    &l.qkv,
                    &l.o,
                    &l.gate_up,
                    &l.down,
                    &l.per_layer_input_gate,
                    &l.per_layer_projection,
                ]
            })
            .flatten()
            .flat_map(Delta::arrays)
            .collect()
    }
}

/// One projection's factors as read: `a` `[in, r]`, `b` `[r, out]` (row-major, float32), and
/// DoRA's magnitude `[out]`.
#[derive(Default)]
struct Factors {
    a: Option<(Vec<f32>, Vec<usize>, String)>,
    b: Option<(Vec<f32>, Vec<usize>, String)>,
    m: Option<(Vec<f32>, Vec<usize>, String)>,
}

/// The dense weight `[out, in]` of a base projection (for DoRA's norms).
pub(crate) type BaseWeight<'a> = &'a dyn Fn(usize, Target) -> Result<Option<Array>>;

/// Reads and checks the adapter in `dir` against a decoder of `config` (`table` its layers),
/// computing in `dtype`; `base_weight` gives a base projection's dense weight (DoRA). Every
/// problem is reported at once, each naming its tensor; nothing is applied unless all is well.
pub(crate) fn load(
    dir: &Path,
    config: &TextConfig,
    table: &[LayerSpec],
    dtype: Dtype,
    base_weight: BaseWeight<'_>,
) -> Result<Adapter> {
    let settings = read_settings(dir)?;
    let refuse = |message: String| Error::Adapter {
        path: dir.to_path_buf(),
        message,
    };
    let headers = read_header(&settings.weights)?;
    let bytes = std::fs::metadata(&settings.weights)
        .map(|m| m.len())
        .unwrap_or(0);
    let mut problems = Vec::new();
    let mut found: BTreeMap<(usize, Target), Factors> = BTreeMap::new();
    let mut file = File::open(&settings.weights).map_err(|source| Error::Io {
        path: settings.weights.clone(),
        source,
    })?;
    for (name, header) in &headers {
        let Some((layer, target, part)) = parse_name(name) else {
            problems.push(format!(
                "tensor {name} is not a LoRA factor of a decoder layer's attention, MLP or \
                 per-layer-input projection (the only modules adapters reach here)"
            ));
            continue;
        };
        let Some(spec) = table.get(layer) else {
            problems.push(format!(
                "tensor {name} is for layer {layer}, but the base model has {} layers",
                table.len()
            ));
            continue;
        };
        if settings.format == Format::Peft {
            if let Some(modules) = &settings.target_modules {
                // A suffix (`q_proj`) or a longer name ending in one (`self_attn.q_proj`).
                let listed =
                    |m: &String| m == target.name() || m.ends_with(&format!(".{}", target.name()));
                if !modules.iter().any(listed) {
                    problems.push(format!(
                        "tensor {name} targets {}, which adapter_config.json's target_modules \
                         does not list",
                        target.name()
                    ));
                }
            }
        }
        if matches!(target, Target::KProj | Target::VProj) && !spec.owns_kv() {
            // A layer reading another layer's K/V runs no k/v projection: the factor changes
            // nothing (the reference drops those modules too).
            continue;
        }
        if matches!(
            target,
            Target::PerLayerInputGate | Target::PerLayerProjection
        ) && config.hidden_size_per_layer_input == 0
        {
            problems.push(format!(
                "tensor {name} targets {}, which this base model does not have",
                target.path()
            ));
            continue;
        }
        let values = match read_f32(&mut file, header) {
            Ok(v) => v,
            Err(message) => {
                problems.push(format!("tensor {name}: {message}"));
                continue;
            }
        };
        if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
            problems.push(format!(
                "tensor {name} holds a non-finite value ({} at element {bad})",
                values[bad]
            ));
            continue;
        }
        let (inp, out) = target.dims(config, spec);
        let shape = header.shape.clone();
        let (rows_cols, expected): (Option<(usize, usize)>, String) = match part {
            Part::A { .. } | Part::B { .. } if shape.len() != 2 => (None, "a matrix".to_string()),
            Part::A { transposed } => {
                let (i, r) = if transposed {
                    (shape[1], shape[0])
                } else {
                    (shape[0], shape[1])
                };
                (
                    (i == inp).then_some((i, r)),
                    format!("{inp} inputs (the base {} of layer {layer})", target.path()),
                )
            }
            Part::B { transposed } => {
                let (r, o) = if transposed {
                    (shape[1], shape[0])
                } else {
                    (shape[0], shape[1])
                };
                (
                    (o == out).then_some((r, o)),
                    format!(
                        "{out} outputs (the base {} of layer {layer})",
                        target.path()
                    ),
                )
            }
            Part::Magnitude => (
                (shape == [out]).then_some((out, 1)),
                format!(
                    "shape [{out}] (the base {} of layer {layer})",
                    target.path()
                ),
            ),
        };
        let Some((d0, d1)) = rows_cols else {
            problems.push(format!(
                "tensor {name} has shape {shape:?}, but needs {expected}: the adapter was made \
                 for another base model{}",
                settings
                    .base_model
                    .as_ref()
                    .map(|b| format!(" ({b})"))
                    .unwrap_or_default()
            ));
            continue;
        };
        let rank = match part {
            Part::A { .. } => Some(d1),
            Part::B { .. } => Some(d0),
            Part::Magnitude => None,
        };
        if let Some(r) = rank.filter(|&r| r != settings.rank) {
            problems.push(format!(
                "tensor {name} has rank {r}, but adapter_config.json says rank {}",
                settings.rank
            ));
            continue;
        }
        let values = match part {
            Part::A { transposed: true } | Part::B { transposed: true } => {
                transpose(&values, shape[0], shape[1])
            }
            _ => values,
        };
        let entry = found.entry((layer, target)).or_default();
        let slot = match part {
            Part::A { .. } => &mut entry.a,
            Part::B { .. } => &mut entry.b,
            Part::Magnitude => &mut entry.m,
        };
        if slot.is_some() {
            problems.push(format!(
                "tensor {name} repeats a factor of layer {layer}'s {}",
                target.path()
            ));
        }
        *slot = Some((values, vec![d0, d1], name.clone()));
    }
    for ((layer, target), factors) in &found {
        let what = format!("layer {layer}'s {}", target.path());
        match (&factors.a, &factors.b) {
            (Some(_), Some(_)) => {}
            (Some((_, _, n)), None) | (None, Some((_, _, n))) => problems.push(format!(
                "tensor {n} has no partner factor ({what} needs both)"
            )),
            (None, None) => {
                problems.push(format!("{what} has a DoRA magnitude but no LoRA factors"))
            }
        }
        match (settings.method, &factors.m) {
            (Method::Dora, None) => problems.push(format!(
                "{what} has no DoRA magnitude (`m` / `lora_magnitude_vector`), which a DoRA \
                 adapter needs"
            )),
            (Method::Lora, Some((_, _, n))) => problems.push(format!(
                "tensor {n} is a DoRA magnitude, but adapter_config.json says plain LoRA"
            )),
            _ => {}
        }
    }
    if found.is_empty() && problems.is_empty() {
        problems.push(format!(
            "{} holds no LoRA factors",
            settings.weights.display()
        ));
    }
    if !problems.is_empty() {
        return Err(refuse(problems.join("\n")));
    }

    let mut layers = vec![LayerAdapter::default(); table.len()];
    for spec in table {
        for group in Group::ALL {
            let parts = group.parts(spec);
            if !parts.iter().any(|t| found.contains_key(&(spec.index, *t))) {
                continue;
            }
            let delta = build_delta(&settings, config, spec, parts, &found, dtype, base_weight)?;
            *layers[spec.index].slot(group) = Some(delta);
        }
    }
    let targets: BTreeSet<Target> = found.keys().map(|(_, t)| *t).collect();
    let layer_set: BTreeSet<usize> = found.keys().map(|(l, _)| *l).collect();
    let adapter = Adapter {
        info: AdapterInfo {
            dir: dir.to_path_buf(),
            format: settings.format,
            method: settings.method,
            rank: settings.rank,
            scale: settings.scale,
            base_model: settings.base_model,
            targets: targets.into_iter().collect(),
            layers: layer_set.into_iter().collect(),
            bytes,
        },
        layers,
        base: (config.hidden_size, config.num_hidden_layers),
    };
    mlx_rs::transforms::eval(adapter.arrays())?;
    Ok(adapter)
}

/// One group's [`Delta`]: the factors of its projections side by side.
fn build_delta(
    settings: &Settings,
    config: &TextConfig,
    spec: &LayerSpec,
    parts: &[Target],
    found: &BTreeMap<(usize, Target), Factors>,
    dtype: Dtype,
    base_weight: BaseWeight<'_>,
) -> Result<Delta> {
    let r = settings.rank;
    let inp = parts[0].dims(config, spec).0;
    let outs: Vec<usize> = parts.iter().map(|t| t.dims(config, spec).1).collect();
    let total_out: usize = outs.iter().sum();
    let present: Vec<(usize, &Factors)> = parts
        .iter()
        .enumerate()
        .filter_map(|(i, t)| found.get(&(spec.index, *t)).map(|f| (i, f)))
        .collect();
    let ranks = present.len() * r;
    let mut a = vec![0f32; inp * ranks];
    let mut b = vec![0f32; ranks * total_out];
    let mut scales: Vec<Array> = Vec::new();
    for (slot, (i, factors)) in present.iter().enumerate() {
        let (Some((fa, _, _)), Some((fb, _, _))) = (&factors.a, &factors.b) else {
            continue;
        };
        let col0: usize = outs[..*i].iter().sum();
        for row in 0..inp {
            a[row * ranks + slot * r..row * ranks + slot * r + r]
                .copy_from_slice(&fa[row * r..row * r + r]);
        }
        for k in 0..r {
            let dst = (slot * r + k) * total_out + col0;
            for (d, s) in b[dst..dst + outs[*i]]
                .iter_mut()
                .zip(&fb[k * outs[*i]..(k + 1) * outs[*i]])
            {
                *d = s * settings.scale;
            }
        }
    }
    if settings.method == Method::Dora {
        for (i, target) in parts.iter().enumerate() {
            let scale = match found.get(&(spec.index, *target)) {
                Some(Factors {
                    a: Some((fa, _, _)),
                    b: Some((fb, _, _)),
                    m: Some((fm, _, _)),
                }) => {
                    let weight = base_weight(spec.index, *target)?.ok_or_else(|| {
                        Error::Input(format!(
                            "layer {}'s {} has no base weight to normalize",
                            spec.index,
                            target.path()
                        ))
                    })?;
                    dora_scale(&weight, fa, fb, fm, inp, r, outs[i], settings.scale, dtype)?
                }
                _ => mlx_rs::ops::ones::<f32>(&[outs[i] as i32])?.as_dtype(dtype)?,
            };
            scales.push(scale);
        }
    }
    let column_scale = match scales.len() {
        0 => None,
        1 => scales.pop(),
        _ => Some(mlx_rs::ops::concatenate(&scales, 0)?),
    };
    Ok(Delta {
        a: Array::from_slice(&a, &[inp as i32, ranks as i32]),
        b: Array::from_slice(&b, &[ranks as i32, total_out as i32]),
        column_scale,
    })
}

/// DoRA's column factor `m / ‖W + scale · Bᵀ Aᵀ‖` (row norms of the adapted weight, float32),
/// cast to the compute dtype as mlx-vlm's `DoRALinear` casts it.
#[allow(clippy::too_many_arguments)]
fn dora_scale(
    weight: &Array,
    a: &[f32],
    b: &[f32],
    m: &[f32],
    inp: usize,
    r: usize,
    out: usize,
    scale: f32,
    dtype: Dtype,
) -> Result<Array> {
    let a_t = Array::from_slice(&transpose(a, inp, r), &[r as i32, inp as i32]);
    let b_t = Array::from_slice(&transpose(b, r, out), &[out as i32, r as i32])
        .multiply(Array::from_f32(scale))?;
    let adapted = weight.add(b_t.matmul(&a_t)?)?.as_dtype(Dtype::Float32)?;
    let norm = adapted.square()?.sum_axis(1, false)?.sqrt()?;
    let m = Array::from_slice(m, &[out as i32]);
    Ok(m.divide(&norm)?.as_dtype(dtype)?)
}

fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_swaps_rows_and_columns() {
        assert_eq!(
            transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
            [1., 4., 2., 5., 3., 6.]
        );
    }
}
