//! Build hygiene, read from Cargo itself: the declared MSRV is the dependency graph's real
//! minimum, none of our direct dependencies is an older copy of a crate the graph also holds,
//! deprecated or unused crates stay out, demo-only crates are optional, and release binaries
//! carry no debug info.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo metadata` of this package (every platform, so the MSRV holds everywhere).
fn metadata() -> Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(repo())
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata JSON")
}

fn manifest() -> toml::Table {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).expect("read Cargo.toml");
    toml::from_str(&text).expect("Cargo.toml parses")
}

/// "1.94" and "1.94.0" alike, as numbers.
fn version(v: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap_or_else(|_| panic!("version {v}"))).collect();
    parts.resize(3, 0);
    parts
}

fn semver(v: &str) -> Vec<u64> {
    version(v.split(['-', '+']).next().unwrap_or(v))
}

/// (name, version) of every package in the resolved graph, by package id.
fn packages(meta: &Value) -> BTreeMap<String, (String, String, Option<String>)> {
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let id = p["id"].as_str().expect("id").to_string();
            let name = p["name"].as_str().expect("name").to_string();
            let ver = p["version"].as_str().expect("version").to_string();
            (id, (name, ver, p["rust_version"].as_str().map(str::to_string)))
        })
        .collect()
}

fn root_id(meta: &Value) -> String {
    meta["resolve"]["root"].as_str().expect("resolve.root").to_string()
}

#[test]
fn declared_rust_version_is_the_highest_any_dependency_needs() {
    let meta = metadata();
    let root = root_id(&meta);
    let pkgs = packages(&meta);
    let ours = pkgs[&root].2.clone().expect("Cargo.toml declares rust-version");
    let (needed, by) = pkgs
        .iter()
        .filter(|(id, _)| **id != root)
        .filter_map(|(_, (name, ver, rv))| rv.as_ref().map(|rv| (version(rv), format!("{name} {ver} ({rv})"))))
        .max()
        .expect("dependencies declare rust-version");
    assert_eq!(version(&ours), needed, "rust-version = {ours:?} but the graph needs {by}");
    let toolchain =
        Command::new("rustc").arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).to_string());
    println!("MSRV {ours} (set by {by}); this toolchain: {}", toolchain.unwrap_or_default().trim());
}

#[test]
fn no_direct_dependency_is_an_older_copy_of_a_crate_in_the_graph() {
    let meta = metadata();
    let root = root_id(&meta);
    let pkgs = packages(&meta);
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve.nodes");
    let mut versions: BTreeMap<&str, BTreeSet<Vec<u64>>> = BTreeMap::new();
    for (name, ver, _) in pkgs.values() {
        versions.entry(name.as_str()).or_default().insert(semver(ver));
    }
    let root_node = nodes.iter().find(|n| n["id"] == root.as_str()).expect("root node");
    let direct: Vec<&str> =
        root_node["deps"].as_array().expect("deps").iter().map(|d| d["pkg"].as_str().expect("pkg")).collect();
    assert!(direct.len() > 20, "read the direct dependencies: {direct:?}");
    let mut stale = vec![];
    for id in direct {
        let (name, ver, _) = &pkgs[id];
        let newest = versions[name.as_str()].iter().max().expect("a version");
        if semver(ver) < *newest {
            stale.push(format!("{name} {ver} (the graph also holds {newest:?})"));
        }
    }
    assert!(stale.is_empty(), "direct dependencies older than another copy in the graph: {stale:?}");
}

