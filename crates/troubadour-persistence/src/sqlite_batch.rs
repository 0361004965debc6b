//! One row per group commit: the events a batch appended, in the SQLite
//! journal's recent part (see `sqlite::Folding`).
//!
//! A row holds two blobs:
//! - the **directory**: a format version, the number of runs, a table of
//!   where each run's entry starts (4 bytes each, little-endian), and the
//!   entries (postcard): one per run of events of one id, with its id,
//!   first sequence number, count, epoch, and where its events lie in the
//!   second blob; sorted by id and then by first sequence number, so a
//!   reader finds an id's runs by binary search, decoding a dozen entries
//!   of a thousand, without reading the events of the others;
//! - the **events** (postcard): each event's type name, schema version,
//!   codec and payload, one after the other, in the directory's order (so
//!   the runs of a range of ids are one range of bytes).
//!
//! Nothing read back is trusted: a blob that does not parse, a directory
//! out of order, a run that points outside the events or holds another
//! number of events than it says is a [`BatchError`], never a panic; no
//! length read is allocated before it has been checked against what is
//! left of the input.

use crate::event::StoredEvent;
use crate::store::{Append, EventRecord};
use serde::{Deserialize, Serialize};

/// The directory's format version.
const FORMAT: u8 = 1;

/// Why a row does not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchError(pub(crate) String);

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One id's run of consecutive events in a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Run<'a> {
    #[serde(borrow)]
    pub(crate) persistence_id: &'a str,
    pub(crate) first: u64,
    pub(crate) count: u32,
    pub(crate) epoch: u64,
    /// Where the run's events start in the events blob, and how many
    /// bytes they take.
    pub(crate) offset: u32,
    pub(crate) len: u32,
}

impl Run<'_> {
    /// The run's last sequence number.
    pub(crate) fn last(&self) -> u64 {
        self.first + u64::from(self.count) - 1
    }
}

#[derive(Serialize, Deserialize)]
struct EventOnWire<'a> {
    type_name: &'a str,
    version: u32,
    codec: &'a str,
    #[serde(with = "serde_bytes")]
    payload: &'a [u8],
}

/// The rows of one group commit, as its appends arrive.
#[derive(Default)]
pub(crate) struct BatchRow {
    runs: Vec<OwnedRun>,
    events: Vec<u8>,
}

struct OwnedRun {
    persistence_id: String,
    first: u64,
    count: u32,
    epoch: u64,
    offset: u32,
    len: u32,
}

impl BatchRow {
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Events in the row.
    #[cfg(test)]
    pub(crate) fn events(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.count)).sum()
    }

    /// Adds an append the journal's rules accepted. An append that follows
    /// the same id's previous one in this row, with the same epoch, extends
    /// its run. An error spoils the row: the caller gives up the whole
    /// group commit, as for any error that is not a refusal.
    pub(crate) fn push(&mut self, append: &Append) -> Result<(), BatchError> {
        if append.events.is_empty() {
            return Ok(());
        }
        let offset = self.events.len();
        for e in &append.events {
            let wire = EventOnWire {
                type_name: &e.type_name,
                version: e.version,
                codec: &e.codec,
                payload: &e.payload,
            };
            self.events = postcard::to_extend(&wire, std::mem::take(&mut self.events))
                .map_err(|e| BatchError(format!("an event does not encode: {e}")))?;
        }
        let too_big = || BatchError("a group commit's events pass 4 GiB".to_string());
        let len = u32::try_from(self.events.len() - offset).map_err(|_| too_big())?;
        let offset = u32::try_from(offset).map_err(|_| too_big())?;
        let count = u32::try_from(append.events.len()).map_err(|_| too_big())?;
        if let Some(last) = self.runs.last_mut() {
            if last.persistence_id == append.persistence_id
                && last.epoch == append.epoch
                && last.first + u64::from(last.count) == append.first_sequence
                && last.offset + last.len == offset
            {
                last.count = last.count.checked_add(count).ok_or_else(too_big)?;
                last.len += len;
                return Ok(());
            }
        }
        self.runs.push(OwnedRun {
            persistence_id: append.persistence_id.clone(),
            first: append.first_sequence,
            count,
            epoch: append.epoch,
            offset,
            len,
        });
        Ok(())
    }

    /// The row's directory and events blobs; the row is empty again.
    pub(crate) fn take(&mut self) -> (Vec<u8>, Vec<u8>) {
        let mut runs: Vec<Run<'_>> = self
            .runs
            .iter()
            .map(|r| Run {
                persistence_id: &r.persistence_id,
                first: r.first,
                count: r.count,
                epoch: r.epoch,
                offset: r.offset,
                len: r.len,
            })
            .collect();
        runs.sort_by(|a, b| (a.persistence_id, a.first).cmp(&(b.persistence_id, b.first)));
        // The events in the directory's order too, so that the runs of a
        // range of ids are one range of bytes: a move reads only those.
        let mut events = Vec::with_capacity(self.events.len());
        for run in &mut runs {
            let from = run.offset as usize;
            run.offset = events.len() as u32;
            events.extend_from_slice(&self.events[from..from + run.len as usize]);
        }
        let directory = encode_directory(&runs);
        self.runs.clear();
        self.events.clear();
        (directory, events)
    }
}

