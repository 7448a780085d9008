//! The figures of the dataset card, one SVG file (`chart.svg`) readable on its own: every
//! panel has a title, an axis label and the count on each bar, and the split colours have a
//! legend. SVG keeps the text as text, so no font file is embedded and the viewer (the Hub,
//! a browser) renders it sharp. Panels: questions per split, accept rate per family, reject
//! reasons, judge verdicts, generated tokens/s over the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{AnswerLengths, RunStats, ANSWER_LENGTH_BOUNDS};

/// Figure size in pixels (width, height).
pub const CHART_SIZE: (u32, u32) = (1000, 850);

const THINK: &str = "#2ea043";
const NOTHINK: &str = "#1f6feb";
const REJECTED: &str = "#cf222e";
const REASON: &str = "#bf8700";
const LINE: &str = "#8250df";
/// Judge verdicts: no split's colour, since a verdict is not a split.
const JUDGE: &str = "#6e7781";
/// Characters of a bar's label that fit left of the bars (12 px text in 164 px).
const LABEL_CHARS: usize = 24;
const FRAME: &str = "#c8c8c8";

/// Panel size: two columns, three rows.
const PANEL: (f64, f64) = (500.0, 260.0);

/// One horizontal bar: label, value, colour and the text written after the bar.
struct Bar {
    label: String,
    value: f64,
    colour: &'static str,
    text: String,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn text(svg: &mut String, x: f64, y: f64, size: u32, anchor: &str, s: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}">{}</text>"#,
        esc(s)
    );
}

/// A panel of horizontal bars at `(x0, y0)`: title, one bar per entry scaled to `max`, the
/// entry's text after its bar, `axis` under the bars; `(none)` when there is no entry.
fn hbars(svg: &mut String, (x0, y0): (f64, f64), title: &str, axis: &str, bars: &[Bar], max: f64) {
    text(svg, x0 + 20.0, y0 + 28.0, 16, "start", title);
    let (left, right) = (x0 + 170.0, x0 + PANEL.0 - 140.0);
    let (top, bottom) = (y0 + 45.0, y0 + PANEL.1 - 40.0);
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="{FRAME}"/>"#
    );
    text(svg, (left + right) / 2.0, bottom + 25.0, 12, "middle", axis);
    if bars.is_empty() {
        text(svg, left + 10.0, top + 20.0, 12, "start", "(none)");
        return;
    }
    let shown = bars.len().min(8);
    let step = (bottom - top) / shown as f64;
    let height = (step * 0.7).min(24.0);
    for (i, b) in bars.iter().take(shown).enumerate() {
        let y = top + step * i as f64 + (step - height) / 2.0;
        let w = if max > 0.0 {
            (b.value / max) * (right - left)
        } else {
            0.0
        };
        let mid = y + height / 2.0 + 4.0;
        text(svg, left - 6.0, mid, 12, "end", &fit_label(&b.label));
        let _ = writeln!(
            svg,
            r#"<rect x="{left}" y="{y:.1}" width="{w:.1}" height="{height:.1}" fill="{}"/>"#,
            b.colour
        );
        text(svg, left + w + 5.0, mid, 12, "start", &b.text);
    }
    if bars.len() > shown {
        text(
            svg,
            left,
            bottom + 12.0,
            11,
            "start",
            &format!("… {} more in the tables below", bars.len() - shown),
        );
    }
}

/// `label` cut to [`LABEL_CHARS`] by an ellipsis in the middle, so that a long family name
/// keeps its start and its split suffix (the tables under the figure give the full names).
fn fit_label(label: &str) -> String {
    let chars: Vec<char> = label.chars().collect();
    if chars.len() <= LABEL_CHARS {
        return label.to_string();
    }
    // Room for the longest split suffix, `_RS_nothink`, and two characters before it.
    let tail = 13;
    let head = LABEL_CHARS - tail - 1;
    let mut s: String = chars[..head].iter().collect();
    s.push('…');
    s.extend(&chars[chars.len() - tail..]);
    s
}

fn counted(map: &BTreeMap<String, u64>, colour: &'static str) -> Vec<Bar> {
    let mut v: Vec<Bar> = map
        .iter()
        .map(|(k, &n)| Bar {
            label: k.clone(),
            value: n as f64,
            colour,
            text: n.to_string(),
        })
        .collect();
    v.sort_by(|a, b| b.value.total_cmp(&a.value));
    v
}

fn max_of(bars: &[Bar]) -> f64 {
    bars.iter().map(|b| b.value).fold(0.0, f64::max)
}

