//! Three-member clusters of their own whose members, the leader included,
//! are SIGKILLed and restarted while batches run, and a cluster killed
//! whole. A batch's answer is what a BTreeMap model predicts, or
//! `Unavailable`; after `Unavailable` the store holds the state before the
//! batch or the state after it, never a part of it; at the end the store
//! equals the model.
//!
//! SIGKILL keeps the operating system's page cache, so these tests show
//! that etcd loses nothing when its processes crash, not what a power cut
//! does (etcd's fsync covers that; they do not test it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use super::local_server::EtcdCluster;
use super::tests::{fresh_prefix, p};
use super::{EtcdConfig, EtcdKv};
use crate::conformance::{
    FAULT_PARTITIONS as PARTITIONS, Model, XorShift, model_apply, random_batch,
};
use crate::{Kv, KvError, Outcome};
use custodian_base::clock::FixedClock;

/// How long a test waits for a cluster to heal.
const HEAL: Duration = Duration::from_secs(60);

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(1_000_000))
}

/// Everything the store holds (both partitions fit one page).
async fn state(kv: &impl Kv) -> Result<Model, KvError> {
    let mut state = Model::new();
    for partition in PARTITIONS {
        let page = kv.scan(&p(partition), b"", None, None, 1000).await?;
        assert_eq!(page.next, None);
        for (key, value) in page.entries {
            state.insert((partition.to_owned(), key), value);
        }
    }
    Ok(state)
}

