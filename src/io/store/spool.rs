//! On-disk spool: records that could not be stored wait here, in order, until the database is back.
//!
//! The spool is a directory of append-only segment files (`segment-<seq>.jsonl`), one JSON
//! record per line: samples (the writer's spool) or the decision stages' records (transitions,
//! outbox items, states; see [`super::link`]), each kind in its own directory. Every append is fsync'd before it returns, so a killed process loses
//! nothing it spooled. A process never appends to a segment it did not create, so a line torn
//! by a crash is always the last line of its file; replay skips it with a warning. The total
//! size is bounded: when full, the oldest segment is dropped and the loss is logged as an error.

use crate::vocab::sample::Sample;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use thiserror::Error;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".jsonl";

/// Spool failures (the disk, not the data).
#[derive(Debug, Error)]
pub enum SpoolError {
    /// Reading or writing a spool file failed.
    #[error("spool {path}: {source}")]
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// A sample could not be encoded.
    #[error("spool encode: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.to_owned(), source }
}

#[derive(Debug)]
struct Segment {
    seq: u64,
    path: PathBuf,
    bytes: u64,
    samples: u64,
}

/// The oldest spooled segment, read back for replay.
#[derive(Debug)]
pub struct SpooledBatch<T = Sample> {
    /// Segment number; pass to [`Spool::remove`] once stored.
    pub seq: u64,
    /// Its records, in append order.
    pub records: Vec<T>,
}

/// A bounded, fsync'd, append-only spool of records of type `T` in one directory.
#[derive(Debug)]
pub struct SpoolOf<T> {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    segments: VecDeque<Segment>,
    /// Open handle of the newest segment, if this process created it.
    current: Option<File>,
    next_seq: u64,
    kind: PhantomData<fn() -> T>,
}

/// The writer's spool of samples.
pub type Spool = SpoolOf<Sample>;

impl<T: Serialize + DeserializeOwned> SpoolOf<T> {
    /// Opens (creating) the spool directory and indexes what a previous run left behind.
    pub fn open(dir: impl AsRef<Path>, max_bytes: u64) -> Result<Self, SpoolError> {
        let dir = dir.as_ref().to_owned();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name();
            let Some(seq) = name
                .to_str()
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            found.push((seq, entry.path()));
        }
        found.sort();
        let mut segments = VecDeque::new();
        for (seq, path) in found {
            let data = fs::read(&path).map_err(io_err(&path))?;
            let samples = parse_lines::<T>(&data, &path).len() as u64;
            segments.push_back(Segment { seq, path, bytes: data.len() as u64, samples });
        }
        let next_seq = segments.back().map_or(1, |s| s.seq + 1);
        let spool = SpoolOf {
            dir,
            max_bytes,
            segment_bytes: (max_bytes / 16).clamp(4 * 1024, 16 * 1024 * 1024),
            segments,
            current: None,
            next_seq,
            kind: PhantomData,
        };
        if !spool.is_empty() {
            tracing::warn!(records = spool.len(), dir = %spool.dir.display(), "spool holds records from a previous run");
        }
        Ok(spool)
    }

    /// Sets the size at which a new segment is started (tests use small ones).
    pub fn with_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// Records waiting.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.samples).sum()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends records behind everything already spooled and fsyncs them. Returns records dropped
    /// from the oldest segments to stay within the size bound (normally 0).
    pub fn append(&mut self, batch: &[T]) -> Result<u64, SpoolError> {
        if batch.is_empty() {
            return Ok(0);
        }
        let mut buf = Vec::with_capacity(batch.len() * 512);
        for s in batch {
            serde_json::to_writer(&mut buf, s)?;
            buf.push(b'\n');
        }
        let full = self.segments.back().is_none_or(|s| s.bytes >= self.segment_bytes);
        if self.current.is_none() || full {
            self.start_segment()?;
        }
        let (Some(file), Some(seg)) = (self.current.as_mut(), self.segments.back_mut()) else {
            return Err(SpoolError::Io { path: self.dir.clone(), source: io::Error::other("no open segment") });
        };
        file.write_all(&buf).map_err(io_err(&seg.path))?;
        file.sync_data().map_err(io_err(&seg.path))?;
        seg.bytes += buf.len() as u64;
        seg.samples += batch.len() as u64;
        self.enforce_bound()
    }

    fn start_segment(&mut self) -> Result<(), SpoolError> {
        let seq = self.next_seq;
        let path = self.dir.join(format!("{PREFIX}{seq:020}{SUFFIX}"));
        let file = OpenOptions::new().create_new(true).append(true).open(&path).map_err(io_err(&path))?;
        // Make the new file's directory entry durable too.
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        self.next_seq += 1;
        self.segments.push_back(Segment { seq, path, bytes: 0, samples: 0 });
        self.current = Some(file);
        Ok(())
    }

    fn enforce_bound(&mut self) -> Result<u64, SpoolError> {
        let mut dropped = 0;
        while self.bytes() > self.max_bytes && self.segments.len() > 1 {
            if let Some(old) = self.segments.pop_front() {
                fs::remove_file(&old.path).map_err(io_err(&old.path))?;
                dropped += old.samples;
            }
        }
        if dropped > 0 {
            tracing::error!(
                dropped,
                max_bytes = self.max_bytes,
                "spool full: dropped the oldest spooled records; they are lost"
            );
        }
        Ok(dropped)
    }

    /// Reads the oldest segment back, skipping a torn or corrupt line with a warning.
    pub fn oldest(&self) -> Result<Option<SpooledBatch<T>>, SpoolError> {
        let Some(seg) = self.segments.front() else { return Ok(None) };
        let data = fs::read(&seg.path).map_err(io_err(&seg.path))?;
        Ok(Some(SpooledBatch { seq: seg.seq, records: parse_lines(&data, &seg.path) }))
    }

    /// Deletes a replayed segment.
    pub fn remove(&mut self, seq: u64) -> Result<(), SpoolError> {
        let Some(pos) = self.segments.iter().position(|s| s.seq == seq) else { return Ok(()) };
        if pos + 1 == self.segments.len() {
            self.current = None;
        }
        if let Some(seg) = self.segments.remove(pos) {
            fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
        }
        Ok(())
    }
}