/// Bytes before the offset table: the format and the number of runs.
const HEADER: usize = 1 + 4;

fn encode_directory(runs: &[Run<'_>]) -> Vec<u8> {
    let table = HEADER + 4 * runs.len();
    let mut out = vec![0u8; table];
    out[0] = FORMAT;
    out[1..HEADER].copy_from_slice(&(runs.len() as u32).to_le_bytes());
    for (i, run) in runs.iter().enumerate() {
        let at = (out.len() - table) as u32;
        out[HEADER + 4 * i..HEADER + 4 * i + 4].copy_from_slice(&at.to_le_bytes());
        out = postcard::to_extend(run, out).expect("a run of a string and integers always encodes");
    }
    out
}

/// A row's directory, read in place: entries are decoded as a search
/// reaches them.
pub(crate) struct Directory<'a> {
    table: &'a [u8],
    entries: &'a [u8],
    events_len: usize,
}

impl<'a> Directory<'a> {
    /// Reads a directory's header and offset table, for a row whose
    /// events blob is `events_len` bytes long. Each entry is checked when
    /// it is read ([`Directory::run`]); [`Directory::runs`] reads and
    /// checks them all, order included.
    pub(crate) fn parse(bytes: &'a [u8], events_len: usize) -> Result<Directory<'a>, BatchError> {
        let Some((&format, rest)) = bytes.split_first() else {
            return Err(BatchError("the directory is empty".to_string()));
        };
        if format != FORMAT {
            return Err(BatchError(format!(
                "the directory is in format {format}, this version reads {FORMAT}"
            )));
        }
        let count = rest
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or_else(|| BatchError("the directory ends in its header".to_string()))?;
        let table_len = count
            .checked_mul(4)
            .filter(|&n| n <= rest.len() - 4)
            .ok_or_else(|| {
                BatchError(format!(
                    "the directory claims {count} runs, more than its {} bytes hold",
                    bytes.len()
                ))
            })?;
        let (table, entries) = rest[4..].split_at(table_len);
        Ok(Directory {
            table,
            entries,
            events_len,
        })
    }

    /// Runs in the directory.
    pub(crate) fn len(&self) -> usize {
        self.table.len() / 4
    }

    /// Run `i`, checked: it decodes, numbers at least one event from 1 up
    /// without overflow, and lies inside the events blob.
    pub(crate) fn run(&self, i: usize) -> Result<Run<'a>, BatchError> {
        let at = u32::from_le_bytes(self.table[4 * i..4 * i + 4].try_into().unwrap()) as usize;
        let bytes = self.entries.get(at..).ok_or_else(|| {
            BatchError(format!("run {i}'s entry starts past the directory's end"))
        })?;
        let (run, _): (Run<'a>, _) = postcard::take_from_bytes(bytes)
            .map_err(|e| BatchError(format!("run {i}'s entry does not parse: {e}")))?;
        if run.count == 0 || run.first == 0 || run.first.checked_add(u64::from(run.count)).is_none()
        {
            return Err(BatchError(format!(
                "a run of {:?} numbers {} events from {}",
                run.persistence_id, run.count, run.first
            )));
        }
        let end = u64::from(run.offset) + u64::from(run.len);
        if end > self.events_len as u64 {
            return Err(BatchError(format!(
                "the run of {:?} from {} ends at byte {end} of {}",
                run.persistence_id, run.first, self.events_len
            )));
        }
        Ok(run)
    }

    /// The id's runs, in sequence order, found by binary search.
    #[cfg(test)]
    pub(crate) fn runs_of(&self, persistence_id: &str) -> Result<Vec<Run<'a>>, BatchError> {
        // The first run whose id is not below the one sought.
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.run(mid)?.persistence_id < persistence_id {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        let mut out = Vec::new();
        for i in low..self.len() {
            let run = self.run(i)?;
            if run.persistence_id != persistence_id {
                break;
            }
            if let Some(before) = out.last().map(Run::last) {
                if run.first <= before {
                    return Err(BatchError(format!(
                        "the runs of {persistence_id:?} overlap at {}",
                        run.first
                    )));
                }
            }
            out.push(run);
        }
        Ok(out)
    }

    /// The runs of the ids after `after` (all when `None`) up to and
    /// including `through` (to the end when `None`), in order, found by
    /// binary search.
    pub(crate) fn runs_between(
        &self,
        after: Option<&str>,
        through: Option<&str>,
    ) -> Result<Vec<Run<'a>>, BatchError> {
        let mut out: Vec<Run<'a>> = Vec::new();
        for i in self.first_after(after)?..self.len() {
            let run = self.run(i)?;
            if through.is_some_and(|t| run.persistence_id > t) {
                break;
            }
            if let Some(before) = out.last() {
                if (before.persistence_id, before.last()) >= (run.persistence_id, run.first) {
                    return Err(BatchError(format!(
                        "the directory is out of order at {:?} {}",
                        run.persistence_id, run.first
                    )));
                }
            }
            out.push(run);
        }
        Ok(out)
    }