/// The state, once the cluster answers again.
async fn settled_state(kv: &impl Kv) -> Model {
    let deadline = Instant::now() + HEAL;
    loop {
        match state(kv).await {
            Ok(state) => return state,
            Err(KvError::Unavailable(why)) if Instant::now() < deadline => {
                eprintln!("waiting for the cluster: {why}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("reading the state: {e:?}"),
        }
    }
}

async fn store_on(cluster: &EtcdCluster, timeout: Duration, prefix: Vec<u8>) -> EtcdKv {
    let mut config = EtcdConfig::new(cluster.endpoints(), prefix);
    config.request_timeout = timeout;
    EtcdKv::connect(config, clock()).await.unwrap()
}

/// What became of the batches of a run.
#[derive(Debug, Default)]
struct Seen {
    committed: usize,
    precondition_failed: usize,
    unavailable_then_absent: usize,
    unavailable_then_present: usize,
    kills: Vec<String>,
}

/// Kills a member (the leader every other time) and restarts it once the
/// rest have healed, `cycles` times; then raises `done`.
fn chaos(
    mut cluster: EtcdCluster,
    cycles: usize,
    mut rng: XorShift,
    done: &AtomicBool,
) -> (EtcdCluster, Vec<String>) {
    let mut kills = Vec::new();
    for cycle in 0..cycles {
        std::thread::sleep(Duration::from_millis(300 + rng.below(700)));
        let leader = cluster.leader();
        let victim = match leader {
            Some(leader) if cycle.is_multiple_of(2) => leader,
            _ => rng.below(3) as usize,
        };
        cluster.kill(victim);
        let role = if Some(victim) == leader {
            "leader"
        } else {
            "follower"
        };
        kills.push(format!("m{victim} ({role})"));
        std::thread::sleep(Duration::from_millis(300 + rng.below(1500)));
        cluster.restart(victim).expect("restarting the member");
        cluster.wait_healthy(HEAL).expect("the cluster heals");
    }
    done.store(true, Ordering::SeqCst);
    (cluster, kills)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_stay_whole_while_members_and_the_leader_are_killed_and_restarted() {
    let Some(cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    // A short budget, so an in-doubt batch is answered soon.
    let kv = store_on(&cluster, Duration::from_secs(2), fresh_prefix()).await;
    let mut rng = XorShift::from_time("batches under member kills");
    let chaos_rng = XorShift(rng.next() | 1);
    let done = Arc::new(AtomicBool::new(false));
    let killer = std::thread::spawn({
        let done = done.clone();
        move || chaos(cluster, 6, chaos_rng, &done)
    });
    let mut model = Model::new();
    let mut seen = Seen::default();
    let mut round = 0u64;
    while !done.load(Ordering::SeqCst) {
        if killer.is_finished() {
            break;
        }
        let batch = random_batch(&mut rng, &model, round);
        let (expected, after) = model_apply(&model, &batch, 0);
        match kv.apply(&batch).await {
            Ok(outcome) => {
                assert_eq!(outcome, expected, "round {round}: {batch:?}");
                match outcome {
                    Outcome::Committed => seen.committed += 1,
                    _ => seen.precondition_failed += 1,
                }
                model = after;
            }
            Err(KvError::Unavailable(why)) => {
                let found = settled_state(&kv).await;
                if found == model {
                    seen.unavailable_then_absent += 1;
                } else if found == after {
                    seen.unavailable_then_present += 1;
                    model = after;
                } else {
                    panic!(
                        "round {round}: after `{why}` the store holds neither the state before \
                         the batch nor the state after it"
                    );
                }
            }
            Err(e) => panic!("round {round}: {e:?}"),
        }
        if round.is_multiple_of(20) {
            assert!(
                settled_state(&kv).await == model,
                "round {round}: the state drifted"
            );
        }
        round += 1;
    }
    let (cluster, kills) = killer.join().expect("the killer thread");
    seen.kills = kills;
    assert!(
        settled_state(&kv).await == model,
        "the final state differs from the model"
    );
    eprintln!("{round} batches: {seen:?}");
    assert!(
        seen.kills.iter().any(|kill| kill.contains("leader")),
        "{seen:?}"
    );
    assert!(
        seen.committed > 50,
        "too few batches ran during the kills: {seen:?}"
    );
    drop(cluster);
}

// Multi-threaded, and the cluster driven from `block_in_place`, as a host
// runs: the client's connection tasks keep running and notice at once
// that a member's connections closed. (On a blocked single thread, a
// request could be written to a dead member's connection before its close
// is read, and its outcome would be unknown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_keeps_serving_while_one_member_of_three_is_down_and_after_it_rejoins() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let kv = store_on(&cluster, super::DEFAULT_REQUEST_TIMEOUT, fresh_prefix()).await;
    let mut model = Model::new();
    let mut round = 0u64;
    let mut rng = XorShift::from_time("one member down");
    let mut run = async |model: &mut Model, rounds: u64| {
        for _ in 0..rounds {
            let batch = random_batch(&mut rng, model, round);
            let (expected, after) = model_apply(model, &batch, 0);
            assert_eq!(kv.apply(&batch).await, Ok(expected), "round {round}");
            *model = after;
            let keys: Vec<Vec<u8>> = (0..16).map(|k| vec![b'k', k]).collect();
            let got = kv.get_many(&p("p0"), &keys).await.unwrap();
            let want: Vec<_> = keys
                .iter()
                .map(|k| model.get(&("p0".to_owned(), k.clone())).cloned())
                .collect();
            assert!(got == want, "round {round}: get_many differs");
            assert!(
                state(&kv).await.unwrap() == *model,
                "round {round}: a scan differs"
            );
            round += 1;
        }
    };
    let leader = block_in_place(|| cluster.leader()).expect("a leader");
    for victim in [leader, (leader + 1) % 3] {
        block_in_place(|| {
            cluster.kill(victim);
            cluster.wait_healthy(HEAL)
        })
        .unwrap();
        run(&mut model, 30).await;
        block_in_place(|| {
            cluster.restart(victim)?;
            cluster.wait_healthy(HEAL)
        })
        .unwrap();
        run(&mut model, 10).await;
    }
}

#[tokio::test]
async fn committed_batches_survive_killing_and_restarting_every_member() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let prefix = fresh_prefix();
    let kv = store_on(&cluster, Duration::from_secs(2), prefix.clone()).await;
    let mut rng = XorShift::from_time("whole-cluster kill");
    let mut model = Model::new();
    for round in 0..60 {
        let batch = random_batch(&mut rng, &model, round);
        let (expected, after) = model_apply(&model, &batch, 0);
        assert_eq!(kv.apply(&batch).await, Ok(expected), "round {round}");
        model = after;
    }
    assert!(!model.is_empty());
    for member in 0..3 {
        cluster.kill(member);
        assert!(!cluster.is_running(member));
    }
    let got = kv.get(&p("p0"), b"k").await;
    assert!(matches!(got, Err(KvError::Unavailable(_))), "{got:?}");
    for member in 0..3 {
        cluster.restart(member).unwrap();
    }
    cluster.wait_healthy(HEAL).unwrap();
    assert!(
        settled_state(&kv).await == model,
        "an acknowledged batch was lost"
    );
    // A new client sees the same.
    let again = store_on(&cluster, Duration::from_secs(2), prefix).await;
    assert!(state(&again).await.unwrap() == model);
}
