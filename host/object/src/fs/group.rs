//! Group commit: publishes that wait for the arbiter at the same time are
//! decided under one hold of it, and share the syncs that must happen
//! under it.
//!
//! A publisher seals its file (outside the arbiter, as before), queues
//! it, and waits for its process's turn at the arbiter. Whoever gets the
//! turn and finds its own publish still queued leads: it takes the flock,
//! drains the queue, decides and renames each publish in queue order,
//! fsyncs every directory those publishes created (each distinct one
//! once, several at a time: `syncer`), releases the flock and hands each
//! publisher its outcome. A publisher whose outcome is already there when
//! it gets the turn returns at once. Each then syncs its own version
//! directory outside the arbiter, as a lone publish does (`durable`;
//! one the publish created has had its sync running since the rename).
//!
//! On a store with a journal, a group's small whole publishes and its
//! deletes skip the file and directory syncs: the leader decides them in
//! queue order, writes all their records to the journal with one sync,
//! and then renames the files in and unlinks the removed ones
//! (`journal`). A change that must see one of them on disk to be decided
//! (a later change of the same key, or a synced publish later in the
//! queue) has them written and made first. Before it decides anything
//! the leader settles whatever segments another writer left, and before
//! a synced publish it syncs, with the group's new directories, those
//! the journaled changes created. After answering, the leader that
//! filled its segment settles it.
//!
//! Why this keeps every guarantee of one publish at a time:
//! - **Decisions.** The publishes of a group are decided one after
//!   another under the flock, exactly as if each had taken the arbiter in
//!   queue order: a later one sees an earlier one's rename, so two
//!   writers guarded on the same generation still cannot both win.
//! - **New directories.** Their parents are fsynced before the flock is
//!   released, as before; only the time they are fsynced moves, from
//!   right after each publish to the end of the group, and a publish in
//!   the group that found a directory another one created is answered
//!   only after that sync. If any such sync fails, every publish of the
//!   group that renamed its file answers `Io` (its outcome is unknown,
//!   as after any failed sync).
//! - **Acknowledgement.** Nobody is answered before its own syncs have
//!   returned: the file's before it queued, the new directories' by the
//!   leader, its version directory's by itself (waiting for a helper's,
//!   when the publish created that directory).
//! - **Crashes.** Each publish of a group is, at any instant, in one of
//!   the states a lone publish can be in (staged, renamed but not
//!   durable, durable), so recovery is unchanged.
//! - **One writer alone** pays what it paid before plus an uncontended
//!   mutex round and one queue push.
//!
//! The invariant the protocol rests on: a leader drains the queue and
//! fills the slot of every publish it drained before it gives up its
//! turn. So a publisher that gets the turn and finds its slot empty knows
//! its publish is still queued, and leads.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::{ObjectError, ObjectMeta, PutCondition};

use super::durable::{NewDirs, Payload, Staged, Target, Unsynced};
use super::journal::{Entry, Journal, Keep, Kind, Removal, record_path};
use super::layout::KeyPath;
use super::lock::{Held, Turn};
use super::publish::{Decision, Superseded, remove_versions};
use super::version_file::Header;
use super::versions::version_ids;
use super::{FsStore, locked};

/// What a grouped publish gets back: the published version, what it
/// superseded, and its version directory to sync.
pub(super) type Committed = (ObjectMeta, Superseded, Unsynced);

/// What a grouped change gets back.
#[derive(Debug)]
enum Done {
    Published(Box<Committed>),
    /// A journaled removal, durable already.
    Removed,
}

/// The changes waiting for a leader.
#[derive(Debug, Default)]
pub(super) struct Queue {
    waiting: Mutex<Vec<Job>>,
    /// The largest group committed so far, for tests that must show
    /// groups formed.
    #[cfg(test)]
    largest: AtomicUsize,
}

/// One queued change of `key`.
#[derive(Debug)]
struct Job {
    key: KeyPath,
    work: Work,
    slot: Arc<Slot>,
}

#[derive(Debug)]
enum Work {
    Publish {
        header: Header,
        payload: Payload,
        condition: PutCondition,
    },
    /// Only on a store with a journal.
    Remove(Removal),
}

/// A journaled change decided by a leader, waiting for its group's
/// journal sync before it is made.
#[derive(Debug)]
enum Pending {
    Publish(Box<PendingPublish>),
    Remove {
        key: KeyPath,
        /// The key's version directory, and the versions in it to remove.
        dir: PathBuf,
        versions: Vec<String>,
        slot: Arc<Slot>,
    },
}