    /// The place of the first run whose id is after `after` (0 when
    /// `None`; [`Directory::len`] when there is none), by binary search.
    pub(crate) fn first_after(&self, after: Option<&str>) -> Result<usize, BatchError> {
        let (mut low, mut high) = (0, self.len());
        if let Some(after) = after {
            while low < high {
                let mid = low + (high - low) / 2;
                if self.run(mid)?.persistence_id <= after {
                    low = mid + 1;
                } else {
                    high = mid;
                }
            }
        }
        Ok(low)
    }

    /// Every run, checked, in order of id and sequence.
    pub(crate) fn runs(&self) -> Result<Vec<Run<'a>>, BatchError> {
        let runs = (0..self.len())
            .map(|i| self.run(i))
            .collect::<Result<Vec<_>, _>>()?;
        for pair in runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if (a.persistence_id, a.last()) >= (b.persistence_id, b.first) {
                return Err(BatchError(format!(
                    "the directory is out of order at {:?} {} and {:?} {}",
                    a.persistence_id, a.first, b.persistence_id, b.first
                )));
            }
        }
        Ok(runs)
    }
}

/// One event of a run, borrowed from the row's events blob.
pub(crate) struct EventRef<'b> {
    pub(crate) sequence: u64,
    pub(crate) type_name: &'b str,
    pub(crate) version: u32,
    pub(crate) codec: &'b str,
    pub(crate) payload: &'b [u8],
}

