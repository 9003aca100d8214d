//! Secrets read from files (Kubernetes/Docker secrets, systemd `LoadCredential=`): the file's
//! content with its trailing newline removed. Errors name the path, never the content.

use std::path::Path;

/// Reads the secret in `path`: the whole file, trailing `\n`/`\r\n` removed. An unreadable,
/// non-UTF-8 or empty file is an error saying which and naming the path.
pub fn read(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn the_trailing_newline_goes_and_everything_else_stays() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, body: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, body).expect("write");
            p
        };
        assert_eq!(read(&write("unix", b"sk-test-abc\n")).as_deref(), Ok("sk-test-abc"));
        assert_eq!(read(&write("dos", b"sk-test-abc\r\n")).as_deref(), Ok("sk-test-abc"));
        assert_eq!(read(&write("bare", b"sk-test-abc")).as_deref(), Ok("sk-test-abc"));
        assert_eq!(read(&write("inner", b" a b\tc \n")).as_deref(), Ok(" a b\tc "), "only the line end is trimmed");
        let empty = write("empty", b"\n");
        assert_eq!(read(&empty), Err(format!("{} is empty", empty.display())));
        let binary = write("binary", &[0xff, 0xfe]);
        assert_eq!(read(&binary), Err(format!("{} is not UTF-8 text", binary.display())));
        let missing = dir.path().join("missing");
        let e = read(&missing).expect_err("missing");
        assert!(e.starts_with(&format!("cannot read {}: ", missing.display())), "{e}");
    }
}
