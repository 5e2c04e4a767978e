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
//! On a store with a journal, a group's small whole publishes skip the
//! file and directory syncs: the leader decides them in queue order,
//! writes all their records to the journal with one sync, and then
//! renames them in (`journal`). A publish that must see one of them on
//! disk to be decided (a second publish of the same key, or a synced one
//! later in the queue) has them written and renamed in first. Before it
//! decides anything the leader settles whatever segments another writer
//! left, and the whole journal if the group holds a synced publish.
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
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{ObjectError, ObjectMeta, PutCondition};

use super::FsStore;
use super::durable::{NewDirs, Payload, Staged, Target, Unsynced};
use super::journal::{Entry, Keep};
use super::layout::KeyPath;
use super::lock::{Held, Turn};
use super::publish::{Decision, Superseded};
use super::version_file::Header;

/// What a grouped publish gets back: the published version, what it
/// superseded, and its version directory to sync.
pub(super) type Committed = (ObjectMeta, Superseded, Unsynced);

/// The publishes waiting for a leader.
#[derive(Debug, Default)]
pub(super) struct Queue {
    waiting: Mutex<Vec<Job>>,
    /// The largest group committed so far, for tests that must show
    /// groups formed.
    #[cfg(test)]
    largest: AtomicUsize,
}

/// One queued publish.
#[derive(Debug)]
struct Job {
    key: KeyPath,
    header: Header,
    payload: Payload,
    condition: PutCondition,
    slot: Arc<Slot>,
}

/// A journaled publish decided by a leader, waiting for its group's
/// journal sync before it is renamed in.
#[derive(Debug)]
struct Decided {
    key: KeyPath,
    header: Header,
    staged: Staged,
    bytes: Vec<u8>,
    decision: Decision,
    slot: Arc<Slot>,
}

/// The outcome of each publish a leader has dealt with, to hand out.
type Answers = Vec<(Arc<Slot>, Result<Committed, ObjectError>)>;

/// Where a leader leaves one publish's outcome.
#[derive(Debug, Default)]
struct Slot(Mutex<Option<Result<Committed, ObjectError>>>);

impl Slot {
    fn put(&self, outcome: Result<Committed, ObjectError>) {
        *lock(&self.0) = Some(outcome);
    }

    fn take(&self) -> Option<Result<Committed, ObjectError>> {
        lock(&self.0).take()
    }
}

