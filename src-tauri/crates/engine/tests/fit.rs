//! The fit check's estimate (`engine::fit::Needs`, read from the headers before a load) against
//! what a load of the tiny fixture holds in MLX memory. Its own test binary: MLX's counters are
//! the process's.

mod common;

use common::fixture;
use engine::fit::Needs;
use gemma::memory::counters;
use gemma::{LoadOptions, Model};

#[test]
fn the_estimate_before_a_load_is_what_the_loaded_model_holds() {
    for ple_resident in [false, true] {
        let options = LoadOptions {
            ple_resident,
            ..LoadOptions::default()
        };
        let needs = Needs::of(&fixture(), &options).unwrap();
        let before = counters().unwrap().active as u64;
        let model = Model::load(&fixture(), &options).unwrap();
        let held = counters().unwrap().active as u64 - before;

        // Every weight counted as held is in MLX memory (the shared layers' unused K/V
        // projections are stored but not loaded: a few percent of the tiny decoder), and
        // nothing beyond them but the towers, counted apart (held at load or when used).
        assert!(held >= needs.weights * 95 / 100, "{held} < {needs:?}");
        assert!(held <= needs.weights + needs.towers, "{held} > {needs:?}");
        // The K/V of a conversation, as the loaded model counts it.
        for positions in [1, 300, 4096, 8192] {
            assert_eq!(
                needs.kv_bytes(positions),
                model.kv_bytes(positions) as u64,
                "{positions} positions"
            );
        }
        drop(model);
    }
}
