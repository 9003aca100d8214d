//! Replays saved fuzz inputs and the fixture seeds through the fuzz harnesses (`sse_stream`,
//! `h1_response`, `error_response`), so what the fuzzer once broke stays fixed without running the fuzzer.

#[path = "../../fuzz/harness.rs"]
mod harness;

#[path = "../../fuzz/h1_harness.rs"]
mod h1_harness;

#[path = "../../fuzz/error_harness.rs"]
mod error_harness;

use std::path::{Path, PathBuf};

/// A fuzz harness: panics when an input breaks one of its invariants.
type Harness = fn(&[u8]);

/// The fuzz targets and their harnesses; `fuzz/regressions/<target>/` holds each one's inputs.
const TARGETS: [(&str, Harness); 3] = [
    ("sse_stream", harness::sse_stream),
    ("h1_response", h1_harness::h1_response),
    ("error_response", error_harness::error_response),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    out.sort();
    out
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut out = entries(&root().join(dir));
    out.retain(|p| p.is_file() && (ext.is_empty() || p.extension().is_some_and(|x| x == ext)));
    out
}

/// Names of the inputs `harness` panics on.
fn failing(harness: Harness, inputs: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<String> {
    inputs
        .into_iter()
        .filter(|(_, data)| std::panic::catch_unwind(|| harness(data)).is_err())
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn saved_fuzz_inputs_pass_their_target_harness() {
    let dir = root().join("fuzz/regressions");
    // An input outside a target's folder would never be replayed: refuse it.
    let stray: Vec<_> = entries(&dir)
        .into_iter()
        .filter(|p| !p.is_dir() || !TARGETS.iter().any(|(t, _)| p.file_name().is_some_and(|n| n == *t)))
        .collect();
    assert_eq!(stray, Vec::<PathBuf>::new(), "fuzz/regressions/ holds only one folder per fuzz target");
    for (target, harness) in TARGETS {
        let inputs: Vec<_> = files(&format!("fuzz/regressions/{target}"), "")
            .into_iter()
            .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read regression input")))
            .collect();
        assert!(!inputs.is_empty(), "no saved inputs for {target}");
        assert_eq!(failing(harness, inputs), Vec::<String>::new(), "{target}");
    }
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
    assert_eq!(failing(harness::sse_stream, inputs), Vec::<String>::new());
}

/// A fixture's status line and headers with CRLF line ends, without its framing headers.
fn fixture_head(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read fixture headers");
    let mut head = String::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if !name.eq_ignore_ascii_case("transfer-encoding") && !name.eq_ignore_ascii_case("content-length") {
            head.push_str(line);
            head.push_str("\r\n");
        }
    }
    head
}

/// The `.sse` body recorded with a `.headers.txt`: the same name, or the first that starts so.
fn fixture_body(headers: &Path) -> Vec<u8> {
    let base = headers.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".headers.txt"));
    let base = base.expect("a .headers.txt name");
    let streams = files("tests/fixtures", "sse");
    let stem = |p: &&PathBuf| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned);
    let body = (streams.iter().find(|p| stem(p).is_some_and(|s| s == base)))
        .or_else(|| streams.iter().find(|p| stem(p).is_some_and(|s| s.starts_with(base))))
        .unwrap_or_else(|| panic!("no .sse body for {}", headers.display()));
    std::fs::read(body).expect("read fixture body")
}

/// Frames `body` in chunks of at most `size` bytes.
fn chunk(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn fixture_responses_read_their_body_with_every_framing_and_read_pattern() {
    let heads: Vec<_> = files("tests/fixtures", "txt")
        .into_iter()
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(".headers.txt")))
        .collect();
    assert!(heads.len() >= 5, "fixture heads missing: {heads:?}");
    let mut checked = 0;
    for path in &heads {
        let (head, body) = (fixture_head(path), fixture_body(path));
        let framings = [
            (format!("Content-Length: {}\r\n\r\n", body.len()), body.clone()),
            ("Transfer-Encoding: chunked\r\n\r\n".to_string(), chunk(&body, 7)),
            ("Transfer-Encoding: chunked\r\n\r\n".to_string(), chunk(&body, 1000)),
            ("\r\n".to_string(), body.clone()),
        ];
        for (framing, framed) in &framings {
            // Byte by byte (seed 0) and two pseudo-random read patterns.
            for seed in [0, 7, 200] {
                let mut data = vec![seed, 0, 0, 0];
                data.extend_from_slice(head.as_bytes());
                data.extend_from_slice(framing.as_bytes());
                data.extend_from_slice(framed);
                let name = format!("{} {framing:?} seed {seed}", path.display());
                let out = std::panic::catch_unwind(|| h1_harness::check(&data))
                    .unwrap_or_else(|_| panic!("{name}: the harness failed"));
                let want = h1_harness::Outcome { status: Some(200), body: body.clone(), end: Ok(()) };
                assert_eq!(out, want, "{name}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, heads.len() * 4 * 3);
}

#[test]
fn fixture_bodies_pass_the_h1_harness_as_harness_framed_chunked_responses() {
    let mut inputs = Vec::new();
    for path in files("tests/fixtures", "sse").into_iter().chain(files("tests/fixtures", "json")) {
        let body = std::fs::read(&path).expect("read fixture");
        // Flag bit 0: the harness frames the body itself as chunks (seed, style) and checks the
        // body it reads back; styles cover every head and syntax bit.
        for (reads, chunks, style) in [(0, 0, 0), (7, 1, 0xff), (200, 9, 0x35), (1, 250, 0x4a), (99, 3, 0x97)] {
            let mut data = vec![reads, 1, chunks, style];
            data.extend_from_slice(&body);
            inputs.push((format!("{} {reads}/{chunks}/{style:#x}", path.display()), data));
        }
    }
    assert!(inputs.len() >= 100, "fixtures missing");
    assert_eq!(failing(h1_harness::h1_response, inputs), Vec::<String>::new());
}