/// A journaled publish decided by a leader.
#[derive(Debug)]
struct PendingPublish {
    key: KeyPath,
    header: Header,
    staged: Staged,
    bytes: Vec<u8>,
    decision: Decision,
    slot: Arc<Slot>,
}

impl Pending {
    fn key(&self) -> &KeyPath {
        match self {
            Self::Publish(publish) => &publish.key,
            Self::Remove { key, .. } => key,
        }
    }

    fn slot(self) -> Arc<Slot> {
        match self {
            Self::Publish(publish) => publish.slot,
            Self::Remove { slot, .. } => slot,
        }
    }
}

/// The outcome of each change a leader has dealt with, to hand out.
type Answers = Vec<(Arc<Slot>, Result<Done, ObjectError>)>;

/// Where a leader leaves one change's outcome.
#[derive(Debug, Default)]
struct Slot(Mutex<Option<Result<Done, ObjectError>>>);

impl Slot {
    fn put(&self, outcome: Result<Done, ObjectError>) {
        *locked(&self.0) = Some(outcome);
    }

    fn take(&self) -> Option<Result<Done, ObjectError>> {
        locked(&self.0).take()
    }
}

impl FsStore {
    /// Publishes `payload` as a new version of `key` if `condition`
    /// holds, in a group with whatever other changes of this store wait
    /// for the arbiter meanwhile. The caller syncs the returned
    /// [`Unsynced`] (and removes what was superseded after that).
    pub(super) fn commit_grouped(
        &self,
        key: &KeyPath,
        header: Header,
        payload: Payload,
        condition: &PutCondition,
    ) -> Result<Committed, ObjectError> {
        let work = Work::Publish {
            header,
            payload,
            condition: condition.clone(),
        };
        match self.grouped(key, work)? {
            Done::Published(committed) => Ok(*committed),
            Done::Removed => Err(ObjectError::Io(
                "a group commit's leader answered a publish as a removal".into(),
            )),
        }
    }

    /// Removes `removal` of `key` through the journal (the store has
    /// one), in a group as above: durable when this returns.
    pub(super) fn remove_grouped(
        &self,
        key: &KeyPath,
        removal: Removal,
    ) -> Result<(), ObjectError> {
        match self.grouped(key, Work::Remove(removal))? {
            Done::Removed => Ok(()),
            Done::Published(_) => Err(ObjectError::Io(
                "a group commit's leader answered a removal as a publish".into(),
            )),
        }
    }

    /// Queues `work` and waits for its outcome, leading the group if no
    /// one else does.
    fn grouped(&self, key: &KeyPath, work: Work) -> Result<Done, ObjectError> {
        let slot = Arc::new(Slot::default());
        locked(&self.queue.waiting).push(Job {
            key: key.clone(),
            work,
            slot: Arc::clone(&slot),
        });
        let turn = self.arbiter.turn();
        if let Some(outcome) = slot.take() {
            return outcome;
        }
        // Still queued (see the module doc): lead.
        let jobs = std::mem::take(&mut *locked(&self.queue.waiting));
        #[cfg(test)]
        self.queue.largest.fetch_max(jobs.len(), Ordering::Relaxed);
        self.lead(turn, jobs);
        slot.take().unwrap_or_else(|| {
            Err(ObjectError::Io(
                "a group commit's leader left its own change unanswered".into(),
            ))
        })
    }

