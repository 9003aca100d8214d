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

impl From<SpoolError> for super::StoreError {
    fn from(e: SpoolError) -> Self {
        super::StoreError::Other(e.to_string())
    }
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

/// A run of records of the oldest segment, read back for replay a part at a time: a segment
/// is up to 16 MiB of JSON, and read whole it held that and every record parsed from it at once.
#[derive(Debug)]
pub struct SpooledPart<T = Sample> {
    /// Segment number; pass to [`Spool::remove`] once every part is stored.
    pub seq: u64,
    /// The records, in append order.
    pub records: Vec<T>,
    /// Where the next part starts: pass it back as `from` with `seq`.
    pub next: u64,
    /// True when the segment holds nothing after these records.
    pub last: bool,
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
        // Numbers of skipped entries are never reused either: a new segment must not collide.
        let next_seq = found.last().map_or(1, |(seq, _)| seq + 1);
        let mut segments = VecDeque::new();
        for (seq, path) in found {
            // A bad entry (a directory or FIFO named like a segment, a file that cannot be read)
            // is left where it is, with a warning: it must not cost the daemon its start.
            match read_part::<T>(&path, 0, usize::MAX) {
                Ok((records, bytes, _)) => {
                    segments.push_back(Segment { seq, path, bytes, samples: records.len() as u64 })
                }
                Err(why) => {
                    tracing::warn!(file = %path.display(), error = %why, "skipping a spool entry that is not a readable segment")
                }
            }
        }
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
        if let Err(e) = file.write_all(&buf).and_then(|()| file.sync_data()) {
            // A full disk can take part of the batch: cut the torn tail off, or the next batch's
            // first record would be glued to it and both lines lost. Where even that fails, the
            // next batch starts a segment of its own (the tail is then one skipped line).
            if file.set_len(seg.bytes).is_err() {
                self.current = None;
            }
            return Err(io_err(&seg.path)(e));
        }
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

    /// Up to `max` records of the oldest segment, from the place `from` (a segment number and
    /// the [`SpooledPart::next`] of its previous part) when that segment is still the oldest,
    /// else from its start; a torn or corrupt line is skipped with a warning. A segment that can
    /// no longer be read is left on disk, dropped from the queue with a warning and the next one
    /// is read: one bad file must not hold every later record back for good.
    pub fn oldest_part(&mut self, from: Option<(u64, u64)>, max: usize) -> Result<Option<SpooledPart<T>>, SpoolError> {
        while let Some(seg) = self.segments.front() {
            let offset = from.filter(|(seq, _)| *seq == seg.seq).map_or(0, |(_, offset)| offset);
            match read_part(&seg.path, offset, max.max(1)) {
                Ok((records, next, last)) => return Ok(Some(SpooledPart { seq: seg.seq, records, next, last })),
                Err(why) => {
                    tracing::warn!(file = %seg.path.display(), error = %why, records = seg.samples,
                        "skipping a spool segment that can no longer be read; left on disk");
                    if self.segments.len() == 1 {
                        self.current = None;
                    }
                    self.segments.pop_front();
                }
            }
        }
        Ok(None)
    }

