//! Secrets read from files (Kubernetes/Docker secrets, systemd `LoadCredential=`): the file's
//! content with its trailing newline removed. Only a regular file of at most [`MAX_BYTES`]
//! without control characters is a secret: a FIFO, a device or a directory is refused before
//! it is read (never a hang, never an endless read). Errors name the path, never the content.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;

/// Largest secret file read (64 KB): far above any key, URL or certificate seed.
pub const MAX_BYTES: u64 = 64 * 1024;

/// Reads the secret in `path`: the whole file, trailing `\n`/`\r\n` removed. A missing,
/// unreadable, non-regular, oversized, non-UTF-8 or empty file, or one holding a control
/// character (a line feed inside, NUL, ESC, tab), is an error saying which and naming the path.
pub fn read(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let text = read_document(path)?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("{shown} is empty"));
    }
    if let Some(c) = secret.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{shown} holds a control character ({}) before its last line end: one secret, one line",
            control_name(c)
        ));
    }
    Ok(secret.to_owned())
}

/// Reads a secret document of several lines (a service-account JSON key) with the same
/// safety as [`read`]: a regular file of at most [`MAX_BYTES`], UTF-8, not empty. Line ends
/// stay; errors name the path, never the content.
pub fn read_document(path: &Path) -> Result<String, String> {
    let shown = path.display();
    // Follows symlinks (Kubernetes mounts secrets as links into `..data/`) and never opens:
    // opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    regular_and_small(&meta, path)?;
    let file = open_nonblocking(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    // The path may have been swapped between the look and the open: look at what was opened.
    let meta = file.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
    regular_and_small(&meta, path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the bound tells a file that grew since the look from one that fits.
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(too_large(path));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(format!("{shown} is empty"));
    }
    Ok(text)
}

/// A regular file within [`MAX_BYTES`], or why not.
fn regular_and_small(meta: &Metadata, path: &Path) -> Result<(), String> {
    if let Some(what) = not_regular(&meta.file_type()) {
        return Err(format!("{} is {what}; a secret must be a regular file", path.display()));
    }
    if meta.len() > MAX_BYTES {
        return Err(too_large(path));
    }
    Ok(())
}

fn too_large(path: &Path) -> String {
    format!("{} is larger than {} KB; a secret file holds one key, URL or token", path.display(), MAX_BYTES / 1024)
}

/// What a path that is not a regular file is, for the error.
fn not_regular(t: &std::fs::FileType) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    if t.is_dir() {
        Some("a directory")
    } else if t.is_file() {
        None
    } else {
        Some("not a regular file")
    }
}

/// Opens for reading without waiting for a writer, should the path have become a FIFO.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// How an error names a control character without echoing the secret around it.
fn control_name(c: char) -> String {
    match c {
        '\n' => "line feed".into(),
        '\r' => "carriage return".into(),
        '\t' => "tab".into(),
        '\0' => "NUL".into(),
        c => format!("U+{:04X}", u32::from(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::{read, MAX_BYTES};

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
        assert_eq!(read(&write("inner", b" a b c \n")).as_deref(), Ok(" a b c "), "only the line end is trimmed");
        let empty = write("empty", b"\n");
        assert_eq!(read(&empty), Err(format!("{} is empty", empty.display())));
        let binary = write("binary", &[0xff, 0xfe]);
        assert_eq!(read(&binary), Err(format!("{} is not UTF-8 text", binary.display())));
        let missing = dir.path().join("missing");
        let e = read(&missing).expect_err("missing");
        assert!(e.starts_with(&format!("cannot read {}: ", missing.display())), "{e}");
    }

    #[test]
    fn control_characters_oversized_files_and_non_files_are_refused_without_the_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, body: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, body).expect("write");
            p
        };
        for (name, body, what) in [
            ("lf", &b"sk-test-first\nsk-test-second\n"[..], "line feed"),
            ("nul", b"sk-test-a\0b", "NUL"),
            ("tab", b"sk-test\tx", "tab"),
            ("esc", b"sk-test\x1b[31m", "U+001B"),
        ] {
            let e = read(&write(name, body)).expect_err(name);
            assert!(e.contains(what) && e.contains("control character"), "{name}: {e}");
            assert!(!e.contains("sk-test"), "{name}: the content is never echoed: {e}");
        }
        let fits = write("fits", &vec![b'k'; usize::try_from(MAX_BYTES).expect("small")]);
        assert_eq!(read(&fits).map(|s| s.len() as u64), Ok(MAX_BYTES));
        let big = write("big", &vec![b'k'; usize::try_from(MAX_BYTES + 1).expect("small")]);
        let e = read(&big).expect_err("over the bound");
        assert!(e.contains("larger than 64 KB"), "{e}");
        let e = read(dir.path()).expect_err("a directory");
        assert!(e.contains("is a directory"), "{e}");
    }
}
