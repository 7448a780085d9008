//! Pillow's bicubic resampling of 8-bit images, reimplemented so that resized pixels equal
//! `PIL.Image.resize(size, Image.BICUBIC)` (the slow Qwen-VL image processor's resize).
//!
//! Algorithm (Pillow `src/libImaging/Resample.c`): separable convolution, horizontal pass
//! first then vertical, with the Keys cubic kernel `a = -0.5` (support 2). When downscaling,
//! the kernel is stretched by the scale factor (antialiasing). Coefficients are computed in
//! f64, normalised to sum 1, then converted to fixed point with 22 fractional bits
//! (`PRECISION_BITS = 32 - 8 - 2`); each pass rounds and clamps to `u8`.

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Keys cubic convolution kernel with `a = -0.5` (Pillow `bicubic_filter`).
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Per output pixel: first input index and the fixed-point weights (Pillow `precompute_coeffs`
/// followed by `normalize_coeffs_8bpc`).
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    weights: Vec<Vec<i32>>,
}

fn coeffs(in_size: usize, out_size: usize) -> Coeffs {
    const SUPPORT: f64 = 2.0;
    // Pillow takes the box (0, in_size) as floats.
    let scale = in_size as f32 as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = SUPPORT * filterscale;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // `(int)` truncation toward zero, as in C.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin);
        let mut k: Vec<f64> = (0..n)
            .map(|x| bicubic((x as f64 + xmin as f64 - center + 0.5) * ss))
            .collect();
        let ww: f64 = k.iter().sum();
        if ww != 0.0 {
            k.iter_mut().for_each(|w| *w /= ww);
        }
        let fixed = k
            .iter()
            .map(|&w| {
                let v = w * (1u32 << PRECISION_BITS) as f64;
                if w < 0.0 {
                    (-0.5 + v) as i32
                } else {
                    (0.5 + v) as i32
                }
            })
            .collect();
        bounds.push((xmin, n));
        weights.push(fixed);
    }
    Coeffs { bounds, weights }
}

fn clip8(v: i32) -> u8 {
    if v >= (1 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Resizes an interleaved `[height, width, channels]` 8-bit image to `(out_h, out_w)` with
/// Pillow's bicubic filter. Returns `[out_h, out_w, channels]`.
///
/// A dimension already at its target size is not filtered (Pillow skips that pass). Pass order
/// follows Pillow 13 (python-pillow/Pillow#9549): horizontal first, except when the height
/// shrinks and by more than twice the width's shrink (`h - out_h > 2·(w - out_w)`), then
/// vertical first. The order changes rounding, so it matters for bit-exact results.
pub fn resize_bicubic(
    src: &[u8],
    h: usize,
    w: usize,
    c: usize,
    out_h: usize,
    out_w: usize,
) -> Vec<u8> {
    debug_assert_eq!(src.len(), h * w * c);
    let (need_h, need_v) = (out_w != w, out_h != h);
    if need_h && need_v && vertical_first(h, w, out_h, out_w) {
        let tmp = vertical_pass(src, h, w, c, out_h);
        return horizontal_pass(&tmp, out_h, w, c, out_w);
    }
    let tmp = if need_h {
        horizontal_pass(src, h, w, c, out_w)
    } else {
        src.to_vec()
    };
    if need_v {
        vertical_pass(&tmp, h, out_w, c, out_h)
    } else {
        tmp
    }
}

/// Pillow 13's pass-order rule: vertical first when the height shrinks by more than twice the
/// width's shrink (in pixels).
fn vertical_first(h: usize, w: usize, out_h: usize, out_w: usize) -> bool {
    out_h < h && (h - out_h) as i64 > 2 * (w as i64 - out_w as i64)
}

/// `[h, w, c] → [h, out_w, c]`.
fn horizontal_pass(src: &[u8], h: usize, w: usize, c: usize, out_w: usize) -> Vec<u8> {
    let cf = coeffs(w, out_w);
    let mut out = vec![0u8; h * out_w * c];
    for y in 0..h {
        let row = &src[y * w * c..(y + 1) * w * c];
        for (xx, (&(xmin, n), k)) in cf.bounds.iter().zip(&cf.weights).enumerate() {
            for ch in 0..c {
                let mut ss: i32 = 1 << (PRECISION_BITS - 1);
                for (x, &kw) in k.iter().enumerate().take(n) {
                    ss += row[(xmin + x) * c + ch] as i32 * kw;
                }
                out[(y * out_w + xx) * c + ch] = clip8(ss);
            }
        }
    }
    out
}

/// `[h, w, c] → [out_h, w, c]`.
fn vertical_pass(src: &[u8], h: usize, w: usize, c: usize, out_h: usize) -> Vec<u8> {
    let cf = coeffs(h, out_h);
    let mut out = vec![0u8; out_h * w * c];
    for (yy, (&(ymin, n), k)) in cf.bounds.iter().zip(&cf.weights).enumerate() {
        for i in 0..w * c {
            let mut ss: i32 = 1 << (PRECISION_BITS - 1);
            for (y, &kw) in k.iter().enumerate().take(n) {
                ss += src[(ymin + y) * w * c + i] as i32 * kw;
            }
            out[yy * w * c + i] = clip8(ss);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values_match_keys_cubic() {
        // Keys (1981) with a = -0.5: k(0) = 1, k(1) = 0, k(0.5) = 0.5625, k(1.5) = -0.0625.
        for (x, want) in [
            (0.0, 1.0),
            (1.0, 0.0),
            (0.5, 0.5625),
            (1.5, -0.0625),
            (2.0, 0.0),
            (-0.5, 0.5625),
        ] {
            assert!((bicubic(x) - want).abs() < 1e-12, "k({x})");
        }
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 9 * 13 * 3];
        for (oh, ow) in [(28, 28), (4, 5), (9, 30)] {
            let out = resize_bicubic(&src, 9, 13, 3, oh, ow);
            assert_eq!(out.len(), oh * ow * 3);
            assert!(out.iter().all(|&v| v == 77), "{oh}x{ow}");
        }
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (i, o) in [(195, 196), (40, 28), (60, 56), (10, 3)] {
            let cf = coeffs(i, o);
            for k in &cf.weights {
                let s: i64 = k.iter().map(|&w| w as i64).sum();
                assert!(
                    (s - (1 << PRECISION_BITS)).abs() <= k.len() as i64,
                    "{i}->{o}: {s}"
                );
            }
        }
    }

    #[test]
    fn pass_order_matches_pillow_13() {
        // (h, w, out_h, out_w) -> vertical first, checked against Pillow 13.0.0 on random
        // images (the other order gives different pixels for each of these).
        let cases = [
            ((40, 195, 28, 196), true),
            ((60, 119, 56, 112), false),
            ((29, 11, 24, 9), true),
            ((29, 23, 6, 11), false),
            ((22, 29, 14, 25), false),
            ((23, 18, 7, 12), true),
            ((11, 9, 26, 35), false),
            ((19, 4, 30, 16), false),
        ];
        for ((h, w, oh, ow), want) in cases {
            assert_eq!(vertical_first(h, w, oh, ow), want, "{h}x{w} -> {oh}x{ow}");
        }
    }

    #[test]
    fn same_size_is_identity() {
        let src: Vec<u8> = (0..6 * 4 * 3).map(|v| (v * 7 % 256) as u8).collect();
        assert_eq!(resize_bicubic(&src, 6, 4, 3, 6, 4), src);
    }
}