/// The colour of a split by its kind.
fn split_colour(name: &str) -> &'static str {
    if name.ends_with("_RS_think") {
        THINK
    } else if name.ends_with("_RS_nothink") {
        NOTHINK
    } else {
        REJECTED
    }
}

/// The accept-rate bars of each family, all from [`RunStats::families`] (one count per
/// question): a greedy run's accept rate over its questions; with `--samples K` pass@1 and
/// pass@K over the questions and the per-sample rate over the samples, each labelled.
fn family_bars(stats: &RunStats) -> Vec<Bar> {
    let bar = |label: String, pct: f64, count: String| Bar {
        label,
        value: pct,
        colour: THINK,
        text: format!("{pct:.1} % ({count})"),
    };
    let mut bars = Vec::new();
    for (family, f) in &stats.families {
        let of_questions = |n: u64| format!("{n} of {}", f.questions);
        if stats.sampling.is_none() {
            bars.push(bar(
                family.clone(),
                f.pass_at_1_percent(),
                of_questions(f.pass_at_1),
            ));
            continue;
        }
        bars.push(bar(
            format!("{family} pass@1"),
            f.pass_at_1_percent(),
            of_questions(f.pass_at_1),
        ));
        bars.push(bar(
            format!("{family} pass@{}", f.samples),
            f.pass_at_k_percent(),
            of_questions(f.pass_at_k),
        ));
        let samples = f.accepted_samples + f.wrong_samples;
        bars.push(bar(
            format!("{family} per sample"),
            f.per_sample_percent(),
            format!("{} of {samples}", f.accepted_samples),
        ));
    }
    bars
}

/// Tokens/s over intervals of at least [`super::SAMPLE_INTERVAL`]: `(t_s, rate)` points, the
/// samples taken closer together (the end of a phase, the end of the run) merged into the
/// interval before them, so that no point is a rate over a sliver of time (a 74 ms interval
/// once drew a spike of 34,399 tok/s). A run shorter than one interval has no point.
pub fn token_rates(stats: &RunStats) -> Vec<(f64, f64)> {
    let min = super::SAMPLE_INTERVAL.as_secs_f64();
    let samples = &stats.throughput.samples;
    // Interval ends: from the first sample on, each sample at least `min` after the last end.
    let mut ends: Vec<&super::ThroughputSample> = Vec::new();
    let Some(first) = samples.first() else {
        return Vec::new();
    };
    ends.push(first);
    for s in &samples[1..] {
        let last = ends[ends.len() - 1];
        if s.t_s - last.t_s >= min {
            ends.push(s);
        } else if ends.len() > 1 && std::ptr::eq(s, &samples[samples.len() - 1]) {
            // The last sample closes the run: its sliver joins the interval before it.
            let at = ends.len() - 1;
            ends[at] = s;
        }
    }
    ends.windows(2)
        .map(|w| {
            let tokens = w[1].tokens.saturating_sub(w[0].tokens);
            (w[1].t_s, tokens as f64 / (w[1].t_s - w[0].t_s))
        })
        .collect()
}

/// The left and bottom axes of a plot area `(left, right, top, bottom)`, and the x-axis
/// label `dy` pixels under it.
fn axes(svg: &mut String, (left, right, top, bottom): (f64, f64, f64, f64), dy: f64, label: &str) {
    let _ = writeln!(
        svg,
        r#"<polyline points="{left},{top} {left},{bottom} {right},{bottom}" fill="none" stroke="{FRAME}"/>"#
    );
    text(svg, (left + right) / 2.0, bottom + dy, 12, "middle", label);
}

fn line_panel(svg: &mut String, (x0, y0): (f64, f64), points: &[(f64, f64)], mean: f64) {
    text(
        svg,
        x0 + 20.0,
        y0 + 28.0,
        16,
        "start",
        &format!("Generated tokens/s over the run (mean {mean:.1})"),
    );
    let (left, right) = (x0 + 70.0, x0 + PANEL.0 - 30.0);
    let (top, bottom) = (y0 + 45.0, y0 + PANEL.1 - 40.0);
    axes(
        svg,
        (left, right, top, bottom),
        25.0,
        "seconds since the start",
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">tokens/s</text>"#,
        x0 + 25.0,
        (top + bottom) / 2.0,
        x0 + 25.0,
        (top + bottom) / 2.0
    );
    let t_max = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let r_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    if points.len() < 2 || t_max <= 0.0 || r_max <= 0.0 {
        text(
            svg,
            left + 10.0,
            top + 20.0,
            12,
            "start",
            "(the run was too short for a curve: one sample a second)",
        );
        return;
    }
    text(
        svg,
        left - 5.0,
        top + 4.0,
        11,
        "end",
        &format!("{r_max:.0}"),
    );
    text(svg, left - 5.0, bottom, 11, "end", "0");
    text(svg, right, bottom + 12.0, 11, "end", &format!("{t_max:.0}"));
    let pts: Vec<String> = points
        .iter()
        .map(|&(t, r)| {
            format!(
                "{:.1},{:.1}",
                left + t / t_max * (right - left),
                bottom - r / r_max * (bottom - top)
            )
        })
        .collect();
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{LINE}" stroke-width="2"/>"#,
        pts.join(" ")
    );
}

