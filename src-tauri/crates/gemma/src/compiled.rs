//! The decode step compiled once per shape and replayed.
//!
//! A decode step of the eager graph is ~800 primitives: the host builds each one through the
//! bindings and MLX then dispatches it. Over the rows' buffers (`rows.rs`) a step's shapes
//! change only when the buffers grow (every 256 positions) or the number of rows changes, and
//! everything a step varies by (the ids, each row's position, where the buffers start) is an
//! array. So the whole step (embeddings and per-layer inputs, the layer stack with its
//! shared K/V, the final norm, the head and the soft cap) is one MLX compiled function of
//! `[ids, positions, bases, buffers…] → [logits, buffers…]`: MLX traces it on the first
//! call of a shape (rows × capacities), simplifies and fuses the trace, and replays it on
//! every later call without calling back into the model's code. Sampling stays outside: its
//! random stream and its per-answer settings (temperature, penalties, grammar masks) differ
//! per row and per call.
//!
//! The compiled function lives in a thread-local (MLX's compiled closures are not `Send`),
//! one per thread for the model last stepped on it. It does not hold the model: the model
//! lends itself for the length of each call ([`Lent`]), the only time the function's body
//! runs. Its trace holds the weights it read until it is dropped: when the model is dropped
//! on that thread ([`forget`]) or a different model steps there.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};

use mlx_rs::error::Exception;
use mlx_rs::transforms::compile::compile;
use mlx_rs::Array;

use crate::cache::KvCache;
use crate::config::AttentionKind;
use crate::error::{Error, Result};
use crate::rows::{row_positions, LayerRows, RowsKv, RowsStep};
use crate::text::TextModel;
use crate::tuning::Tuning;

type Step = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// Traces made so far, in this process: the step's code runs only when MLX traces it (a new
/// shape), never when it replays a trace.
static TRACES: AtomicUsize = AtomicUsize::new(0);

/// How many times a compiled decode step has been traced in this process (once per model,
/// thread and shape: rows × buffer capacities); every other step replays a trace.
pub fn traces() -> usize {
    TRACES.load(Ordering::Relaxed)
}

thread_local! {
    /// The compiled step of the model (by its id) last stepped on this thread.
    static STEP: RefCell<Option<(u64, Step)>> = const { RefCell::new(None) };
    /// The model stepping on this thread right now (set by [`Lent`] for one call).
    static LENT: Cell<*const TextModel> = const { Cell::new(std::ptr::null()) };
}

/// Lends a model to the compiled step for the length of one call: the step's body (which runs
/// only inside that call, when MLX traces it) reads the model from here, so the step never
/// holds it. Cleared when dropped, on a panic too.
struct Lent;

impl Lent {
    fn new(text: &TextModel) -> Self {
        LENT.with(|lent| lent.set(text));
        Lent
    }

    /// Runs `f` with the model lent on this thread, if one is.
    fn with<R>(f: impl FnOnce(&TextModel) -> R) -> Option<R> {
        let text = LENT.with(Cell::get);
        // SAFETY: `LENT` is non-null only while a `Lent` made from a `&TextModel` is alive on
        // this thread (inside `step`, which holds that borrow for the whole call), and is
        // cleared when it drops.
        unsafe { text.as_ref() }.map(f)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        LENT.with(|lent| lent.set(std::ptr::null()));
    }
}

/// The compiled step of `text`: a function of `[ids, positions, bases, keys₀, values₀, …]`
/// (see [`RowsKv::begin_compiled`]) returning `[logits, keys₀, values₀, …]`.
fn build(kinds: Vec<AttentionKind>, window: Option<usize>, tuning: Tuning) -> Step {
    let step = move |inputs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
        TRACES.fetch_add(1, Ordering::Relaxed);
        Lent::with(|text| trace(text, inputs, &kinds, window, &tuning))
            .unwrap_or_else(|| Err(Exception::custom("no model is stepping")))
    };
    Box::new(compile(step, false))
}

/// The step's body, run while MLX traces it.
fn trace(
    text: &TextModel,
    inputs: &[Array],
    kinds: &[AttentionKind],
    window: Option<usize>,
    tuning: &Tuning,
) -> std::result::Result<Vec<Array>, Exception> {
    let [ids, positions, bases, buffers @ ..] = inputs else {
        return Err(Exception::custom(
            "a compiled step needs ids, positions and bases",
        ));
    };
    if buffers.len() != 2 * kinds.len() {
        return Err(Exception::custom(format!(
            "{} buffers for {} cache-owning layers",
            buffers.len(),
            kinds.len()
        )));
    }
    let mut layers: Vec<LayerRows> = buffers
        .chunks(2)
        .zip(kinds)
        .map(|(kv, &kind)| LayerRows::of(kv[0].clone(), kv[1].clone(), kind))
        .collect();
    let geometry = RowsStep::whole(positions, bases, &layers, window)
        .map_err(|e| Exception::custom(e.to_string()))?;
    let logits = text
        .forward_buffers(ids, positions, &geometry, &mut layers, tuning)
        .map_err(|e| Exception::custom(e.to_string()))?;
    let mut out = Vec::with_capacity(1 + buffers.len());
    out.push(logits);
    for layer in layers {
        let (k, v) = layer.into_arrays();
        out.push(k);
        out.push(v);
    }
    Ok(out)
}

/// One decode step of the rows whose buffers `kv` holds (gathered from `caches`), through
/// `text`'s compiled step (`model`: the id of the model it belongs to): `[n, vocab]`. As
/// [`TextModel::forward_rows`] with the buffers, the rows' caches then view the buffers.
pub(crate) fn step(
    model: u64,
    text: &TextModel,
    kv: &mut RowsKv,
    ids: &Array,
    caches: &mut [&mut [KvCache]],
    tuning: &Tuning,
) -> Result<Array> {
    let positions = row_positions(caches);
    let (bases, buffers) = kv.begin_compiled()?;
    let mut inputs = Vec::with_capacity(3 + buffers.len());
    inputs.extend([ids.clone(), positions, bases]);
    inputs.extend(buffers);
    let mut outputs = STEP.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|(id, _)| *id != model) {
            *cell = None; // (the old trace goes before the new one is made)
            *cell = Some((model, build(kv.kinds(), kv.window(), *tuning)));
        }
        match cell.as_mut() {
            Some((_, f)) => {
                let _lent = Lent::new(text);
                f(&inputs)
            }
            None => Err(Exception::custom("no compiled step")),
        }
    })?;
    if outputs.is_empty() {
        return Err(Error::Input("the compiled step returned nothing".into()));
    }
    let buffers = outputs.split_off(1);
    kv.set_buffers(buffers)?;
    kv.finish(caches)?;
    outputs
        .pop()
        .ok_or_else(|| Error::Input("the compiled step returned no logits".into()))
}

/// Drops this thread's compiled step of the model `model`, if it holds one (and with it the
/// weights its trace holds).
pub(crate) fn forget(model: u64) {
    // (During a thread's teardown the thread-local may already be gone: nothing to drop.)
    let _ = STEP.try_with(|cell| {
        if let Ok(mut cell) = cell.try_borrow_mut() {
            if cell.as_ref().is_some_and(|(id, _)| *id == model) {
                *cell = None;
            }
        }
    });
}
