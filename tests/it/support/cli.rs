//! The `vigil` binary run as a user runs it, from a clean environment: no provider key, log
//! setting, database or region inherited from the machine running the tests.

use std::path::Path;
use std::process::{Command, Output};

/// Variables of the built-in providers' keys: any one set would add providers to a run.
pub const KEY_VARS: [&str; 7] = [
    "OPENROUTER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "DEEPINFRA_API_KEY",
    "GEMINI_API_KEY",
];

/// Variables besides the keys that change what a run does or prints.
const SETTING_VARS: [&str; 5] = ["DATABASE_URL", "VIGIL_STORAGE_URL", "VIGIL_REGION", "VIGIL_LOG", "VIGIL_LOG_FORMAT"];

/// The binary in `dir` with nothing from the caller's environment that would change the outcome.
pub fn vigil_in(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vigil"));
    cmd.current_dir(dir);
    for var in KEY_VARS.iter().chain(&SETTING_VARS) {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` to its end off the async runtime (which may be serving the stand-ins it talks to).
pub async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("vigil runs")).await.expect("join")
}
