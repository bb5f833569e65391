//! The fit check's estimate (`engine::fit::Needs`, read from the headers before a load) against
//! what a load of the tiny fixture holds in MLX memory. Its own test binary: MLX's counters are
//! the process's.

mod common;

use common::fixture;
use engine::fit::Needs;
use gemma::memory::counters;
use gemma::{LoadOptions, Model};

/// MLX's counters are the process's: the tests of this file load one model at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_estimate_before_a_load_is_what_the_loaded_model_holds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn the_estimate_counts_the_opt_in_kv_bits_as_the_loaded_model_does() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The OptiQ fixture's kv_config.json stores some layers' K/V in 4 bits, some in 8.
    let dir = fixture().with_file_name("tiny-optiq");
    let quantized = LoadOptions {
        kv_quantization: true,
        ..LoadOptions::default()
    };
    let needs = Needs::of(&dir, &quantized).unwrap();
    let bf16 = Needs::of(&dir, &LoadOptions::default()).unwrap();
    let model = Model::load(&dir, &quantized).unwrap();
    for positions in [1, 300, 4096, 8192, 32_768] {
        assert_eq!(
            needs.kv_bytes(positions),
            model.kv_bytes(positions) as u64,
            "{positions} positions"
        );
        // 4 or 8 bits plus a scale and a bias per 64 values: under 60 % of the bf16 bound.
        assert!(
            needs.kv_bytes(positions) * 10 < bf16.kv_bytes(positions) * 6,
            "{positions}: {} vs {}",
            needs.kv_bytes(positions),
            bf16.kv_bytes(positions)
        );
    }
    // The weights are the same whatever the cache holds; the table resident adds it, as asked
    // for at load or after one reading of the headers.
    assert_eq!(needs.weights, bf16.weights);
    let resident = LoadOptions {
        ple_resident: true,
        ..LoadOptions::default()
    };
    assert_eq!(
        Needs::of(&dir, &resident).unwrap(),
        bf16.clone().with_ple_table()
    );
    assert_eq!(
        bf16.clone().with_ple_table().weights,
        bf16.weights + bf16.ple_table
    );
}