/// Runs blocking spool I/O (appends fsync) on tokio's blocking pool, off the async workers.
pub async fn off_thread<T, R>(
    spool: &std::sync::Arc<std::sync::Mutex<SpoolOf<T>>>,
    f: impl FnOnce(&mut SpoolOf<T>) -> Result<R, SpoolError> + Send + 'static,
) -> Result<R, SpoolError>
where
    T: Send + 'static,
    R: Send + 'static,
{
    let spool = std::sync::Arc::clone(spool);
    let joined = tokio::task::spawn_blocking(move || match spool.lock() {
        Ok(mut s) => f(&mut s),
        Err(_) => Err(SpoolError::Io { path: Default::default(), source: io::Error::other("spool lock poisoned") }),
    })
    .await;
    joined.unwrap_or_else(|e| Err(SpoolError::Io { path: Default::default(), source: io::Error::other(e) }))
}

/// Parses JSON lines; a bad line is skipped (a torn last line is the expected crash case).
fn parse_lines<T: DeserializeOwned>(data: &[u8], path: &Path) -> Vec<T> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (line, complete) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                (line, true)
            }
            None => {
                let line = rest;
                rest = &[];
                (line, false)
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(s) => out.push(s),
            Err(e) if !complete => {
                tracing::warn!(file = %path.display(), error = %e, "skipping torn last spool line (crash mid-write)")
            }
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "skipping corrupt spool line"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::target::Target;
    use chrono::Utc;

    fn sample(i: u32) -> Sample {
        let t = Target { provider: "p".into(), model: "m".into(), route: None, region: "r".into() };
        let mut s = Sample::new(t, Utc::now(), Utc::now());
        s.output_tokens = Some(i);
        s
    }

    #[test]
    fn appended_samples_come_back_in_order_after_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let batch: Vec<Sample> = (0..10).map(sample).collect();
        {
            let mut spool = Spool::open(dir.path(), 1 << 20).expect("open").with_segment_bytes(1_000);
            spool.append(&batch[..4]).expect("append");
            spool.append(&batch[4..]).expect("append");
            assert_eq!(spool.len(), 10);
        }
        let mut spool = Spool::open(dir.path(), 1 << 20).expect("reopen");
        assert_eq!(spool.len(), 10);
        let mut back = Vec::new();
        while let Some(b) = spool.oldest().expect("read") {
            back.extend(b.records);
            spool.remove(b.seq).expect("remove");
        }
        assert_eq!(back, batch);
        assert!(spool.is_empty());
    }

    #[test]
    fn a_full_spool_drops_the_oldest_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spool = Spool::open(dir.path(), 3_000).expect("open").with_segment_bytes(1);
        let mut dropped = 0;
        for i in 0..20 {
            dropped += spool.append(&[sample(i)]).expect("append");
        }
        assert!(spool.bytes() <= 3_000, "spool holds {} bytes", spool.bytes());
        assert_eq!(dropped + spool.len(), 20);
        let first = spool.oldest().expect("read").expect("something left");
        assert_eq!(first.records[0].output_tokens, Some(u32::try_from(dropped).expect("small")));
    }
}
