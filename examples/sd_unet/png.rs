//! A minimal grayscale PNG writer (stored deflate blocks, no compression): enough for the
//! latent preview without another dependency. Invariant: every chunk carries its CRC-32 and the
//! zlib stream its Adler-32, so any PNG reader accepts the file.

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + x as u32) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Encodes an 8-bit grayscale image of `width × height` pixels (row-major) as a PNG file's bytes.
pub fn encode_gray(width: usize, height: usize, pixels: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity((width + 1) * height);
    for row in pixels.chunks(width.max(1)).take(height) {
        raw.push(0); // filter: none
        raw.extend_from_slice(row);
    }
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    zlib.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::new();
    header.extend_from_slice(&(width as u32).to_be_bytes());
    header.extend_from_slice(&(height as u32).to_be_bytes());
    header.extend_from_slice(&[8, 0, 0, 0, 0]); // 8-bit, grayscale, deflate, no filter, no interlace
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// Tiles the channels of one latent `[C, H, W]` (f32, row-major) into a 2-wide grid, each channel
/// normalised to its own min..max.
pub fn latent_grid(latent: &[f32], channels: usize, h: usize, w: usize) -> (usize, usize, Vec<u8>) {
    let cols = 2.min(channels.max(1));
    let rows = channels.div_ceil(cols);
    let (gw, gh) = (cols * w, rows * h);
    let mut img = vec![0u8; gw * gh];
    for c in 0..channels {
        let plane = &latent[c * h * w..(c + 1) * h * w];
        let lo = plane.iter().cloned().fold(f32::INFINITY, f32::min);
        let hi = plane.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let span = if hi > lo { hi - lo } else { 1.0 };
        let (ox, oy) = ((c % cols) * w, (c / cols) * h);
        for y in 0..h {
            for x in 0..w {
                let v = ((plane[y * w + x] - lo) / span * 255.0).round();
                img[(oy + y) * gw + ox + x] = v.clamp(0.0, 255.0) as u8;
            }
        }
    }
    (gw, gh, img)
}
