//! The image front end on arbitrary bytes: preprocessing for the vision tower and the preview
//! shown in the UI each give a clear error or a picture within their bounds, and agree on which.
#![no_main]

use engine::image::{preprocess_bytes, thumbnail, SoftTokenBudget};
use libfuzzer_sys::fuzz_target;

const PREVIEW_SIDE: u32 = 64;

fuzz_target!(|data: &[u8]| {
    let preview = thumbnail(data, PREVIEW_SIDE);
    let Ok(image) = preprocess_bytes(data, SoftTokenBudget::T70) else {
        assert!(preview.is_err(), "a preview of an image the model refuses");
        return;
    };
    assert_eq!(image.pixels.len(), 3 * image.height * image.width);
    assert!(image.height % 48 == 0 && image.width % 48 == 0 && image.height * image.width > 0);
    assert!(image.soft_tokens <= 70);
    assert!(image.pixels.iter().all(|v| (0.0..=1.0).contains(v)));

    let preview = preview.expect("no preview of an image the model reads");
    assert!(preview.width > 0 && preview.height > 0);
    assert!(preview.png.starts_with(b"\x89PNG\r\n\x1a\n"));
});