/// The card's figures as one SVG document; `judge` is whether the run's judge was on.
pub fn chart_svg(stats: &RunStats, judge: bool) -> String {
    let (w, h) = CHART_SIZE;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, sans-serif">
<rect width="100%" height="100%" fill="white"/>
"#
    );
    let at = |col: f64, row: f64| (col * PANEL.0, row * PANEL.1);
    // A greedy run's split items are questions; a sampled run's are samples.
    let (unit, title, reasons_axis) = if stats.sampling.is_some() {
        ("samples", "Samples per split", "wrong samples")
    } else {
        ("questions", "Questions per split", "rejected questions")
    };
    let mut splits: Vec<Bar> = stats
        .split_items
        .iter()
        .map(|(k, &n)| Bar {
            label: k.clone(),
            value: n as f64,
            colour: split_colour(k),
            text: format!(
                "{n} in {} rows",
                stats.split_rows.get(k).copied().unwrap_or(0)
            ),
        })
        .collect();
    splits.sort_by_key(|b| b.label.clone());
    let max = max_of(&splits);
    hbars(&mut svg, at(0.0, 0.0), title, unit, &splits, max);
    legend(&mut svg, 3.0 * PANEL.1, &stats.split_items);
    let axis = if stats.sampling.is_some() {
        "accepted, % of the family's questions or samples"
    } else {
        "accepted, % of the family's questions"
    };
    hbars(
        &mut svg,
        at(1.0, 0.0),
        "Accept rate per family",
        axis,
        &family_bars(stats),
        100.0,
    );
    let reasons = counted(&stats.reject_reasons, REASON);
    let max = max_of(&reasons);
    hbars(
        &mut svg,
        at(0.0, 1.0),
        "Reject reasons",
        reasons_axis,
        &reasons,
        max,
    );
    let verdicts = counted(&stats.judge.verdicts, JUDGE);
    let max = max_of(&verdicts);
    let title = if judge {
        format!(
            "Judge verdicts ({} judged, {} moved to accepted)",
            stats.judge.judged, stats.judge.overturns
        )
    } else {
        "Judge verdicts (judge off)".to_string()
    };
    // Reused verdicts under the bars: the title has no room for a third count.
    let axis = match stats.judge.reused {
        0 => "verifier rejects judged".to_string(),
        n => format!("verifier rejects judged ({n} verdicts reused)"),
    };
    hbars(&mut svg, at(1.0, 1.0), &title, &axis, &verdicts, max);
    line_panel(
        &mut svg,
        at(0.0, 2.0),
        &token_rates(stats),
        stats.throughput.tokens_per_s,
    );
    length_panel(&mut svg, at(1.0, 2.0), &stats.answer_lengths);
    svg.push_str("</svg>\n");
    svg
}

/// The legend of the split colours: one row of swatches starting at height `y0`, for the
/// kinds of split the run wrote (all three when it wrote none; no `_RS_think` with reasoning
/// off).
fn legend(svg: &mut String, y0: f64, splits: &BTreeMap<String, u64>) {
    text(svg, 20.0, y0 + 30.0, 14, "start", "Split colours");
    let mut x = 130.0;
    let kinds = [
        (THINK, "accepted, with reasoning (_RS_think)"),
        (NOTHINK, "accepted, answer only (_RS_nothink)"),
        (REJECTED, "rejected (_rejected)"),
    ];
    let written = |colour: &str| splits.keys().any(|k| split_colour(k) == colour);
    let any = kinds.iter().any(|(c, _)| written(c));
    for (colour, name) in kinds.into_iter().filter(|(c, _)| !any || written(c)) {
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{:.1}" width="16" height="16" fill="{colour}"/>"#,
            y0 + 17.0
        );
        text(svg, x + 22.0, y0 + 30.0, 13, "start", name);
        x += 300.0;
    }
}

