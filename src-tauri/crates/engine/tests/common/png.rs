//! PNG files written by hand: through the `image` encoder, and chunk by chunk for headers and
//! layouts no encoder produces.

use image::{ExtendedColorType, ImageEncoder};

/// `data` (rows of `color` pixels) encoded as a PNG.
pub fn png(width: u32, height: u32, color: ExtendedColorType, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(data, width, height, color)
        .unwrap();
    out
}

/// A solid `rgb` picture.
pub fn rgb_png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    let data = rgb.repeat((width * height) as usize);
    png(width, height, ExtendedColorType::Rgb8, &data)
}

/// The CRC-32 of PNG chunks.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One chunk: length, kind, body, CRC.
pub fn png_chunk(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(kind);
    out.extend(body);
    out.extend(crc32(&out[4..]).to_be_bytes());
    out
}

/// The chunks of a PNG file after its signature: (kind, body).
/// One chunk: length, kind, body, CRC.
pub fn png_chunks(png: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
    let mut chunks = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind: [u8; 4] = png[at + 4..at + 8].try_into().unwrap();
        chunks.push((kind, png[at + 8..at + 8 + len].to_vec()));
        at += 12 + len;
    }
    chunks
}

/// A PNG with the given IHDR fields and raw (unfiltered rows with filter bytes) pixel data,
/// stored uncompressed.
pub fn raw_png(
    width: u32,
    height: u32,
    depth: u8,
    colour: u8,
    extra: &[(&[u8; 4], Vec<u8>)],
    rows: &[u8],
) -> Vec<u8> {
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if rows.is_empty() {
        vec![&[]]
    } else {
        rows.chunks(65_535).collect()
    };
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend(len.to_le_bytes());
        zlib.extend((!len).to_le_bytes());
        zlib.extend(*block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in rows {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    zlib.extend(((b << 16) | a).to_be_bytes());
    let mut header = [width.to_be_bytes(), height.to_be_bytes()].concat();
    header.extend([depth, colour, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(png_chunk(b"IHDR", &header));
    for (kind, body) in extra {
        out.extend(png_chunk(kind, body));
    }
    out.extend(png_chunk(b"IDAT", &zlib));
    out.extend(png_chunk(b"IEND", &[]));
    out
}
