//! Replays saved fuzz inputs and the fixture seeds through the `sse_stream` fuzz harness, so
//! what the fuzzer once broke stays fixed without running the fuzzer.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    out.retain(|p| p.is_file() && (ext.is_empty() || p.extension().is_some_and(|x| x == ext)));
    out.sort();
    out
}

/// Names of the inputs the harness panics on.
fn failing(inputs: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<String> {
    inputs
        .into_iter()
        .filter(|(_, data)| std::panic::catch_unwind(|| harness::sse_stream(data)).is_err())
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn saved_fuzz_inputs_pass_the_harness() {
    let inputs: Vec<_> = files("fuzz/regressions", "")
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read regression input")))
        .collect();
    assert_eq!(failing(inputs), Vec::<String>::new());
}

#[test]
fn fixture_streams_pass_the_harness_with_every_adapter_and_read_pattern() {
    let fixtures = files("tests/fixtures", "sse");
    assert!(fixtures.len() >= 10, "fixture streams missing: {fixtures:?}");
    let mut inputs = Vec::new();
    for path in &fixtures {
        let body = std::fs::read(path).expect("read fixture");
        // Adapters 0..3, a cap that stops most streams (64) and one that stops none, and read
        // patterns: byte by byte (seed 0) and two pseudo-random ones.
        for (kind, cap, seed) in [(0, 63, 0), (1, 255, 7), (2, 63, 200), (0, 255, 1), (1, 0, 0), (2, 255, 99)] {
            let mut data = vec![kind, cap, seed];
            data.extend_from_slice(&body);
            inputs.push((format!("{} {kind}/{cap}/{seed}", path.display()), data));
        }
    }
    assert_eq!(failing(inputs), Vec::<String>::new());
}
