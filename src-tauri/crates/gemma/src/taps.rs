//! Hidden-state taps: a forward asked to keep some decoder layers' outputs (the residual stream
//! after the layer) and the final-normed state the head reads. Without a request a forward
//! keeps nothing and runs as it always does.

use mlx_rs::Array;

use crate::error::{Error, Result};

/// Where a tap reads the hidden state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapPoint {
    /// After decoder layer `n` (its residual output, `layer_scalar` applied).
    Layer(usize),
    /// After the final RMSNorm (what the head and the speculative drafter read).
    FinalNorm,
}

/// A capture request and what it captured: each point's hidden state `[rows, T, hidden]`, one
/// entry per forward that ran with it (so a prefill then decode steps leave several).
#[derive(Debug, Clone)]
pub struct Taps {
    points: Vec<TapPoint>,
    captured: Vec<Vec<Array>>,
}

impl Taps {
    /// A request for `points` (in the order they are to be returned).
    pub fn new(points: Vec<TapPoint>) -> Self {
        let captured = vec![Vec::new(); points.len()];
        Self { points, captured }
    }

    /// Checks the points against a decoder of `layers` layers.
    pub(crate) fn check(&self, layers: usize) -> Result<()> {
        match self.points.iter().find_map(|p| match p {
            TapPoint::Layer(n) if *n >= layers => Some(*n),
            _ => None,
        }) {
            Some(n) => Err(Error::Input(format!(
                "layer {n} cannot be tapped: the model has layers 0 to {}",
                layers - 1
            ))),
            None => Ok(()),
        }
    }

    /// Keeps `h` where `point` is asked for.
    pub(crate) fn offer(&mut self, point: TapPoint, h: &Array) {
        for (p, kept) in self.points.iter().zip(self.captured.iter_mut()) {
            if *p == point {
                kept.push(h.clone());
            }
        }
    }

    /// Every point's states over all the forwards it saw, positions joined:
    /// `[points, T, hidden]` for one sequence (row 0 of each capture).
    pub fn stacked(&self) -> Result<Array> {
        let mut per_point = Vec::with_capacity(self.points.len());
        for (point, kept) in self.points.iter().zip(&self.captured) {
            if kept.is_empty() {
                return Err(Error::Input(format!(
                    "{point:?} was not reached by any forward"
                )));
            }
            let rows: Vec<Array> = kept
                .iter()
                .map(|h| {
                    let shape = h.shape();
                    h.reshape(&[-1, shape[shape.len() - 1]])
                })
                .collect::<std::result::Result<_, _>>()?;
            per_point.push(mlx_rs::ops::concatenate(&rows, 0)?.expand_dims(0)?);
        }
        Ok(mlx_rs::ops::concatenate(&per_point, 0)?)
    }
}
