//! The dataset card's figures are readable on their own. The SVG is rendered to a
//! PNG with a real renderer (`rsvg-convert`, Debian's `librsvg2-bin`, installed by `.ci/run`)
//! and the texts a reader needs are checked in the SVG; the PNG is kept at
//! `target/card-figures.png` for a person to look at. Without `rsvg-convert` the rendering
//! step skips through the shared skip helper (a failure under CI, which installs it).

mod shared_data;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use verisample::report::chart::{chart_svg, CHART_SIZE};
use verisample::report::{RunStats, SamplingStats, ThroughputSample};

/// A greedy run's counts of a family: `accepted` of `questions`.
fn family(questions: u64, accepted: u64) -> SamplingStats {
    SamplingStats {
        samples: 1,
        questions,
        pass_at_1: accepted,
        pass_at_k: accepted,
        accepted_samples: accepted,
        distinct_accepted: accepted,
        wrong_samples: questions - accepted,
    }
}

fn stats() -> RunStats {
    let mut s = RunStats {
        split_items: BTreeMap::from([
            ("OrandCar_RS_think".to_string(), 66),
            ("OrandCar_RS_nothink".to_string(), 66),
            ("OrandCar_rejected".to_string(), 12),
            ("IIIT5K_RS_think".to_string(), 30),
            ("IIIT5K_RS_nothink".to_string(), 30),
            ("IIIT5K_rejected".to_string(), 10),
        ]),
        split_rows: BTreeMap::from([
            ("OrandCar_RS_think".to_string(), 60),
            ("OrandCar_RS_nothink".to_string(), 60),
            ("OrandCar_rejected".to_string(), 12),
            ("IIIT5K_RS_think".to_string(), 30),
            ("IIIT5K_RS_nothink".to_string(), 30),
            ("IIIT5K_rejected".to_string(), 10),
        ]),
        families: BTreeMap::from([
            ("OrandCar".to_string(), family(78, 66)),
            ("IIIT5K".to_string(), family(40, 30)),
        ]),
        reject_reasons: BTreeMap::from([
            ("judge_wrong".to_string(), 15),
            ("judge_unsure".to_string(), 4),
            ("no_answer".to_string(), 2),
            ("judge_numbers_disagree".to_string(), 1),
        ]),
        ..Default::default()
    };
    s.judge.judged = 24;
    s.judge.overturns = 2;
    s.judge.verdicts = BTreeMap::from([
        ("CORRECT".to_string(), 3),
        ("WRONG".to_string(), 15),
        ("UNSURE".to_string(), 6),
    ]);
    for (tokens, accepted, n) in [
        (3, true, 60),
        (12, true, 30),
        (12, false, 6),
        (600, false, 16),
    ] {
        for _ in 0..n {
            s.answer_lengths.record(tokens, accepted);
        }
    }
    s.throughput.tokens_per_s = 88.0;
    s.throughput.samples = (0..60)
        .map(|i| ThroughputSample {
            t_s: f64::from(i),
            items: u64::from(i as u32) * 2,
            tokens: u64::from(i as u32 * i as u32) * 3,
        })
        .collect();
    s
}

#[test]
fn the_card_figures_have_titles_axes_counts_and_a_legend_and_render() {
    let svg = chart_svg(&stats(), true);
    for want in [
        ">Questions per split<",
        ">questions<",
        ">66 in 60 rows<",
        ">Accept rate per family<",
        ">84.6 % (66 of 78)<",
        ">75.0 % (30 of 40)<",
        ">Reject reasons<",
        ">judge_wrong<",
        ">15<",
        ">Judge verdicts (24 judged, 2 moved to accepted)<",
        ">UNSURE<",
        ">Generated tokens/s over the run (mean 88.0)<",
        ">seconds since the start<",
        ">tokens/s<",
        ">Split colours<",
        ">rejected (_rejected)<",
        ">Answer length (generated tokens)<",
        ">tokens per answer (bucket upper bound)<",
        ">≤4<",
        ">≤16<",
        ">&gt;512<",
        ">36<",
    ] {
        assert!(svg.contains(want), "{want} missing from the figure");
    }
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let svg_path = target.join("card-figures.svg");
    let png_path = target.join("card-figures.png");
    std::fs::write(&svg_path, &svg).unwrap();
    let rendered = Command::new("rsvg-convert")
        .arg(&svg_path)
        .arg("-o")
        .arg(&png_path)
        .status();
    match rendered {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("rsvg-convert failed: {s:?}"),
        Err(_) => {
            shared_data::skip(
                "no rsvg-convert (apt-get install librsvg2-bin) to render the figure",
            );
            return;
        }
    }
    let img = image::open(&png_path).unwrap().to_rgb8();
    assert_eq!((img.width(), img.height()), CHART_SIZE);
    // Text was drawn: the title row of the first panel holds dark pixels.
    let dark = (20..200)
        .flat_map(|x| (10..32).map(move |y| (x, y)))
        .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|&c| c < 100))
        .count();
    assert!(dark > 50, "no title text rendered ({dark} dark pixels)");
    // The answer-length histogram (bottom-right panel) drew its accepted columns in blue.
    let blue = (500..1000)
        .flat_map(|x| (560..740).map(move |y| (x, y)))
        .filter(|&(x, y)| img.get_pixel(x, y).0 == [0x1f, 0x6f, 0xeb])
        .count();
    assert!(
        blue > 500,
        "no histogram columns rendered ({blue} blue pixels)"
    );
    println!("rendered {}", png_path.display());
}
