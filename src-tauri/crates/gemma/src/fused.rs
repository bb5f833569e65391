//! Elementwise chains compiled by MLX into one kernel each: the tanh-GELU-gated product of the
//! MLPs (text and vision) and per-layer inputs, the residual add-and-scale, and the logit soft
//! cap.
//!
//! Unfused, one GELU is about a dozen primitives; on a GPU, decoding is bound by how many
//! primitives MLX dispatches per token, so these few functions matter. A compiled function is
//! kept for the life of its thread: its trace is made once per input shape and reused.

use std::cell::RefCell;

use mlx_rs::error::Exception;
use mlx_rs::ops::{sigmoid, tanh};
use mlx_rs::transforms::compile::compile;
use mlx_rs::{Array, Dtype};

use crate::error::Result;

type Binary =
    Box<dyn for<'a> FnMut((&'a Array, &'a Array)) -> std::result::Result<Array, Exception>>;
type Ternary = Box<
    dyn for<'a> FnMut((&'a Array, &'a Array, &'a Array)) -> std::result::Result<Array, Exception>,
>;

/// A scalar in `like`'s dtype (Python's weak scalars behave this way in the reference), made
/// as data of that dtype: a cast (`from_f32(v).as_dtype(..)`) would be a node of the compiled
/// trace, replayed as one more kernel on every call.
pub(crate) fn constant(value: f32, like: &Array) -> std::result::Result<Array, Exception> {
    Ok(match like.dtype() {
        Dtype::Float32 => Array::from_f32(value),
        Dtype::Bfloat16 => Array::from_slice(&[half::bf16::from_f32(value)], &[]),
        Dtype::Float16 => Array::from_slice(&[half::f16::from_f32(value)], &[]),
        other => Array::from_f32(value).as_dtype(other)?,
    })
}

/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, written as the equal
/// `x · σ(x · (a + b · x²))` with `a = 2√(2/π)`, `b = 0.044715 · a`: seven operations, few
/// enough for MLX to fuse the whole chain (and the gating product) into one kernel.
fn gelu_graph(x: &Array) -> std::result::Result<Array, Exception> {
    let a = 2.0 * (2.0f32 / std::f32::consts::PI).sqrt();
    let b = 0.044715 * a;
    let z = x
        .multiply(x)?
        .multiply(constant(b, x)?)?
        .add(constant(a, x)?)?;
    x.multiply(sigmoid(x.multiply(&z)?)?)
}

// Each is traced per input shape (decode meets one shape; a prefill, one per chunk length). A
// shapeless trace infers every output shape again on each call and makes each operand's
// broadcast a node of its own, which takes the GELU chain past MLX's fusion depth: two kernels
// instead of one.
thread_local! {
    static GEGLU: RefCell<Binary> = RefCell::new(Box::new(compile(
        |(gate, x): (&Array, &Array)| gelu_graph(gate)?.multiply(x),
        false,
    )));
    static SOFTCAP: RefCell<Binary> = RefCell::new(Box::new(compile(
        |(x, cap): (&Array, &Array)| tanh(x.divide(cap)?)?.multiply(cap),
        false,
    )));
    static ADD_SCALED: RefCell<Ternary> = RefCell::new(Box::new(compile(
        |(a, b, s): (&Array, &Array, &Array)| a.add(b)?.multiply(s),
        false,
    )));
}

/// `(a + b) · s`.
pub fn add_scaled(a: &Array, b: &Array, s: &Array) -> Result<Array> {
    Ok(ADD_SCALED.with(|f| (f.borrow_mut())((a, b, s)))?)
}

/// `gelu(gate) · x`, the GELU in its tanh approximation.
pub fn geglu(gate: &Array, x: &Array) -> Result<Array> {
    Ok(GEGLU.with(|f| (f.borrow_mut())((gate, x)))?)
}

/// `tanh(x / cap) · cap` (`cap`: a scalar array in `x`'s dtype).
pub fn softcap(x: &Array, cap: &Array) -> Result<Array> {
    Ok(SOFTCAP.with(|f| (f.borrow_mut())((x, cap)))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    #[test]
    fn compiled_chains_equal_their_eager_graphs() {
        let x = random::normal::<f32>(&[3, 70], None, None, &random::key(1).unwrap()).unwrap();
        let g = random::normal::<f32>(&[3, 70], None, None, &random::key(2).unwrap()).unwrap();
        let cap = Array::from_f32(30.0);
        let tanh_form = |v: &Array| {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            let inner = v
                .add(
                    v.multiply(v)
                        .unwrap()
                        .multiply(v)
                        .unwrap()
                        .multiply(Array::from_f32(0.044715))
                        .unwrap(),
                )
                .unwrap();
            let t = tanh(inner.multiply(Array::from_f32(c)).unwrap()).unwrap();
            v.multiply(Array::from_f32(0.5))
                .unwrap()
                .multiply(t.add(Array::from_f32(1.0)).unwrap())
                .unwrap()
        };
        let eager_geglu = tanh_form(&g).multiply(&x).unwrap();
        let eager_cap = tanh(
            x.multiply(Array::from_f32(40.0))
                .unwrap()
                .divide(&cap)
                .unwrap(),
        )
        .unwrap()
        .multiply(&cap)
        .unwrap();
        for _ in 0..2 {
            let close = |a: &Array, b: &Array| {
                a.as_slice::<f32>()
                    .iter()
                    .zip(b.as_slice::<f32>())
                    .all(|(p, q)| (p - q).abs() <= 1e-6 * (1.0 + q.abs()))
            };
            assert!(close(&geglu(&g, &x).unwrap(), &eager_geglu));
            let s = Array::from_f32(0.5);
            let expect = x.add(&g).unwrap().multiply(&s).unwrap();
            assert!(close(&add_scaled(&x, &g, &s).unwrap(), &expect));
            let big = x.multiply(Array::from_f32(40.0)).unwrap();
            assert!(close(&softcap(&big, &cap).unwrap(), &eager_cap));
        }
        // A shape never seen before gets a trace of its own.
        let y = random::normal::<f32>(&[5], None, None, &random::key(3).unwrap()).unwrap();
        assert_eq!(geglu(&y, &y).unwrap().shape(), &[5]);
    }
}