/// Calls `f` with each event of `run` (`bytes`: the run's own bytes), in
/// order, checking that the run holds exactly its count of events.
pub(crate) fn visit_events<'b, E: From<BatchError>>(
    run: &Run<'_>,
    bytes: &'b [u8],
    mut f: impl FnMut(EventRef<'b>) -> Result<(), E>,
) -> Result<(), E> {
    let mut rest = bytes;
    for sequence in run.first..=run.last() {
        let (wire, left): (EventOnWire<'b>, _) = postcard::take_from_bytes(rest).map_err(|e| {
            BatchError(format!(
                "event {sequence} of {:?} does not parse: {e}",
                run.persistence_id
            ))
        })?;
        rest = left;
        f(EventRef {
            sequence,
            type_name: wire.type_name,
            version: wire.version,
            codec: wire.codec,
            payload: wire.payload,
        })?;
    }
    if !rest.is_empty() {
        return Err(BatchError(format!(
            "{} bytes follow the {} events of {:?} from {}",
            rest.len(),
            run.count,
            run.persistence_id,
            run.first
        ))
        .into());
    }
    Ok(())
}

/// The events of `run` (`bytes`: the run's own bytes), numbered from
/// `run.first`.
pub(crate) fn events_of(run: &Run<'_>, bytes: &[u8]) -> Result<Vec<EventRecord>, BatchError> {
    let mut out = Vec::with_capacity((run.count as usize).min(bytes.len()));
    visit_events(run, bytes, |e| {
        out.push(EventRecord {
            sequence: e.sequence,
            epoch: run.epoch,
            event: StoredEvent {
                type_name: e.type_name.to_string(),
                version: e.version,
                codec: e.codec.to_string(),
                payload: e.payload.to_vec(),
            },
        });
        Ok::<_, BatchError>(())
    })?;
    Ok(out)
}

