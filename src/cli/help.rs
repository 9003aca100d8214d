//! What `--help` and the man pages say beyond the flags: the environment variables, exit status
//! and files of each subcommand, from one table, so `vigil run --help` and vigil-run(1) agree.

use clap::Command;
use clap_mangen::roff::{bold, roman, Roff};

/// One entry of a list section: a name and what it means.
type Entry = (String, String);

/// The variables every command that reads the config honours.
fn config_vars() -> Vec<Entry> {
    let mut vars = vec![
        (
            "VIGIL_<SECTION>_<KEY>".to_string(),
            "overrides the config key of that path (VIGIL_PROBE_INTERVAL=30s sets probe.interval); \
             a _FILE twin (VIGIL_PROBE_INTERVAL_FILE) reads the value from a file"
                .to_string(),
        ),
        (
            "DATABASE_URL, DATABASE_URL_FILE".to_string(),
            "storage.url (sqlite://FILE or postgres://...); VIGIL_STORAGE_URL wins over it".to_string(),
        ),
    ];
    let keys: Vec<String> = crate::config::builtin_key_vars().map(|(name, var)| format!("{var} ({name})")).collect();
    vars.push((
        "provider keys".to_string(),
        format!(
            "each built-in provider is probed when its key is set: {}; a [[provider]] names its own \
             variable in api_key_env; each has a _FILE twin",
            keys.join(", ")
        ),
    ));
    vars
}

/// The variables of logging, which every command honours.
fn log_vars() -> Vec<Entry> {
    vec![
        ("VIGIL_LOG".to_string(), "log filter (default warn,vigil=info), e.g. vigil=debug".to_string()),
        ("VIGIL_LOG_FORMAT".to_string(), "json for one flat JSON object per log line".to_string()),
    ]
}

/// `path` is the subcommand's words after `vigil` (`["alerts", "backtest"]`; empty for vigil itself).
fn environment(path: &[&str]) -> Vec<Entry> {
    let mut vars = match path {
        ["completions"] | ["man"] => Vec::new(),
        _ => config_vars(),
    };
    let demo_url = (
        "DATABASE_URL with --demo".to_string(),
        "not used: --demo keeps its own database unless the file given with --config sets storage.url".to_string(),
    );
    match path {
        [] | ["run"] => {
            vars.push((
                "VIGIL_API_TOKEN".to_string(),
                "bearer token of /v1/* and POST /-/reload (the variable http.api_token_env names)".to_string(),
            ));
            vars.push((
                "VIGIL_HTTP_WEB_CONFIG_FILE".to_string(),
                "the web configuration file (TLS, basic auth) when --web.config.file is not given".to_string(),
            ));
            vars.push(demo_url);
            vars.push((
                "MALLOC_ARENA_MAX".to_string(),
                "glibc malloc arenas (vigil sets 2 unless this is set)".to_string(),
            ));
            vars.push((
                "MALLOC_MMAP_THRESHOLD_".to_string(),
                "glibc's mmap threshold in bytes (vigil pins 262144 unless this is set)".to_string(),
            ));
            vars.push((
                "alert channel variables".to_string(),
                "those the config names in *_env keys (webhook_url_env, routing_key_env, ...)".to_string(),
            ));
        }
        ["check-config"] => vars.push((
            "VIGIL_HTTP_WEB_CONFIG_FILE".to_string(),
            "the web configuration file, checked as run checks it".to_string(),
        )),
        ["thresholds"] => {
            vars.push(("signing key".to_string(), "with --sign, the variable http.signing_key_env names".to_string()));
            vars.push(demo_url);
        }
        ["baselines", "adopt"] => vars.push((
            "VIGIL_API_TOKEN".to_string(),
            "bearer token sent to the daemon (the variable http.api_token_env names)".to_string(),
        )),
        ["baselines"] | ["report"] | ["alerts", "backtest"] => vars.push(demo_url),
        ["alert-test"] => vars.push((
            "alert channel variables".to_string(),
            "those the config names in *_env keys (webhook_url_env, routing_key_env, ...)".to_string(),
        )),
        _ => {}
    }
    vars.extend(log_vars());
    vars
}

fn exit_status(path: &[&str]) -> Vec<Entry> {
    let mut codes = vec![("0".to_string(), "success".to_string())];
    let one = match path {
        ["probe"] => "a target failed its probe (unless --no-fail), or another failure",
        ["alert-test"] => "a channel did not accept the test notification, or another failure",
        ["alerts", "backtest"] => "no samples to replay in the window, or another failure",
        ["drill"] => "storage failed or did not answer within 5 s (the drill was not started or ended)",
        ["run"] => "a failure while running (a task died, the store failed); restart it",
        _ => "a failure (the message says which)",
    };
    codes.push(("1".to_string(), one.to_string()));
    if !matches!(path, ["completions"] | ["man"]) {
        codes.push((
            "2".to_string(),
            match path {
                ["drill"] => "bad usage or configuration: an unknown chain, a target not in it, a duration \
                              outside 1m..24h, no running drill with that id; the message names it"
                    .to_string(),
                _ => "bad usage or configuration: the message names the flag, key or variable at fault \
                      (also: nothing to probe, a malformed storage.url)"
                    .to_string(),
            },
        ));
    } else {
        codes.push(("2".to_string(), "bad usage".to_string()));
    }
    codes
}