    /// Every record still spooled, oldest first, without taking any out (a segment that can no
    /// longer be read is skipped with a warning; replay reports it too).
    pub fn peek_all(&self) -> Vec<T> {
        let mut out = Vec::new();
        for seg in &self.segments {
            match read_part(&seg.path, 0, usize::MAX) {
                Ok((records, _, _)) => out.extend(records),
                Err(why) => tracing::warn!(file = %seg.path.display(), error = %why, "spool segment not readable"),
            }
        }
        out
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

/// A replay of the oldest segment, read back a part at a time: [`Replay::next`] gives its
/// records in order, up to `part` at a time, and deletes the segment once every part has been
/// taken and the next is asked for. A caller that fails to store a part stops asking: the
/// segment stays whole and the next replay starts it again from its first record, as storage
/// takes a record it already holds without a second copy.
pub struct Replay<T> {
    spool: std::sync::Arc<std::sync::Mutex<SpoolOf<T>>>,
    part: usize,
    /// Where the next part starts.
    from: Option<(u64, u64)>,
    /// The segment whose last part was given: deleted at the next ask.
    read_whole: Option<u64>,
    fed: u64,
    spooled: u64,
    /// Set once the segment is deleted (`Some`) or nothing was spooled (`None`).
    ended: Option<Option<u64>>,
}

impl<T: Serialize + DeserializeOwned + Send + 'static> Replay<T> {
    /// A replay of `spool`'s oldest segment, `part` records at a time.
    pub fn oldest(spool: &std::sync::Arc<std::sync::Mutex<SpoolOf<T>>>, part: usize) -> Self {
        Replay {
            spool: std::sync::Arc::clone(spool),
            part,
            from: None,
            read_whole: None,
            fed: 0,
            spooled: 0,
            ended: None,
        }
    }

    /// The segment's next records, or `None` once it is deleted (or nothing was spooled).
    pub async fn next(&mut self) -> Result<Option<Vec<T>>, SpoolError> {
        if self.ended.is_some() {
            return Ok(None);
        }
        if let Some(seq) = self.read_whole.take() {
            self.spooled = off_thread(&self.spool, move |s| s.remove(seq).map(|()| s.len())).await?;
            self.ended = Some(Some(self.fed));
            return Ok(None);
        }
        let (from, part) = (self.from, self.part);
        let (got, spooled) = off_thread(&self.spool, move |s| s.oldest_part(from, part).map(|p| (p, s.len()))).await?;
        self.spooled = spooled;
        let Some(SpooledPart { seq, records, next, last }) = got else {
            self.ended = Some(None);
            return Ok(None);
        };
        self.fed += records.len() as u64;
        match last {
            true => self.read_whole = Some(seq),
            false => self.from = Some((seq, next)),
        }
        Ok(Some(records))
    }

    /// Records still spooled, as last seen (a segment that could no longer be read, skipped,
    /// no longer counts; after the delete, without the segment replayed).
    pub fn spooled(&self) -> u64 {
        self.spooled
    }

    /// How many records the deleted segment held, once [`Replay::next`] has deleted it; `None`
    /// before, or when nothing was spooled.
    pub fn replayed(&self) -> Option<u64> {
        self.ended.flatten()
    }
}

/// Checked before opening a segment, since opening a FIFO blocks and reading a directory fails.
fn check_regular(path: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    match meta.file_type().is_file() {
        true => Ok(()),
        false => Err("not a regular file".into()),
    }
}

/// Up to `max` records of the segment at `path` from byte `offset` on, the offset after the
/// last line read, and whether the file ends there.
fn read_part<T: DeserializeOwned>(path: &Path, offset: u64, max: usize) -> Result<(Vec<T>, u64, bool), String> {
    use std::io::{BufRead, Seek, SeekFrom};
    check_regular(path)?;
    let mut file = File::open(path).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let mut reader = io::BufReader::with_capacity(64 * 1024, file);
    let mut records = Vec::new();
    let mut line = Vec::new();
    let mut at = offset;
    while records.len() < max {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok((records, at, true));
        }
        at += n as u64;
        let complete = line.last() == Some(&b'\n');
        records.extend(parse_line(&line, complete, path));
    }
    let last = reader.fill_buf().map_err(|e| e.to_string())?.is_empty();
    Ok((records, at, last))
}

/// One JSON line's record, or none for a blank, torn (`complete` false: no newline after it) or
/// corrupt line, the last two with a warning.
fn parse_line<T: DeserializeOwned>(line: &[u8], complete: bool, path: &Path) -> Option<T> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    match serde_json::from_slice::<T>(line) {
        Ok(s) => Some(s),
        Err(e) if !complete => {
            tracing::warn!(file = %path.display(), error = %e, "skipping torn last spool line (crash mid-write)");
            None
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "skipping corrupt spool line");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::target::Target;
    use chrono::Utc;

    fn sample(i: u32) -> Sample {
        let t = Target::new("p".into(), "m".into(), None, "r".into());
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
        while let Some(b) = spool.oldest_part(None, usize::MAX).expect("read") {
            back.extend(b.records);
            spool.remove(b.seq).expect("remove");
        }
        assert_eq!(back, batch);
        assert!(spool.is_empty());
    }

    #[test]
    fn a_segment_reads_back_a_part_at_a_time_in_order_with_a_torn_tail_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let batch: Vec<Sample> = (0..10).map(sample).collect();
        let mut spool = Spool::open(dir.path(), 1 << 20).expect("open");
        spool.append(&batch[..6]).expect("append");
        spool.append(&batch[6..]).expect("append");
        // A crash mid-write: half a line, no newline after it.
        let path = dir.path().join(format!("{PREFIX}{:020}{SUFFIX}", 1));
        let mut file = OpenOptions::new().append(true).open(&path).expect("segment");
        file.write_all(br#"{"id":"0191"#).expect("torn tail");
        let (mut back, mut parts, mut from) = (Vec::new(), Vec::new(), None);
        loop {
            let part = spool.oldest_part(from, 4).expect("read").expect("a segment");
            assert_eq!(part.seq, 1, "one segment holds every record");
            parts.push(part.records.len());
            back.extend(part.records);
            if part.last {
                break;
            }
            from = Some((part.seq, part.next));
        }
        assert_eq!(parts, [4, 4, 2], "never more than asked for at once; the torn tail is no record");
        assert_eq!(back, batch);
        // A place in a segment that is no longer the oldest is not applied to the next one.
        let fresh = spool.oldest_part(Some((99, 1_000_000)), 3).expect("read").expect("segment");
        assert_eq!(fresh.records, batch[..3].to_vec(), "a stale place starts the oldest segment from its top");
        let whole = spool.oldest_part(None, usize::MAX).expect("read").expect("segment");
        assert_eq!((whole.records, whole.last), (batch, true), "read whole, the same records");
    }

    #[tokio::test]
    async fn a_replay_gives_a_part_at_a_time_and_a_replay_stopped_midway_leaves_the_segment_whole() {
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().expect("tempdir");
        let batch: Vec<Sample> = (0..10).map(sample).collect();
        let mut spool = Spool::open(dir.path(), 1 << 20).expect("open").with_segment_bytes(1);
        spool.append(&batch[..7]).expect("append");
        spool.append(&batch[7..]).expect("append");
        let spool = Arc::new(Mutex::new(spool));

        // A caller whose write of the second part fails stops there: nothing is deleted.
        let mut stopped = Replay::oldest(&spool, 3);
        let first = stopped.next().await.expect("read").expect("a part");
        let second = stopped.next().await.expect("read").expect("a part");
        assert_eq!((first.len(), second.len(), stopped.spooled()), (3, 3, 10));
        assert_eq!(stopped.replayed(), None);
        drop(stopped);
        assert_eq!(spool.lock().expect("lock").len(), 10, "the segment stays whole");

        // The next replay starts it again from its first record.
        let mut replay = Replay::oldest(&spool, 3);
        let mut parts = Vec::new();
        while let Some(records) = replay.next().await.expect("read") {
            parts.push(records);
        }
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
        assert_eq!(parts.concat(), batch[..7].to_vec());
        assert_eq!((replay.replayed(), replay.spooled()), (Some(7), 3), "deleted; what is left");

        let mut replay = Replay::oldest(&spool, 3);
        assert_eq!(replay.next().await.expect("read"), Some(batch[7..].to_vec()));
        assert_eq!(replay.next().await.expect("delete"), None);
        assert_eq!((replay.replayed(), replay.spooled()), (Some(3), 0));
        let mut replay = Replay::oldest(&spool, 3);
        assert_eq!(replay.next().await.expect("read"), None);
        assert_eq!(replay.replayed(), None, "nothing was spooled");
    }

    #[test]
    fn bad_entries_named_like_segments_are_skipped_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = |seq: u64| dir.path().join(format!("{PREFIX}{seq:020}{SUFFIX}"));
        let batch: Vec<Sample> = (0..4).map(sample).collect();
        {
            let mut spool = Spool::open(dir.path(), 1 << 20).expect("open").with_segment_bytes(1);
            spool.append(&batch[..2]).expect("append");
            spool.append(&batch[2..]).expect("append");
        }
        // seq 1 and 2 hold two samples each; then a directory, a FIFO and binary junk named like segments.
        fs::create_dir(name(3)).expect("dir");
        let fifo = std::ffi::CString::new(name(4).display().to_string()).expect("path");
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "mkfifo");
        fs::write(name(5), [0xff, 0x00, 0xfe, b'\n', 0x01]).expect("junk");
        let mut spool = Spool::open(dir.path(), 1 << 20).expect("bad entries do not stop the open");
        assert_eq!(spool.len(), 4, "the two good segments are indexed; the junk one holds nothing readable");
        // A segment that turns unreadable after the open is skipped at replay, not retried forever.
        fs::remove_file(name(2)).expect("remove");
        fs::create_dir(name(2)).expect("dir in its place");
        let mut back = Vec::new();
        while let Some(b) = spool.oldest_part(None, usize::MAX).expect("read") {
            back.extend(b.records);
            spool.remove(b.seq).expect("remove");
        }
        assert_eq!(back, batch[..2].to_vec());
        assert!(spool.is_empty());
        spool.append(&batch[..1]).expect("a new segment after the skipped ones");
        assert!(name(6).is_file(), "numbered past every entry found, never colliding");
        assert!(name(3).is_dir() && name(2).is_dir(), "bad entries are left for the operator");
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
        let first = spool.oldest_part(None, usize::MAX).expect("read").expect("something left");
        assert_eq!(first.records[0].output_tokens, Some(u32::try_from(dropped).expect("small")));
    }
}