/// Locks a mutex whose data stays consistent at every step (a queue, a
/// slot), so a panic elsewhere does not make it unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FsStore {
    /// Publishes `sealed` as a new version of `key` if `condition` holds,
    /// in a group with whatever other publishes of this store wait for
    /// the arbiter meanwhile. The caller syncs the returned
    /// [`Unsynced`] (and removes what was superseded after that).
    pub(super) fn commit_grouped(
        &self,
        key: &KeyPath,
        header: Header,
        payload: Payload,
        condition: &PutCondition,
    ) -> Result<Committed, ObjectError> {
        let slot = Arc::new(Slot::default());
        lock(&self.queue.waiting).push(Job {
            key: key.clone(),
            header,
            payload,
            condition: condition.clone(),
            slot: Arc::clone(&slot),
        });
        let turn = self.arbiter.turn();
        if let Some(outcome) = slot.take() {
            return outcome;
        }
        // Still queued (see the module doc): lead.
        let jobs = std::mem::take(&mut *lock(&self.queue.waiting));
        #[cfg(test)]
        self.queue.largest.fetch_max(jobs.len(), Ordering::Relaxed);
        self.lead(turn, jobs);
        slot.take().unwrap_or_else(|| {
            Err(ObjectError::Io(
                "a group commit's leader left its own publish unanswered".into(),
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
            // A synced publish must not build on what only the journal
            // holds; no decision may miss a record another writer left
            // unrenamed (`journal`).
            let keep = if jobs.iter().any(|j| matches!(j.payload, Payload::Sealed(_))) {
                Keep::Nothing
            } else {
                Keep::Own
            };
            if let Err(error) = self.settle_journal(journal, &held, keep) {
                for job in jobs {
                    job.slot.put(Err(error.clone()));
                }
                return;
            }
        }
        let mut created = NewDirs::default();
        let mut answers: Answers = Vec::with_capacity(jobs.len());
        let mut logged: Vec<Decided> = Vec::new();
        for job in jobs {
            let Job {
                key,
                header,
                payload,
                condition,
                slot,
            } = job;
            match payload {
                Payload::Sealed(sealed) => {
                    // It must see every journaled publish decided before it.
                    self.rename_logged(&held, &mut logged, &mut answers);
                    let outcome = unwound(&key, || {
                        self.commit_locked(&held, &key, &header, sealed, &condition, &mut created)
                    });
                    answers.push((slot, outcome));
                }
                Payload::Logged { staged, bytes } => {
                    // A second publish of one key in a group is decided on
                    // the first's rename.
                    if logged.iter().any(|d| d.key.key() == key.key()) {
                        self.rename_logged(&held, &mut logged, &mut answers);
                    }
                    match unwound(&key, || self.decide(&held, &key, &condition)) {
                        Ok(decision) => logged.push(Decided {
                            key,
                            header,
                            staged,
                            bytes,
                            decision,
                            slot,
                        }),
                        Err(error) => answers.push((slot, Err(error))),
                    }
                }
            }
        }
        self.rename_logged(&held, &mut logged, &mut answers);
        let failed = created.sync_each(&held);
        // Answered while the turn is still held, which is what the
        // invariant in the module doc needs (`held` gives up the flock and
        // the turn together).
        for (slot, outcome) in answers {
            let outcome = match (outcome, failed.first_key_value()) {
                (Ok((meta, _, _)), Some((dir, error))) => Err(ObjectError::Io(
                    format!(
                        "published {:?}, but a directory created in the same group could not \
                         be made durable ({}: {error}); the version may not survive a crash",
                        meta.key,
                        dir.display()
                    )
                    .into(),
                )),
                (outcome, _) => outcome,
            };
            slot.put(outcome);
        }
        drop(held);
        if self.journal.as_ref().is_some_and(|j| j.is_full()) {
            // Its own publish is answered; the next leader waits for this.
            if let Err(error) = self.settled() {
                tracing::warn!(root = %self.layout.root.display(), %error, "settling a full journal failed; the next change that must settle it tries again");
            }
        }
    }

    /// Writes the records of the journaled publishes in `logged` to the
    /// journal in one sync, then renames each in; adds their outcomes to
    /// `answers`.
    fn rename_logged(&self, held: &Held<'_>, logged: &mut Vec<Decided>, answers: &mut Answers) {
        if logged.is_empty() {
            return;
        }
        let Some(journal) = &self.journal else {
            for decided in logged.drain(..) {
                answers.push((
                    decided.slot,
                    Err(ObjectError::Io(
                        "a journaled publish on a store without a journal".into(),
                    )),
                ));
            }
            return;
        };
        let paths: Vec<String> = logged.iter().map(|d| d.decision.journal_path()).collect();
        let entries: Vec<Entry<'_>> = logged
            .iter()
            .zip(&paths)
            .map(|(d, path)| Entry {
                path,
                bytes: &d.bytes,
            })
            .collect();
        let synced = journal.append(held, &self.ids, &entries);
        for decided in logged.drain(..) {
            let Decided {
                key,
                header,
                staged,
                decision,
                slot,
                ..
            } = decided;
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
                    )
                    .map(|()| {
                        (
                            self.meta(key.key(), &decision.version_id, &header),
                            decision.superseded,
                            Unsynced::Journaled,
                        )
                    }),
            };
            if synced.is_ok() && outcome.is_err() {
                // Its record is durable but its file is not in place: the
                // segment must be read back before the next decision.
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