fn files(path: &[&str]) -> Vec<Entry> {
    if matches!(path, ["completions"] | ["man"]) {
        return match path {
            ["man"] => vec![("DIR/vigil*.1".to_string(), "the pages --dir writes".to_string())],
            _ => Vec::new(),
        };
    }
    let mut files = vec![(
        "vigil.toml".to_string(),
        "the config read when --config is not given (in the working directory)".to_string(),
    )];
    // Only the commands that open the store touch it and the data directory.
    let stored =
        [&["run"][..], &["thresholds"], &["baselines"], &["report"], &["alerts", "backtest"], &["migrate"], &["drill"]];
    if path.is_empty() || stored.contains(&path) {
        files.push(("vigil.db".to_string(), "the default store (storage.url = sqlite://vigil.db)".to_string()));
        files.push((
            "vigil-data/".to_string(),
            "storage.data_dir: spools, caches of fetched prices and model lists".to_string(),
        ));
    }
    if matches!(path, [] | ["run"] | ["thresholds"] | ["baselines"] | ["report"] | ["alerts", "backtest"]) {
        files.push((
            "vigil-data/vigil-demo.db".to_string(),
            "the demo's own store (--demo), seeded with a simulated week".to_string(),
        ));
    }
    match path {
        [] | ["run"] => files.push((
            "web configuration file".to_string(),
            "--web.config.file or http.web_config_file: TLS and basic auth, in the Prometheus exporter toolkit format"
                .to_string(),
        )),
        ["thresholds"] => files.push((
            "FILE, FILE.sig".to_string(),
            "--out: written atomically with mode 0666 less the umask; --sign puts the signature beside it".to_string(),
        )),
        ["report"] => files
            .push(("FILE".to_string(), "--weekly --out: written atomically with mode 0666 less the umask".to_string())),
        _ => {}
    }
    files
}

/// The text `--help` shows under the options of the command at `path`.
fn after_help(path: &[&str]) -> String {
    let vars = environment(path);
    if vars.is_empty() {
        return String::new();
    }
    let width = vars.iter().map(|(n, _)| n.len()).max().unwrap_or(0).min(32);
    let mut out = String::from("Environment:\n");
    for (name, what) in &vars {
        out.push_str(&format!("  {name:<width$}  {what}\n"));
    }
    let page = match path {
        [] => "vigil".to_string(),
        words => format!("vigil-{}", words.join("-")),
    };
    out.push_str(&format!("\nExit status and files: man {page} (`vigil man --dir DIR` writes the pages)"));
    out
}

/// `cmd` and every subcommand under it with its environment in `--help`.
pub fn decorate(cmd: Command) -> Command {
    decorate_at(cmd, &[])
}

fn decorate_at(mut cmd: Command, path: &[String]) -> Command {
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        let mut sub_path = path.to_vec();
        sub_path.push(name.clone());
        cmd = cmd.mut_subcommand(name, |sub| decorate_at(sub, &sub_path));
    }
    let words: Vec<&str> = path.iter().map(String::as_str).collect();
    let text = after_help(&words);
    if text.is_empty() {
        cmd
    } else {
        cmd.after_help(text)
    }
}

/// Every page: (file name, roff), vigil.1 first, then each subcommand's, depth first.
pub fn pages(cmd: Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn collect(cmd: &Command, path: &mut Vec<String>, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    out.push((man.get_filename(), page(cmd, path)?));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name().to_string());
        collect(sub, path, out)?;
        path.pop();
    }
    Ok(())
}

/// One man page: clap_mangen's sections, then ENVIRONMENT, EXIT STATUS and FILES from the
/// table above (in place of the EXTRA section, which would repeat `--help`'s environment).
fn page(cmd: &Command, path: &[String]) -> std::io::Result<Vec<u8>> {
    let words: Vec<&str> = path.iter().map(String::as_str).collect();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut render = |f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> std::io::Result<()> {
        let mut buf = Vec::new();
        f(&mut buf)?;
        parts.push(buf);
        Ok(())
    };
    render(&|w| man.render_title(w))?;
    render(&|w| man.render_name_section(w))?;
    render(&|w| man.render_synopsis_section(w))?;
    render(&|w| man.render_description_section(w))?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        render(&|w| man.render_options_section(w))?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        render(&|w| man.render_subcommands_section(w))?;
    }
    for (title, entries) in
        [("ENVIRONMENT", environment(&words)), ("EXIT STATUS", exit_status(&words)), ("FILES", files(&words))]
    {
        if entries.is_empty() {
            continue;
        }
        let mut roff = Roff::new();
        roff.control("SH", [title]);
        for (name, what) in entries {
            roff.control("TP", std::iter::empty::<&str>());
            roff.text([bold(name)]);
            roff.text([roman(what)]);
        }
        render(&|w| roff.to_writer(w))?;
    }
    if cmd.get_version().is_some() {
        render(&|w| man.render_version_section(w))?;
    }
    // Each piece starts with roff's apostrophe preamble; the page needs it once.
    let preamble = Roff::new().render().into_bytes();
    let mut out = preamble.clone();
    for part in parts {
        out.extend_from_slice(part.strip_prefix(preamble.as_slice()).unwrap_or(&part));
    }
    Ok(out)
}
