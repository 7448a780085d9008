//! `verisample doctor` on the CPU, as CI runs it: every kernel of the three attention paths
//! (native, portable, flash through its CPU oracle) in f32/f16/bf16 against an independent
//! direct reference (plain loops, no code shared with the kernels), bitwise batch invariance
//! of every path (attention, linears, whole models), and the default model's tokens on the
//! bundled sample on every path; a device this binary was not built for is a usage error.

use std::process::Command;

fn doctor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_verisample"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("the verisample binary")
}

#[test]
fn doctor_on_cpu_passes_every_check_it_reports() {
    let out = doctor(&["--device", "cpu", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON report");
    assert_eq!(report["device"], "cpu");
    assert_eq!(report["dtypes"], serde_json::json!(["f32", "f16", "bf16"]));
    let checks = report["checks"].as_array().unwrap();
    let status = |name: &str| -> String {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name:?} in {checks:?}"))["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let detail = |name: &str| -> String {
        checks.iter().find(|c| c["name"] == name).unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    for path in ["native", "portable", "flash"] {
        for dtype in ["f32", "f16", "bf16"] {
            for op in ["reshape_and_cache", "paged_attention"] {
                assert_eq!(
                    status(&format!("{op} {path} {dtype}")),
                    "pass",
                    "{op} {path} {dtype}"
                );
            }
            let attn = detail(&format!("paged_attention {path} {dtype}"));
            assert!(attn.contains("vs direct f32 reference"), "{attn}");
        }
    }
    // Batch invariance is required, bitwise, of every path in f32 and bf16: attention rows
    // (alone, in batches of 7 to 100, chunked, decoded), linear rows (tiled and packed), and
    // whole models (the default one and every family's fixture, found in the checkout).
    for dtype in ["f32", "bf16"] {
        for path in ["native", "portable", "flash"] {
            let name = format!("batch invariance: attention {path} {dtype}");
            assert_eq!(status(&name), "pass", "{name}");
            let d = detail(&name);
            assert!(
                d.contains("batch of 100") && d.contains("decoded token by token"),
                "{d}"
            );
            let name = format!("batch invariance: models {path} {dtype}");
            assert_eq!(status(&name), "pass", "{name}");
            let d = detail(&name);
            for family in [
                "qwen2_vl",
                "qwen2_5_vl",
                "qwen3_vl",
                "qwen3_5",
                "qwen3_5_moe",
                "glm4v",
            ] {
                assert!(d.contains(family), "{name} did not check {family}: {d}");
            }
        }
        for kind in ["tiled", "packed"] {
            let name = format!("batch invariance: linear {kind} {dtype}");
            assert_eq!(status(&name), "pass", "{name}");
        }
        assert_eq!(status(&format!("ops vs cpu {dtype}")), "pass");
    }
    // The path `run` takes here, named.
    assert!(
        report["run_path"].as_str().unwrap().starts_with("native"),
        "{}",
        report["run_path"]
    );
    for path in ["portable", "flash"] {
        let name = format!("default model tokens {path} vs cpu native");
        assert_eq!(status(&name), "pass", "{name}");
        // 48 items: doctor's tolerance (one in 39) would allow 1; both paths match all.
        let d = detail(&name);
        assert!(
            d.starts_with("48/48 ") && d.contains("at most 1 may differ"),
            "{d}"
        );
    }
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{checks:?}");
}

#[test]
fn doctor_on_a_device_not_built_is_a_usage_error() {
    if cfg!(feature = "cuda") {
        return;
    }
    let out = doctor(&["--device", "cuda:0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("built without cuda support"), "{err}");
}