/// Answer lengths in generated tokens: one column per bucket, accepted (blue, below) and
/// rejected (red, stacked on top), the bucket's total above the column.
fn length_panel(svg: &mut String, (x0, y0): (f64, f64), lengths: &AnswerLengths) {
    text(
        svg,
        x0 + 20.0,
        y0 + 28.0,
        16,
        "start",
        "Answer length (generated tokens)",
    );
    let (left, right) = (x0 + 50.0, x0 + PANEL.0 - 20.0);
    let (top, bottom) = (y0 + 55.0, y0 + PANEL.1 - 45.0);
    axes(
        svg,
        (left, right, top, bottom),
        35.0,
        "tokens per answer (bucket upper bound)",
    );
    let totals: Vec<u64> = (0..ANSWER_LENGTH_BOUNDS.len())
        .map(|i| lengths.accepted[i] + lengths.rejected[i])
        .collect();
    let max = totals.iter().copied().max().unwrap_or(0);
    if max == 0 {
        text(svg, left + 10.0, top + 20.0, 12, "start", "(no answers)");
        return;
    }
    let step = (right - left) / ANSWER_LENGTH_BOUNDS.len() as f64;
    let scale = (bottom - top) / max as f64;
    for (i, &total) in totals.iter().enumerate() {
        let x = left + step * i as f64 + step * 0.15;
        let width = step * 0.7;
        let acc_h = lengths.accepted[i] as f64 * scale;
        let rej_h = lengths.rejected[i] as f64 * scale;
        for (y, h, colour) in [
            (bottom - acc_h, acc_h, NOTHINK),
            (bottom - acc_h - rej_h, rej_h, REJECTED),
        ] {
            if h > 0.0 {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{h:.1}" fill="{colour}"/>"#
                );
            }
        }
        let mid = x + width / 2.0;
        if total > 0 {
            text(
                svg,
                mid,
                bottom - acc_h - rej_h - 4.0,
                11,
                "middle",
                &total.to_string(),
            );
        }
        text(
            svg,
            mid,
            bottom + 14.0,
            10,
            "middle",
            &AnswerLengths::label(i),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ThroughputSample;

    #[test]
    fn the_figures_carry_titles_counts_and_a_legend() {
        let mut stats = RunStats {
            split_items: BTreeMap::from([
                ("OrandCar_RS_think".to_string(), 41),
                ("OrandCar_RS_nothink".to_string(), 41),
                ("OrandCar_rejected".to_string(), 7),
            ]),
            split_rows: BTreeMap::from([
                ("OrandCar_RS_think".to_string(), 40),
                ("OrandCar_RS_nothink".to_string(), 40),
                ("OrandCar_rejected".to_string(), 7),
            ]),
            families: BTreeMap::from([(
                "OrandCar".to_string(),
                crate::report::SamplingStats {
                    samples: 1,
                    questions: 48,
                    pass_at_1: 41,
                    pass_at_k: 41,
                    accepted_samples: 41,
                    distinct_accepted: 41,
                    wrong_samples: 7,
                },
            )]),
            reject_reasons: BTreeMap::from([("wrong_answer".to_string(), 7)]),
            ..Default::default()
        };
        stats.judge.judged = 7;
        stats.judge.verdicts = BTreeMap::from([("WRONG".to_string(), 7)]);
        stats.throughput.samples = [(0.0, 0), (2.0, 100), (4.0, 300)]
            .iter()
            .map(|&(t_s, tokens)| ThroughputSample {
                t_s,
                items: 0,
                tokens,
            })
            .collect();
        for (tokens, accepted) in [(3, true), (4, true), (5, false), (900, false)] {
            stats.answer_lengths.record(tokens, accepted);
        }
        assert_eq!(token_rates(&stats), vec![(2.0, 50.0), (4.0, 100.0)]);
        // Samples closer than a second are merged: one in the middle (2.3) is skipped, and the
        // last (0.074 s after the one before, 2,000 tokens) ends the interval from 2.0, its
        // tokens over 1.074 s, not over 0.074 s (27,027 tok/s).
        let sample = |t_s, tokens| ThroughputSample {
            t_s,
            items: 0,
            tokens,
        };
        let mut short = stats.clone();
        short.throughput.samples = vec![
            sample(0.0, 0),
            sample(1.0, 100),
            sample(2.0, 200),
            sample(2.3, 230),
            sample(3.0, 300),
            sample(3.074, 2300),
        ];
        assert_eq!(
            token_rates(&short),
            vec![(1.0, 100.0), (2.0, 100.0), (3.074, 2100.0 / (3.074 - 2.0))]
        );
        short.throughput.samples = vec![sample(0.0, 0), sample(0.5, 900), sample(0.9, 1000)];
        assert!(
            token_rates(&short).is_empty(),
            "shorter than one interval: no point"
        );
        let svg = chart_svg(&stats, true);
        for want in [
            ">Questions per split<",
            ">Accept rate per family<",
            ">85.4 % (41 of 48)<",
            ">Reject reasons<",
            ">rejected questions<",
            ">wrong_answer<",
            ">Judge verdicts (7 judged, 0 moved to accepted)<",
            ">accepted, with reasoning (_RS_think)<",
            ">Answer length (generated tokens)<",
            ">≤8<",
            ">&gt;512<",
            ">seconds since the start<",
            ">tokens/s<",
        ] {
            assert!(svg.contains(want), "{want} missing");
        }
        assert_eq!(
            svg.matches(">41 in 40 rows<").count(),
            2,
            "a count on each accepted split"
        );
        assert!(esc("a<b&").eq("a&lt;b&amp;"));
        // Bucket "≤4" holds the two accepted answers of 3 and 4 tokens: its total is 2.
        assert!(svg.contains(">2</text>"), "bucket total missing");
        assert!(svg.contains(&format!(r#"fill="{JUDGE}""#)), "verdict bars");
    }

    /// Issue 45 item 1: a sampled run's figures count samples where they count samples and
    /// questions where they count questions; the accept rate is pass@1, pass@K and the
    /// per-sample rate, each labelled (not accepted samples over samples plus rejected rows).
    #[test]
    fn a_sampled_runs_figures_say_their_unit() {
        let k = crate::report::SamplingStats {
            samples: 4,
            questions: 78,
            pass_at_1: 62,
            pass_at_k: 68,
            accepted_samples: 246,
            distinct_accepted: 246,
            wrong_samples: 66,
        };
        let stats = RunStats {
            split_items: BTreeMap::from([
                ("OrandCar_RS_nothink".to_string(), 246),
                ("OrandCar_rejected".to_string(), 66),
            ]),
            split_rows: BTreeMap::from([
                ("OrandCar_RS_nothink".to_string(), 68),
                ("OrandCar_rejected".to_string(), 25),
            ]),
            families: BTreeMap::from([("OrandCar".to_string(), k.clone())]),
            sampling: Some(k),
            ..Default::default()
        };
        let svg = chart_svg(&stats, false);
        for want in [
            ">Samples per split<",
            ">246 in 68 rows<",
            ">66 in 25 rows<",
            ">OrandCar pass@1<",
            ">79.5 % (62 of 78)<",
            ">OrandCar pass@4<",
            ">87.2 % (68 of 78)<",
            ">OrandCar per sample<",
            ">78.8 % (246 of 312)<",
            ">wrong samples<",
        ] {
            assert!(svg.contains(want), "{want} missing");
        }
        assert!(!svg.contains("Questions per split") && !svg.contains("90.8"));
    }

    #[test]
    fn long_labels_reasoning_off_and_judge_off_are_drawn_as_they_are() {
        let family = "AVeryLongFamilyNameFromTheHub";
        let stats = RunStats {
            split_items: BTreeMap::from([
                (format!("{family}_RS_nothink"), 3),
                (format!("{family}_rejected"), 2),
            ]),
            ..Default::default()
        };
        let svg = chart_svg(&stats, false);
        assert_eq!(
            fit_label(&format!("{family}_RS_nothink")),
            "AVeryLongF…ub_RS_nothink"
        );
        assert_eq!(fit_label("OrandCar_RS_think"), "OrandCar_RS_think");
        assert!(svg.contains(">AVeryLongF…ub_RS_nothink<"), "{svg}");
        assert!(!svg.contains(&format!(">{family}_RS_nothink<")));
        assert!(svg.contains(">Judge verdicts (judge off)<"));
        assert!(
            !svg.contains("_RS_think)"),
            "no reasoning split, no legend entry"
        );
        assert!(svg.contains(">accepted, answer only (_RS_nothink)<"));
        assert!(svg.contains(">rejected (_rejected)<"));
    }

    #[test]
    fn answer_length_buckets_are_powers_of_two_inclusive() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (512, 9),
            (513, 10),
        ];
        for (tokens, bucket) in cases {
            assert_eq!(AnswerLengths::bucket(tokens), bucket, "{tokens} tokens");
        }
        assert_eq!(AnswerLengths::bucket(100_000), 10);
        assert_eq!(AnswerLengths::label(0), "≤1");
        assert_eq!(AnswerLengths::label(10), ">512");
        let mut l = AnswerLengths::default();
        l.record(6, true);
        l.record(6, false);
        l.record(7, false);
        assert_eq!((l.accepted[3], l.rejected[3]), (1, 2));
    }
}
