//! `config.json`: parsing, validation and the layer table built from it never panic, and what
//! validation accepts builds a table.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = gemma::Config::parse(text) else {
        return;
    };
    if let Ok(table) = gemma::layers::layer_table(&config.text) {
        assert_eq!(table.len(), config.text.num_hidden_layers);
    }
    let _ = config
        .quantization
        .for_module("language_model.model.layers.0.mlp.up_proj");
});