    /// Commits `jobs` under one hold of the arbiter and answers each.
    fn lead(&self, turn: Turn<'_>, jobs: Vec<Job>) {
        let held = match turn.lock() {
            Ok(held) => held,
            Err((_turn, error)) => {
                // Answered before `_turn` goes, as below.
                for job in jobs {
                    job.slot.put(Err(error.clone()));
                }
                return;
            }
        };
        if let Some(journal) = &self.journal {
            // No decision may miss a record another writer left unmade
            // (`journal`).
            if let Err(error) = self.settle_journal(journal, &held, Keep::Own) {
                for job in jobs {
                    job.slot.put(Err(error.clone()));
                }
                return;
            }
        }
        let mut created = NewDirs::default();
        let mut answers: Answers = Vec::with_capacity(jobs.len());
        let mut pending: Vec<Pending> = Vec::new();
        for Job { key, work, slot } in jobs {
            // A change is decided on every earlier change of its key, and
            // a synced publish on every earlier change at all, made.
            let after = |pending: &[Pending]| {
                matches!(
                    work,
                    Work::Publish {
                        payload: Payload::Sealed(_),
                        ..
                    }
                ) || pending.iter().any(|p| p.key().key() == key.key())
            };
            if after(&pending) {
                self.apply_pending(&held, &mut pending, &mut answers);
            }
            match work {
                Work::Publish {
                    header,
                    payload: Payload::Sealed(sealed),
                    condition,
                } => {
                    // It may land below a directory only the journal
                    // made durable so far: synced with the group's own
                    // new directories, before anyone is answered.
                    if let Some(journal) = &self.journal {
                        created.extend(journal.take_new_dirs(&held));
                    }
                    let outcome = unwound(&key, || {
                        self.commit_locked(&held, &key, &header, sealed, &condition, &mut created)
                    });
                    answers.push((slot, outcome.map(|c| Done::Published(Box::new(c)))));
                }
                Work::Publish {
                    header,
                    payload: Payload::Logged { staged, bytes },
                    condition,
                } => match unwound(&key, || self.decide(&held, &key, &condition)) {
                    Ok(decision) => pending.push(Pending::Publish(Box::new(PendingPublish {
                        key,
                        header,
                        staged,
                        bytes,
                        decision,
                        slot,
                    }))),
                    Err(error) => answers.push((slot, Err(error))),
                },
                Work::Remove(removal) => {
                    let dir = self.layout.versions_dir(&key);
                    let versions = match removal {
                        // Absent already is fine: nothing to record.
                        Removal::Version(id) => Ok(if dir.join(&id).exists() {
                            vec![id]
                        } else {
                            Vec::new()
                        }),
                        Removal::Every => version_ids(&dir),
                    };
                    match versions {
                        Ok(versions) => pending.push(Pending::Remove {
                            key,
                            dir,
                            versions,
                            slot,
                        }),
                        Err(error) => answers.push((slot, Err(error))),
                    }
                }
            }
        }
        self.apply_pending(&held, &mut pending, &mut answers);
        let failed = created.sync_each(&held);
        if let Some(journal) = &self.journal {
            // To be synced by the next synced publish (or settle).
            journal.note_new_dirs(failed.keys().cloned());
        }
        // Answered while the turn is still held, which is what the
        // invariant in the module doc needs (`held` gives up the flock and
        // the turn together).
        for (slot, outcome) in answers {
            let outcome = match (outcome, failed.first_key_value()) {
                (Ok(Done::Published(committed)), Some((dir, error))) => Err(ObjectError::Io(
                    format!(
                        "published {:?}, but a directory created in the same group could not \
                         be made durable ({}: {error}); the version may not survive a crash",
                        committed.0.key,
                        dir.display()
                    )
                    .into(),
                )),
                (outcome, _) => outcome,
            };
            slot.put(outcome);
        }
        drop(held);
        if let Some(journal) = &self.journal
            && let Err(error) = self.settle_if_full(journal)
        {
            tracing::warn!(root = %self.layout.root.display(), %error, "settling a full journal segment failed; it is settled with the rest later");
        }
    }

    /// Settles this store's segment once it is full, holding the arbiter
    /// only to retire it and to remove it: the flush between, the long
    /// part, runs while other changes go on (into a new segment). Its
    /// own change answered, the leader that filled the segment does this.
    fn settle_if_full(&self, journal: &Journal) -> Result<(), ObjectError> {
        // Asked first without the arbiter: taking it only to find the
        // segment not full cost every group a flock and an unlock.
        if !journal.full() {
            return Ok(());
        }
        let Some(retired) = journal.retire_if_full(&self.arbiter.lock()?) else {
            return Ok(());
        };
        journal.flush()?;
        journal.remove_retired(&self.arbiter.lock()?, &retired)
    }

