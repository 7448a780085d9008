//! The vision encoder within a memory budget: which images are refused before they
//! are decoded, what `--max-pixels` would let them in, and how the images of one step are
//! split into encoder batches by a token (patch) budget.

use std::ops::Range;

/// Splits images with `patches[i]` patches each, in order, into consecutive batches of at most
/// `max_images` images and `max_patches` patches; an image with more patches than
/// `max_patches` runs alone. Returns index ranges into `patches`, covering it in order.
pub fn vision_batches(
    patches: &[usize],
    max_images: usize,
    max_patches: usize,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, &p) in patches.iter().enumerate() {
        let full = i - start >= max_images.max(1) || sum + p > max_patches;
        if i > start && full {
            out.push(start..i);
            (start, sum) = (i, 0);
        }
        sum += p;
    }
    if start < patches.len() {
        out.push(start..patches.len());
    }
    out
}

/// The largest `x` in `lo..=hi` with `fits(x)`, for a `fits` that holds up to some point and
/// fails after it (binary search); `None` when `fits(lo)` fails or `lo > hi`.
pub fn largest_fitting(lo: usize, hi: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
    if lo > hi || !fits(lo) {
        return None;
    }
    let (mut good, mut bad) = (lo, hi + 1);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// Patches per vision-encoder forward: `max_patches`, lowered to the largest batch whose
/// estimated pass (`pass_bytes`) fits `budget` when both are known (at least 1: a single
/// image larger than that is refused by [`refusal`] or runs alone).
pub fn batch_patches(
    max_patches: usize,
    budget: Option<u64>,
    pass_bytes: impl Fn(usize) -> Option<u64>,
) -> usize {
    let Some(budget) = budget else {
        return max_patches;
    };
    if pass_bytes(1).is_none() {
        return max_patches;
    }
    largest_fitting(1, max_patches, |p| {
        pass_bytes(p).is_some_and(|b| b <= budget)
    })
    .unwrap_or(1)
}

/// What [`refusal`] needs to know about the model and its image processor.
pub struct ImageCost<'a> {
    /// Patches of the image resized within the processor's bounds, or with at most the given
    /// `max_pixels`; `None` when the processor refuses the size (it fails later, naming why).
    pub patches: &'a dyn Fn(Option<usize>) -> Option<usize>,
    /// Estimated bytes of a vision pass over that many patches; `None`: unknown.
    pub pass_bytes: &'a dyn Fn(usize) -> Option<u64>,
    /// The processor's `(min_pixels, max_pixels)`.
    pub pixel_bounds: (usize, usize),
}

/// The words that mark a [`refusal`] message (after the budget it names).
const BUDGET_MARK: &str = "(--vision-memory-gib)";

/// Whether `message` (an `errors.jsonl` line's) is a [`refusal`] for the vision memory budget:
/// a decision of that run's machine, which another budget may reverse.
pub fn is_refusal(message: &str) -> bool {
    message.contains(BUDGET_MARK)
}

/// Why an image of `width × height` pixels cannot be encoded within `budget` bytes, or `None`
/// when it can (or when its cost is unknown). The message names the size, the patches after
/// resizing, the estimate, the budget and the largest `--max-pixels` that would fit (or says
/// that none would, at the `--min-pixels` bound).
pub fn refusal(width: u32, height: u32, budget: u64, cost: &ImageCost<'_>) -> Option<String> {
    let need_at = |max_pixels: Option<usize>| {
        let p = (cost.patches)(max_pixels)?;
        Some((p, (cost.pass_bytes)(p)?))
    };
    let (patches, need) = need_at(None)?;
    if need <= budget {
        return None;
    }
    let (lo, hi) = cost.pixel_bounds;
    let fit = largest_fitting(lo, hi, |m| {
        need_at(Some(m)).is_some_and(|(_, b)| b <= budget)
    });
    let hint = match fit {
        Some(m) => format!("--max-pixels {m} would fit"),
        None => {
            format!("no --max-pixels fits (even at --min-pixels {lo}); raise --vision-memory-gib")
        }
    };
    Some(format!(
        "image of {width}x{height} pixels ({patches} patches once resized) needs about {} for \
         its vision pass, over the vision memory budget of {} {BUDGET_MARK}; {hint}",
        gib(need),
        gib(budget)
    ))
}

/// `bytes` in GiB (the unit of `--vision-memory-gib`) with 2 decimals, or 3 significant
/// digits below 0.1 GiB (`0.00160 GiB`, not `0.00 GiB`).
fn gib(bytes: u64) -> String {
    let v = bytes as f64 / (1u64 << 30) as f64;
    // Digits after the point for 3 significant ones: 1 + the zeros after it.
    let decimals = if v > 0.0 && v < 0.1 {
        (2.0 - v.log10().floor()) as usize
    } else {
        2
    };
    format!("{v:.decimals$} GiB")
}

