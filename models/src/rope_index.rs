//! M-RoPE position ids (`get_rope_index`): 3-D `(t, h, w)` positions for a prompt with images,
//! and the per-sequence `rope_delta` that places decode tokens after it.
//!
//! Reference: transformers `Qwen2VLModel.get_rope_index` (same for Qwen2.5-VL and Qwen3-VL on
//! still images). Text tokens get `t = h = w = p` with `p` counting on from the previous
//! segment; an image of merged grid `(t, h/m, w/m)` starting at `s` gets
//! `(s + t_i, s + h_i, s + w_i)` in row-major order, and the text after it continues at
//! `s + max(h, w) / m`. A decode token at sequence index `n` sits at `n + rope_delta` on all axes.

/// Errors of [`get_rope_index`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RopeIndexError {
    /// More runs of image tokens than grids were given.
    #[error("found {runs} runs of image tokens but {grids} grid_thw entries")]
    GridCount {
        /// Image-token runs in the ids.
        runs: usize,
        /// Grids given.
        grids: usize,
    },
    /// A run of image tokens has a different length than its grid implies.
    #[error("image {index}: {found} image tokens but grid {grid:?} needs {expected}")]
    RunLength {
        /// Image index.
        index: usize,
        /// Tokens in the run.
        found: usize,
        /// `t·h·w / merge²`.
        expected: usize,
        /// The grid.
        grid: [usize; 3],
    },
}

/// Rows of M-RoPE position ids: temporal, height, width.
pub const MROPE_ROWS: usize = 3;

/// Positions of one sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RopeIndex {
    /// `[3][len]`: temporal, height and width position of every token.
    pub positions: [Vec<u32>; 3],
    /// `max(position) + 1 - len`; decode token at index `n` has position `n + rope_delta`.
    pub rope_delta: i64,
}

/// M-RoPE positions of one sequence `input_ids` whose runs of `image_token_id` are, in order,
/// the images of `grids` (`(t, h, w)` in patches, merged by `spatial_merge_size`).
///
/// Errors: [`RopeIndexError`] when runs and grids disagree in number or length.
pub fn get_rope_index(
    input_ids: &[u32],
    grids: &[[usize; 3]],
    image_token_id: u32,
    spatial_merge_size: usize,
) -> Result<RopeIndex, RopeIndexError> {
    let m = spatial_merge_size.max(1);
    let mut pos: [Vec<u32>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut current: usize = 0;
    let mut i = 0;
    let mut image = 0;
    let runs = count_runs(input_ids, image_token_id);
    if runs != grids.len() {
        return Err(RopeIndexError::GridCount {
            runs,
            grids: grids.len(),
        });
    }
    while i < input_ids.len() {
        if input_ids[i] != image_token_id {
            for p in &mut pos {
                p.push(current as u32);
            }
            current += 1;
            i += 1;
            continue;
        }
        let run = input_ids[i..]
            .iter()
            .take_while(|&&t| t == image_token_id)
            .count();
        let grid = grids[image];
        let (gt, gh, gw) = (grid[0], grid[1] / m, grid[2] / m);
        if run != gt * gh * gw {
            return Err(RopeIndexError::RunLength {
                index: image,
                found: run,
                expected: gt * gh * gw,
                grid,
            });
        }
        for t in 0..gt {
            for h in 0..gh {
                for w in 0..gw {
                    pos[0].push((current + t) as u32);
                    pos[1].push((current + h) as u32);
                    pos[2].push((current + w) as u32);
                }
            }
        }
        current += gh.max(gw);
        i += run;
        image += 1;
    }
    let max = pos
        .iter()
        .flat_map(|p| p.iter())
        .copied()
        .max()
        .map(|m| m as i64 + 1)
        .unwrap_or(0);
    Ok(RopeIndex {
        positions: pos,
        rope_delta: max - input_ids.len() as i64,
    })
}

/// The position (same on all three axes) of the token at sequence index `index` generated after
/// a prompt with `rope_delta` (see [`RopeIndex::rope_delta`]).
pub fn decode_position(index: usize, rope_delta: i64) -> u32 {
    (index as i64 + rope_delta).max(0) as u32
}

fn count_runs(ids: &[u32], tok: u32) -> usize {
    ids.iter()
        .enumerate()
        .filter(|&(i, &t)| t == tok && (i == 0 || ids[i - 1] != tok))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMG: u32 = 9;

    #[test]
    fn text_only_is_arange_with_zero_delta() {
        let r = get_rope_index(&[1, 2, 3, 4], &[], IMG, 2).unwrap();
        assert_eq!(r.positions[0], vec![0, 1, 2, 3]);
        assert_eq!(
            r.positions,
            [vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![0, 1, 2, 3]]
        );
        assert_eq!(r.rope_delta, 0);
    }

    #[test]
    fn image_then_text() {
        // 2 text tokens, an image of grid (1, 4, 6) -> 2x3 merged tokens, then 2 text tokens.
        let ids = [1, 2, IMG, IMG, IMG, IMG, IMG, IMG, 3, 4];
        let r = get_rope_index(&ids, &[[1, 4, 6]], IMG, 2).unwrap();
        assert_eq!(r.positions[0], vec![0, 1, 2, 2, 2, 2, 2, 2, 5, 6]);
        assert_eq!(r.positions[1], vec![0, 1, 2, 2, 2, 3, 3, 3, 5, 6]);
        assert_eq!(r.positions[2], vec![0, 1, 2, 3, 4, 2, 3, 4, 5, 6]);
        // max 6 + 1 - 10 tokens.
        assert_eq!(r.rope_delta, -3);
        assert_eq!(decode_position(10, r.rope_delta), 7);
    }

    #[test]
    fn tall_image_advances_by_height() {
        let ids = [IMG, IMG, IMG, 5];
        let r = get_rope_index(&ids, &[[1, 6, 2]], IMG, 2).unwrap();
        assert_eq!(r.positions[1], vec![0, 1, 2, 3]);
        assert_eq!(r.positions[2], vec![0, 0, 0, 3]);
        assert_eq!(r.rope_delta, 0);
    }

    #[test]
    fn mismatches_are_errors() {
        assert_eq!(
            get_rope_index(&[IMG, IMG], &[[1, 4, 4]], IMG, 2),
            Err(RopeIndexError::RunLength {
                index: 0,
                found: 2,
                expected: 4,
                grid: [1, 4, 4]
            })
        );
        assert_eq!(
            get_rope_index(&[IMG, 1, IMG], &[[1, 2, 2]], IMG, 2),
            Err(RopeIndexError::GridCount { runs: 2, grids: 1 })
        );
    }
}