#[test]
fn deprecated_and_unused_crates_stay_out() {
    let deps = manifest()["dependencies"].as_table().expect("[dependencies]").clone();
    // serde_yaml is deprecated upstream (serde_norway continues it); tower was only reached
    // for one trait call (hyper-util's TowerToHyperService does it).
    for gone in ["serde_yaml", "tower"] {
        assert!(!deps.contains_key(gone), "{gone} is back in [dependencies]");
    }
    // Every direct dependency is named in the code (a cheap stand-in for cargo-udeps).
    let mut code = String::new();
    for dir in ["src", "tests", "benches"] {
        for entry in walk(&repo().join(dir)) {
            code.push_str(&std::fs::read_to_string(entry).unwrap_or_default());
        }
    }
    for name in deps.keys() {
        let ident = name.replace('-', "_");
        assert!(
            code.contains(&format!("{ident}::"))
                || code.contains(&format!("use {ident}"))
                || code.contains(&format!("{ident}!")),
            "{name} is a dependency that no source file names"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

#[test]
fn demo_only_crates_are_optional_behind_the_default_demo_feature() {
    let m = manifest();
    let features = m["features"].as_table().expect("[features]");
    let default: Vec<&str> =
        features["default"].as_array().expect("default").iter().filter_map(|v| v.as_str()).collect();
    assert!(default.contains(&"demo"), "`demo` is on by default");
    let demo: Vec<&str> = features["demo"].as_array().expect("demo").iter().filter_map(|v| v.as_str()).collect();
    let deps = m["dependencies"].as_table().expect("[dependencies]");
    for krate in ["rcgen", "rand_distr"] {
        assert_eq!(deps[krate]["optional"].as_bool(), Some(true), "{krate} is optional");
        assert!(demo.contains(&format!("dep:{krate}").as_str()), "feature demo enables {krate}");
        // Only src/run/demo/ may name it, or the build without the feature breaks.
        for file in walk(&repo().join("src")) {
            let in_demo = file.components().any(|c| c.as_os_str() == "demo");
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(
                in_demo || !text.contains(&format!("{krate}::")),
                "{} uses {krate} outside src/run/demo/",
                file.display()
            );
        }
    }
}

#[test]
fn release_binaries_carry_no_debug_info_and_are_stripped() {
    let m = manifest();
    let release = m["profile"]["release"].as_table().expect("[profile.release]");
    let debug = release.get("debug");
    let no_debug = match debug {
        None => true,
        Some(toml::Value::Boolean(b)) => !b,
        Some(toml::Value::Integer(n)) => *n == 0,
        Some(toml::Value::String(s)) => s == "none",
        Some(_) => false,
    };
    let split = release.get("split-debuginfo").and_then(|v| v.as_str()).is_some_and(|s| s != "off");
    assert!(no_debug || split, "[profile.release] debug = {debug:?}: no debug info in the shipped binary");
    let strip = release.get("strip");
    assert!(
        matches!(strip, Some(toml::Value::Boolean(true))) || strip.and_then(|s| s.as_str()) == Some("symbols"),
        "[profile.release] strip = {strip:?}"
    );
}

#[test]
fn release_builds_fast_and_the_shipped_dist_profile_keeps_fat_lto() {
    let m = manifest();
    let profiles = m["profile"].as_table().expect("[profile]");
    // `cargo build --release` is the README's source path: no whole-graph LTO, parallel codegen.
    let release = profiles["release"].as_table().expect("[profile.release]");
    let lto = release.get("lto");
    assert!(
        matches!(lto, None | Some(toml::Value::Boolean(false)))
            || lto.and_then(|v| v.as_str()).is_some_and(|s| s == "off" || s == "thin"),
        "[profile.release] lto = {lto:?}: fat LTO belongs to [profile.dist]"
    );
    let units = release.get("codegen-units").and_then(|v| v.as_integer()).unwrap_or(16);
    assert!(units > 1, "[profile.release] codegen-units = {units}: one unit belongs to [profile.dist]");
    // What ships: the release profile with fat LTO and one codegen unit.
    let dist = profiles["dist"].as_table().expect("[profile.dist]");
    assert_eq!(dist.get("inherits").and_then(|v| v.as_str()), Some("release"));
    assert_eq!(dist.get("lto").and_then(|v| v.as_str()), Some("fat"));
    assert_eq!(dist.get("codegen-units").and_then(|v| v.as_integer()), Some(1));
    // Whatever opt-level the release profile gives dependencies, dist builds them at 3
    // (`inherits` carries package overrides over).
    // A level `release` sets is inherited, so dist must set its own; a named package's entry
    // wins over "*", so each one `release` lowers needs its own entry in dist too.
    let level = |p: &toml::Table| p.get("opt-level").and_then(|v| v.as_integer()).unwrap_or(3);
    let own = |p: &toml::Table| p.get("opt-level").and_then(|v| v.as_integer());
    if own(release).is_some_and(|l| l != 3) {
        assert_eq!(own(dist), Some(3), "[profile.dist] opt-level = 3 (release sets {:?})", own(release));
    }
    assert_eq!(level(dist), 3, "[profile.dist] opt-level");
    let packages = |p: &toml::Table| p.get("package").and_then(|p| p.as_table()).cloned().unwrap_or_default();
    let dist_packages = packages(dist);
    for (name, settings) in packages(release) {
        if settings.as_table().is_some_and(|t| level(t) != 3) {
            let in_dist = dist_packages.get(&name).and_then(|p| p.as_table()).map(level);
            assert_eq!(in_dist, Some(3), "[profile.dist.package.{name:?}] opt-level = 3 (release lowers it)");
        }
    }
    let profiling = profiles["profiling"].as_table().expect("[profile.profiling]");
    assert_eq!(profiling.get("inherits").and_then(|v| v.as_str()), Some("dist"), "profile what ships");
}
