//! The small PNG chart of the dataset card: three panels drawn with plotters' bitmap
//! backend: items per split, reject reasons (largest first), generated tokens/s over time.
//!
//! The workspace builds plotters without a font backend (no `ttf`/`ab_glyph`, which would
//! pull system font libraries), so the chart carries no text: the card's Markdown names the
//! panels and colours and holds the exact numbers in tables.

use std::path::Path;

use plotters::prelude::*;

use super::RunStats;

/// Chart size in pixels (width, height).
pub const CHART_SIZE: (u32, u32) = (960, 320);

/// Chart failures (plotters drawing or PNG encoding).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw chart {path}: {message}")]
pub struct ChartError {
    /// The PNG file.
    pub path: String,
    /// What failed.
    pub message: String,
}

const THINK: RGBColor = RGBColor(46, 160, 67);
const NOTHINK: RGBColor = RGBColor(31, 111, 235);
const REJECTED: RGBColor = RGBColor(207, 34, 46);
const REASON: RGBColor = RGBColor(191, 135, 0);
const LINE: RGBColor = RGBColor(130, 80, 223);
const FRAME: RGBColor = RGBColor(200, 200, 200);

/// Bar heights in pixels for `values`, scaled to `height` by the largest value.
pub fn bar_heights(values: &[u64], height: i32) -> Vec<i32> {
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| {
            if max == 0 {
                0
            } else {
                ((v as f64 / max as f64) * f64::from(height)).round() as i32
            }
        })
        .collect()
}

/// Tokens/s between consecutive samples: `(t_s, rate)` points.
pub fn token_rates(stats: &RunStats) -> Vec<(f64, f64)> {
    stats
        .throughput
        .samples
        .windows(2)
        .filter(|w| w[1].t_s > w[0].t_s)
        .map(|w| {
            (
                w[1].t_s,
                (w[1].tokens.saturating_sub(w[0].tokens)) as f64 / (w[1].t_s - w[0].t_s),
            )
        })
        .collect()
}

fn split_colour(name: &str) -> RGBColor {
    if name.ends_with("_RS_think") {
        THINK
    } else if name.ends_with("_RS_nothink") {
        NOTHINK
    } else {
        REJECTED
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;
type DrawResult = DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;

fn draw_bars(area: &Area<'_>, bars: &[(u64, RGBColor)]) -> Result<(), DrawResult> {
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let pad = 16;
    area.draw(&Rectangle::new(
        [(pad / 2, pad / 2), (w - pad / 2, h - pad / 2)],
        FRAME,
    ))?;
    if bars.is_empty() {
        return Ok(());
    }
    let values: Vec<u64> = bars.iter().map(|b| b.0).collect();
    let heights = bar_heights(&values, h - 2 * pad);
    let slot = (w - 2 * pad) / bars.len() as i32;
    for (i, ((_, colour), bh)) in bars.iter().zip(heights).enumerate() {
        let x0 = pad + i as i32 * slot + slot / 8;
        let x1 = pad + (i as i32 + 1) * slot - slot / 8;
        area.draw(&Rectangle::new(
            [(x0, h - pad - bh), (x1, h - pad)],
            colour.filled(),
        ))?;
    }
    Ok(())
}

fn draw_line(area: &Area<'_>, points: &[(f64, f64)]) -> Result<(), DrawResult> {
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let pad = 16;
    area.draw(&Rectangle::new(
        [(pad / 2, pad / 2), (w - pad / 2, h - pad / 2)],
        FRAME,
    ))?;
    let t_max = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let r_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    if points.is_empty() || t_max <= 0.0 || r_max <= 0.0 {
        return Ok(());
    }
    let px: Vec<(i32, i32)> = points
        .iter()
        .map(|&(t, r)| {
            (
                pad + ((t / t_max) * f64::from(w - 2 * pad)) as i32,
                h - pad - ((r / r_max) * f64::from(h - 2 * pad)) as i32,
            )
        })
        .collect();
    area.draw(&PathElement::new(px, LINE.stroke_width(2)))
}

/// Draw the chart for `stats` into the PNG file `path`.
///
/// Errors: [`ChartError`] when drawing or writing the PNG fails.
pub fn draw_chart(path: &Path, stats: &RunStats) -> Result<(), ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let root = BitMapBackend::new(path, CHART_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, 3));
    let splits: Vec<(u64, RGBColor)> = stats
        .split_items
        .iter()
        .map(|(name, &n)| (n, split_colour(name)))
        .collect();
    draw_bars(&panels[0], &splits).map_err(|e| err(&e))?;
    let mut reasons: Vec<u64> = stats.reject_reasons.values().copied().collect();
    reasons.sort_unstable_by(|a, b| b.cmp(a));
    let reasons: Vec<(u64, RGBColor)> = reasons.into_iter().map(|n| (n, REASON)).collect();
    draw_bars(&panels[1], &reasons).map_err(|e| err(&e))?;
    draw_line(&panels[2], &token_rates(stats)).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ThroughputSample;

    #[test]
    fn bar_heights_scale_to_the_largest() {
        assert_eq!(bar_heights(&[60, 18, 0], 120), vec![120, 36, 0]);
        assert_eq!(bar_heights(&[0, 0], 50), vec![0, 0]);
        assert_eq!(bar_heights(&[], 50), Vec::<i32>::new());
    }

    #[test]
    fn chart_is_a_png_of_the_stated_size() {
        let mut stats = RunStats::default();
        stats.split_items.insert("F_RS_think".into(), 5);
        stats.split_items.insert("F_rejected".into(), 2);
        stats.reject_reasons.insert("wrong_answer".into(), 2);
        stats.throughput.samples = vec![
            ThroughputSample {
                t_s: 0.0,
                items: 0,
                tokens: 0,
            },
            ThroughputSample {
                t_s: 2.0,
                items: 3,
                tokens: 100,
            },
            ThroughputSample {
                t_s: 4.0,
                items: 7,
                tokens: 300,
            },
        ];
        assert_eq!(token_rates(&stats), vec![(2.0, 50.0), (4.0, 100.0)]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        draw_chart(&path, &stats).unwrap();
        let img = image::open(&path).unwrap();
        assert_eq!((img.width(), img.height()), CHART_SIZE);
    }
}