    /// Writes the records of the journaled changes in `pending` to the
    /// journal with one sync, then makes each (renames a publish in,
    /// removes a removal's files); adds their outcomes to `answers`.
    fn apply_pending(&self, held: &Held<'_>, pending: &mut Vec<Pending>, answers: &mut Answers) {
        if pending.is_empty() {
            return;
        }
        let Some(journal) = &self.journal else {
            for change in pending.drain(..) {
                let slot = change.slot();
                answers.push((
                    slot,
                    Err(ObjectError::Io(
                        "a journaled change on a store without a journal".into(),
                    )),
                ));
            }
            return;
        };
        let paths: Vec<Vec<(Kind, String)>> = pending
            .iter()
            .map(|change| match change {
                Pending::Publish(publish) => vec![(Kind::File, publish.decision.journal_path())],
                Pending::Remove { key, versions, .. } => {
                    let names = self.layout.versions_names(key);
                    versions
                        .iter()
                        .map(|id| (Kind::Removal, record_path(&names, id)))
                        .collect()
                }
            })
            .collect();
        let entries: Vec<Entry<'_>> = pending
            .iter()
            .zip(&paths)
            .flat_map(|(change, paths)| {
                let bytes: &[u8] = match change {
                    Pending::Publish(publish) => &publish.bytes,
                    Pending::Remove { .. } => &[],
                };
                paths.iter().map(move |(kind, path)| Entry {
                    kind: *kind,
                    path,
                    bytes,
                })
            })
            .collect();
        let synced = journal.append(held, &self.ids, &entries);
        for change in pending.drain(..) {
            let (slot, outcome) = match change {
                Pending::Publish(publish) => {
                    let PendingPublish {
                        key,
                        header,
                        staged,
                        decision,
                        slot,
                        ..
                    } = *publish;
                    let mut created = NewDirs::default();
                    let outcome = match &synced {
                        Err(error) => Err(error.clone()),
                        Ok(synced) => staged
                            .logged(synced)
                            .publish(
                                held,
                                Target {
                                    base: &self.layout.objects,
                                    dirs: &decision.dirs(),
                                    name: &decision.version_id,
                                },
                                &mut created,
                            )
                            .map(|()| {
                                Done::Published(Box::new((
                                    self.meta(key.key(), &decision.version_id, &header),
                                    decision.superseded,
                                    Unsynced::Journaled,
                                )))
                            }),
                    };
                    journal.note_new_dirs(created.iter().map(Path::to_path_buf));
                    (slot, outcome)
                }
                Pending::Remove {
                    dir,
                    versions,
                    slot,
                    ..
                } => {
                    let outcome = match &synced {
                        Err(error) => Err(error.clone()),
                        Ok(_) => remove_versions(&dir, &versions).map(|()| {
                            // Not synced: an empty directory a crash
                            // brings back holds no key.
                            self.prune(&dir);
                            Done::Removed
                        }),
                    };
                    (slot, outcome)
                }
            };
            if synced.is_ok() && outcome.is_err() {
                // Its record is durable but the filesystem does not show
                // it: the segment must be read back before the next
                // decision.
                journal.abandon();
            }
            answers.push((slot, outcome));
        }
    }
}

/// `work`'s outcome, or `Io` if it panicked (under the arbiter, where a
/// panic must not leave the group unanswered).
fn unwound<T>(
    key: &KeyPath,
    work: impl FnOnce() -> Result<T, ObjectError>,
) -> Result<T, ObjectError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(ObjectError::Io(
            format!("publishing {:?} panicked under the arbiter", key.key()).into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use bytes::Bytes;
    use custodian_base::checksum::crc64_nvme;

    use crate::fs::FsStore;
    use crate::fs::tests::block_on;
    use crate::{MAX_LIST_PAGE, Metadata, ObjectKey, ObjectStore, ObjectStoreExt, PutCondition};

    #[test]
    fn concurrent_publishes_commit_in_groups_and_each_gets_its_own_outcome() {
        let store = FsStore::temporary(true);
        let writers = 16;
        let rounds = 20;
        std::thread::scope(|scope| {
            for writer in 0..writers {
                let store = &store;
                scope.spawn(move || {
                    for n in 0..rounds {
                        // A new key each time (the group shares its new
                        // directories' syncs) and a contested one, which
                        // exactly one writer per round may create.
                        let body = Bytes::from(format!("{writer}-{n}"));
                        let crc = crc64_nvme(&body);
                        let new = format!("new/{writer}-{n}");
                        let none = PutCondition::IfNoneMatchAny;
                        block_on(store.put_whole(&new, body.clone(), &none, &Metadata::new(), crc))
                            .unwrap();
                        let contested = format!("contested/{n}");
                        let _ = block_on(store.put_whole(
                            &contested,
                            body,
                            &none,
                            &Metadata::new(),
                            crc,
                        ));
                    }
                });
            }
        });
        assert!(
            store.queue.largest.load(Ordering::Relaxed) > 1,
            "no two publishes ever shared a group; the test proves nothing"
        );
        for writer in 0..writers {
            for n in 0..rounds {
                let (_, body) =
                    block_on(store.get_whole(&format!("new/{writer}-{n}"), None)).unwrap();
                assert_eq!(body, format!("{writer}-{n}").as_bytes());
            }
        }
        for n in 0..rounds {
            let key = ObjectKey::new(format!("contested/{n}")).unwrap();
            let versions = block_on(store.list_key_versions(&key, None, MAX_LIST_PAGE)).unwrap();
            assert_eq!(versions.items.len(), 1, "one create won contested/{n}");
        }
    }
}
