//! One decoder layer and its blocks, named as the checkpoint names them: attention, the GeGLU
//! MLP and the per-layer input gate, each with its pre/post RMSNorms.

use mlx_rs::fast;
use mlx_rs::Array;

use crate::attention::Attention;
use crate::config::TextConfig;
use crate::error::{Error, Result};
use crate::fused::{add_scaled, geglu};
use crate::kv::StepKv;
use crate::layers::LayerSpec;
use crate::lora::{LayerAdapter, Target};
use crate::quant::{Linear, SideBySide};
use crate::weights::Weights;

/// The GeGLU feed-forward block (`mlp`).
pub(crate) struct Mlp {
    /// `gate_proj | up_proj` side by side.
    gate_up_proj: SideBySide,
    down_proj: Linear,
}

impl Mlp {
    fn load(weights: &Weights<'_>, hidden: usize, width: usize) -> Result<Self> {
        let gate_proj = Linear::load(&weights.at("gate_proj"), width, hidden)?;
        let up_proj = Linear::load(&weights.at("up_proj"), width, hidden)?;
        let down_proj = Linear::load(&weights.at("down_proj"), hidden, width)?;
        Ok(Self {
            gate_up_proj: SideBySide::new(vec![gate_proj, up_proj])?,
            down_proj,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.gate_up_proj.arrays();
        out.extend(self.down_proj.arrays());
        out
    }

    /// `down_proj(gelu(gate_proj(x)) · up_proj(x))`.
    fn forward(&self, x: &Array, adapter: Option<&LayerAdapter>) -> Result<Array> {
        let gate_up = self
            .gate_up_proj
            .forward_with(x, adapter.and_then(|a| a.gate_up.as_ref()))?;
        let [gate, up] = gate_up.as_slice() else {
            return Err(Error::Input(
                "the MLP needs a gate and an up projection".into(),
            ));
        };
        self.down_proj
            .forward_with(&geglu(gate, up)?, adapter.and_then(|a| a.down.as_ref()))
    }
}

/// The layer's share of the per-layer inputs, gated by its hidden state (E2B/E4B).
pub(crate) struct PerLayerInput {
    per_layer_input_gate: Linear,
    per_layer_projection: Linear,
    post_per_layer_input_norm: Array,
}

impl PerLayerInput {
    fn load(weights: &Weights<'_>, hidden: usize, per_layer: usize) -> Result<Self> {
        Ok(Self {
            per_layer_input_gate: Linear::load(
                &weights.at("per_layer_input_gate"),
                per_layer,
                hidden,
            )?,
            per_layer_projection: Linear::load(
                &weights.at("per_layer_projection"),
                hidden,
                per_layer,
            )?,
            post_per_layer_input_norm: weights
                .float("post_per_layer_input_norm.weight", &[hidden])?,
        })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut out = self.per_layer_input_gate.arrays();
        out.extend(self.per_layer_projection.arrays());
        out.push(&self.post_per_layer_input_norm);
        out
    }

    /// `norm(per_layer_projection(gelu(per_layer_input_gate(h)) · input))`, to add to `h`.
    fn forward(
        &self,
        h: &Array,
        input: &Array,
        eps: f32,
        adapter: Option<&LayerAdapter>,
    ) -> Result<Array> {
        let gate = self
            .per_layer_input_gate
            .forward_with(h, adapter.and_then(|a| a.per_layer_input_gate.as_ref()))?;
        let gated = geglu(&gate, input)?;
        Ok(fast::rms_norm(
            &self.per_layer_projection.forward_with(
                &gated,
                adapter.and_then(|a| a.per_layer_projection.as_ref()),
            )?,
            Some(&self.post_per_layer_input_norm),
            eps,
        )?)
    }
}

/// One decoder layer (`language_model.model.layers.N`).
pub(crate) struct DecoderLayer {
    pub spec: LayerSpec,
    self_attn: Attention,
    mlp: Mlp,
    input_layernorm: Array,
    post_attention_layernorm: Array,
    pre_feedforward_layernorm: Array,
    post_feedforward_layernorm: Array,
    per_layer_input: Option<PerLayerInput>,
    layer_scalar: Array,
    eps: f32,
}

impl DecoderLayer {
    /// Loads the layer `spec` describes from `weights` (its path in the checkpoint).
    pub fn load(weights: &Weights<'_>, config: &TextConfig, spec: &LayerSpec) -> Result<Self> {
        let hidden = config.hidden_size;
        let self_attn = Attention::load(&weights.at("self_attn"), config, spec)?;
        let mlp = Mlp::load(&weights.at("mlp"), hidden, spec.mlp_width)?;
        let norm = |name: &str| weights.float(&format!("{name}.weight"), &[hidden]);
        let input_layernorm = norm("input_layernorm")?;
        let post_attention_layernorm = norm("post_attention_layernorm")?;
        let pre_feedforward_layernorm = norm("pre_feedforward_layernorm")?;
        let post_feedforward_layernorm = norm("post_feedforward_layernorm")?;
        let per_layer = config.hidden_size_per_layer_input;
        let per_layer_input = (per_layer > 0)
            .then(|| PerLayerInput::load(weights, hidden, per_layer))
            .transpose()?;
        Ok(Self {
            spec: spec.clone(),
            self_attn,
            mlp,
            input_layernorm,
            post_attention_layernorm,
            pre_feedforward_layernorm,
            post_feedforward_layernorm,
            per_layer_input,
            layer_scalar: weights.float("layer_scalar", &[1])?,
            eps: config.rms_norm_eps,
        })
    }

    /// The dense weight `[out, in]` of projection `target` (for DoRA's norms); `None` for one
    /// the layer does not run.
    pub fn base_weight(&self, target: Target) -> Result<Option<Array>> {
        Ok(match target {
            Target::GateProj => self.mlp.gate_up_proj.part_weight(0)?,
            Target::UpProj => self.mlp.gate_up_proj.part_weight(1)?,
            Target::DownProj => Some(self.mlp.down_proj.dense_weight()?),
            Target::PerLayerInputGate => self
                .per_layer_input
                .as_ref()
                .map(|p| p.per_layer_input_gate.dense_weight())
                .transpose()?,
            Target::PerLayerProjection => self
                .per_layer_input
                .as_ref()
                .map(|p| p.per_layer_projection.dense_weight())
                .transpose()?,
            _ => self.self_attn.base_weight(target)?,
        })
    }

    /// The weight arrays (to evaluate them at load).
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.self_attn.arrays();
        out.extend(self.mlp.arrays());
        out.extend([
            &self.input_layernorm,
            &self.post_attention_layernorm,
            &self.pre_feedforward_layernorm,
            &self.post_feedforward_layernorm,
            &self.layer_scalar,
        ]);
        if let Some(p) = &self.per_layer_input {
            out.extend(p.arrays());
        }
        out
    }

    /// The layer over `x` (`[rows, T, hidden]`), its keys and values through `kv` (see
    /// [`Attention::forward`]), its share of the per-layer inputs `per_layer_input`
    /// (`[rows, T, width]`), an adapter's updates of its projections (`adapter`): the new
    /// hidden state.
    pub fn forward(
        &self,
        x: &Array,
        kv: &mut StepKv<'_, '_>,
        per_layer_input: Option<&Array>,
        adapter: Option<&LayerAdapter>,
    ) -> Result<Array> {
        let eps = self.eps;
        let normed = fast::rms_norm(x, Some(&self.input_layernorm), eps)?;
        let attn = self.self_attn.forward(&normed, kv, adapter)?;
        let h = x.add(fast::rms_norm(
            &attn,
            Some(&self.post_attention_layernorm),
            eps,
        )?)?;
        let normed = fast::rms_norm(&h, Some(&self.pre_feedforward_layernorm), eps)?;
        let mlp = self.mlp.forward(&normed, adapter)?;
        let h = h.add(fast::rms_norm(
            &mlp,
            Some(&self.post_feedforward_layernorm),
            eps,
        )?)?;
        if let (Some(block), Some(input)) = (&self.per_layer_input, per_layer_input) {
            let residual = block.forward(&h, input, eps, adapter)?;
            return add_scaled(&h, &residual, &self.layer_scalar);
        }
        Ok(h.multiply(&self.layer_scalar)?)
    }
}