/// The bytes of `run` in the whole events blob (checked by
/// [`Directory::run`]).
#[cfg(test)]
pub(crate) fn run_bytes<'b>(run: &Run<'_>, events: &'b [u8]) -> &'b [u8] {
    &events[run.offset as usize..run.offset as usize + run.len as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event(n: u8) -> StoredEvent {
        StoredEvent {
            type_name: "test.Added".into(),
            version: 2,
            codec: "postcard".into(),
            payload: vec![n; usize::from(n) % 7],
        }
    }

    fn append(id: &str, first: u64, epoch: u64, n: u8) -> Append {
        Append {
            persistence_id: id.into(),
            epoch,
            first_sequence: first,
            events: (0..n).map(|i| event(i.wrapping_add(first as u8))).collect(),
        }
    }

    fn read_back(directory: &[u8], events: &[u8], id: &str) -> Vec<EventRecord> {
        let d = Directory::parse(directory, events.len()).unwrap();
        d.runs_of(id)
            .unwrap()
            .iter()
            .flat_map(|r| events_of(r, run_bytes(r, events)).unwrap())
            .collect()
    }

    #[test]
    fn a_row_reads_back_each_ids_events_in_order() {
        let mut row = BatchRow::default();
        let appends = [
            append("b", 1, 1, 2),
            append("b", 3, 1, 3), // extends b's run
            append("a", 5, 1, 1),
            append("c", 1, 2, 1),
            append("a", 6, 3, 1), // another epoch: a run of its own
        ];
        for a in &appends {
            row.push(a).unwrap();
        }
        assert_eq!(row.events(), 8);
        let (directory, events) = row.take();
        assert!(row.is_empty());
        let d = Directory::parse(&directory, events.len()).unwrap();
        assert_eq!(d.runs().unwrap().len(), 4, "b's two appends share a run");
        let b = read_back(&directory, &events, "b");
        assert_eq!(
            b.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let want: Vec<StoredEvent> = appends[0]
            .events
            .iter()
            .chain(&appends[1].events)
            .cloned()
            .collect();
        assert_eq!(b.into_iter().map(|e| e.event).collect::<Vec<_>>(), want);
        let a = read_back(&directory, &events, "a");
        assert_eq!(
            a.iter().map(|e| (e.sequence, e.epoch)).collect::<Vec<_>>(),
            [(5, 1), (6, 3)]
        );
        assert!(read_back(&directory, &events, "zz").is_empty());
        assert!(read_back(&directory, &events, "").is_empty());
    }

    #[test]
    fn a_directory_out_of_order_or_pointing_outside_is_refused() {
        let mut row = BatchRow::default();
        row.push(&append("a", 1, 1, 2)).unwrap();
        row.push(&append("b", 1, 1, 2)).unwrap();
        let (directory, events) = row.take();
        let d = Directory::parse(&directory, events.len()).unwrap();
        let mut runs = d.runs().unwrap();
        runs.swap(0, 1);
        let swapped = encode_directory(&runs);
        let d = Directory::parse(&swapped, events.len()).unwrap();
        let e = d.runs().err().unwrap();
        assert!(e.0.contains("out of order"), "{e}");
        let short = Directory::parse(&directory, events.len() - 1).unwrap();
        let e = short.runs().err().unwrap();
        assert!(e.0.contains("ends at byte"), "{e}");
        let e = short.runs_of("b").err().unwrap();
        assert!(e.0.contains("ends at byte"), "{e}");
        let mut newer = directory.clone();
        newer[0] = FORMAT + 1;
        let e = Directory::parse(&newer, events.len()).err().unwrap();
        assert!(e.0.contains("format"), "{e}");
    }

    proptest! {
        /// Whatever a row's appends, each id reads back exactly its
        /// events, numbered and in order.
        #[test]
        fn rows_read_back_what_was_pushed(
            appends in proptest::collection::vec((0u8..6, 1u8..4, 0u64..3), 0..40)
        ) {
            let mut row = BatchRow::default();
            let mut next = std::collections::BTreeMap::<String, u64>::new();
            let mut want = std::collections::BTreeMap::<String, Vec<(u64, u64, StoredEvent)>>::new();
            for (id, n, epoch) in appends {
                let id = format!("id-{id}");
                let first = *next.get(&id).unwrap_or(&1);
                let a = append(&id, first, epoch, n);
                row.push(&a).unwrap();
                next.insert(id.clone(), first + u64::from(n));
                let w = want.entry(id).or_default();
                for (i, e) in a.events.into_iter().enumerate() {
                    w.push((first + i as u64, epoch, e));
                }
            }
            let (directory, events) = row.take();
            for (id, w) in want {
                let got: Vec<(u64, u64, StoredEvent)> = read_back(&directory, &events, &id)
                    .into_iter()
                    .map(|e| (e.sequence, e.epoch, e.event))
                    .collect();
                prop_assert_eq!(got, w);
            }
        }

        /// Any bytes: a directory and events that do not read are an
        /// error, never a panic or an allocation of what a length claims.
        #[test]
        fn garbage_never_panics(directory in proptest::collection::vec(any::<u8>(), 0..200),
                                events in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(d) = Directory::parse(&directory, events.len()) {
                if let Ok(runs) = d.runs() {
                    for r in &runs {
                        let _ = events_of(r, run_bytes(r, &events));
                    }
                }
                let _ = d.runs_of("id-1");
            }
        }

        /// A real row cut short or with a byte changed reads as an error
        /// or as events, never a panic.
        #[test]
        fn damaged_rows_never_panic(cut in 0usize..400, flip in 0usize..400, bit in 0u8..8) {
            let mut row = BatchRow::default();
            for i in 0..5u8 {
                row.push(&append(&format!("id-{i}"), 1, 1, 3)).unwrap();
            }
            let (mut directory, mut events) = row.take();
            if flip < directory.len() {
                directory[flip] ^= 1 << bit;
            } else if flip - directory.len() < events.len() {
                let at = flip - directory.len();
                events[at] ^= 1 << bit;
            }
            events.truncate(cut.min(events.len()));
            if let Ok(d) = Directory::parse(&directory, events.len()) {
                if let Ok(runs) = d.runs() {
                    for r in &runs {
                        let _ = events_of(r, run_bytes(r, &events));
                    }
                }
                for i in 0..5 {
                    if let Ok(runs) = d.runs_of(&format!("id-{i}")) {
                        for r in &runs {
                            let _ = events_of(r, run_bytes(r, &events));
                        }
                    }
                }
            }
        }
    }
}