#[cfg(test)]
mod tests {

    #[test]
    fn small_budgets_keep_three_significant_digits() {
        assert_eq!(gib(3 << 29), "1.50 GiB");
        assert_eq!(gib(1 << 30), "1.00 GiB");
        assert_eq!(gib(1_717_987), "0.00160 GiB"); // 0.0016 GiB
        assert_eq!(gib(53_687_091), "0.0500 GiB");
        assert_eq!(gib(0), "0.00 GiB");
    }
    use super::*;

    #[test]
    fn batches_follow_the_token_budget() {
        type Case = (&'static [usize], usize, usize, &'static [Range<usize>]);
        let cases: &[Case] = &[
            (&[], 16, 100, &[]),
            (&[40, 40, 40], 16, 100, &[0..2, 2..3]),
            (&[40, 60, 1], 16, 100, &[0..2, 2..3]),
            // An image over the budget runs alone, wherever it is.
            (&[10, 500, 10], 16, 100, &[0..1, 1..2, 2..3]),
            (&[500, 1], 16, 100, &[0..1, 1..2]),
            // The image count caps a batch too.
            (&[1, 1, 1, 1, 1], 2, 100, &[0..2, 2..4, 4..5]),
        ];
        for &(patches, max_images, max_patches, want) in cases {
            assert_eq!(
                vision_batches(patches, max_images, max_patches),
                want,
                "{patches:?} / {max_images} images / {max_patches} patches"
            );
        }
    }

    #[test]
    fn largest_fitting_is_the_last_good_value() {
        assert_eq!(largest_fitting(1, 100, |x| x * x <= 50), Some(7));
        assert_eq!(largest_fitting(1, 100, |_| true), Some(100));
        assert_eq!(largest_fitting(5, 100, |x| x < 5), None);
        assert_eq!(largest_fitting(9, 8, |_| true), None);
    }

    #[test]
    fn batch_patches_fit_the_budget() {
        // 1000 bytes per patch + 5000 fixed: a 100_000-byte budget holds 95 patches.
        let cost = |p: usize| Some(5000 + 1000 * p as u64);
        assert_eq!(batch_patches(16384, Some(100_000), cost), 95);
        assert_eq!(batch_patches(50, Some(100_000), cost), 50);
        assert_eq!(batch_patches(16384, None, cost), 16384);
        assert_eq!(batch_patches(16384, Some(10), cost), 1);
        assert_eq!(batch_patches(16384, Some(10), |_| None), 16384);
    }

    /// A 28-pixel grid (patch 14, merge 2) as smart_resize gives for a square image: side
    /// `⌊√max / 28⌋ · 28`, capped at the image's own side rounded to a multiple of 28.
    fn square_patches(side: usize, max_pixels: usize) -> usize {
        let own = (side as f64 / 28.0).round() as usize * 28;
        let fit = ((max_pixels as f64).sqrt() / 28.0).floor() as usize * 28;
        let s = own.min(fit).max(28);
        (s / 14) * (s / 14)
    }

    #[test]
    fn refusal_names_size_estimate_and_a_max_pixels_that_fits() {
        let patches = |m: Option<usize>| Some(square_patches(3000, m.unwrap_or(12_845_056)));
        let pass_bytes = |p: usize| Some(1u64 << 20).map(|b| b * p as u64 / 64);
        let cost = ImageCost {
            patches: &patches,
            pass_bytes: &pass_bytes,
            pixel_bounds: (3136, 12_845_056),
        };
        // 3000 px at the default bound: 2996 px a side, 214² = 45,796 patches, 1 MiB per 64
        // patches = 715.6 MiB. A 256 MiB budget holds 16,384 patches = 128² = 1792² pixels.
        let msg = refusal(3000, 3000, 256 << 20, &cost).expect("refused");
        assert!(msg.contains("3000x3000"), "{msg}");
        assert!(msg.contains("45796 patches"), "{msg}");
        assert!(msg.contains("0.70 GiB"), "{msg}");
        assert!(msg.contains("0.25 GiB"), "{msg}");
        // The largest bound with side ⌊√m/28⌋·28 ≤ 1792 is just under 1820².
        assert!(msg.contains("--max-pixels 3312399 would fit"), "{msg}");
        assert_eq!(square_patches(3000, 3_312_399), 16384);
        assert!(square_patches(3000, 3_312_400) > 16384);
        assert!(is_refusal(&msg) && !is_refusal("image does not decode: eof"));
        assert_eq!(refusal(3000, 3000, 1 << 30, &cost), None);
        let msg = refusal(3000, 3000, 1 << 10, &cost).expect("refused");
        assert!(
            msg.contains("no --max-pixels fits (even at --min-pixels 3136)"),
            "{msg}"
        );
    }
}
