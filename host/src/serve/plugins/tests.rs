use super::*;
use crate::policy::retention::Stage;
use crate::serve::test_host::test_host;

/// The bundled takedown plugin with a custom section appended: another
/// build of the same policy, with its own hash.
fn rebuilt(world: World) -> Vec<u8> {
    let mut bytes = crate::bundled::plugin(world).unwrap().to_vec();
    let name = b"custodian-test-build";
    bytes.extend_from_slice(&[0, name.len() as u8 + 1, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes
}

async fn swap_events(kv: &dyn Kv) -> Vec<Record> {
    let (records, _) = audit::read(kv, 0, None, 100).await.unwrap();
    records
        .into_iter()
        .filter(|r| r.event == "plugin/swap")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_serves_the_new_plugin_raises_the_authority_and_audits_both_hashes() {
    let host = test_host().await;
    let old = host
        .plugins
        .current(World::Takedown)
        .plugin()
        .info()
        .hash
        .clone();
    let report = host
        .plugins
        .swap(
            World::Takedown,
            rebuilt(World::Takedown),
            "test".into(),
            "alice",
        )
        .await
        .unwrap();
    assert!(report.changed);
    assert_eq!(report.previous.hash, old);
    assert_eq!(report.authority_generation, 1);
    let new = host
        .plugins
        .current(World::Takedown)
        .plugin()
        .info()
        .hash
        .clone();
    assert_eq!(report.current.hash, new);
    assert_ne!(new, old);
    let events = swap_events(host.kv.as_ref()).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].actor, "operator:alice");
    assert!(events[0].targets.contains(&format!("from:{old}")));
    assert!(events[0].targets.contains(&format!("to:{new}")));
    assert!(
        host.metrics
            .render()
            .contains("custodian_plugin_swaps_total{world=\"takedown\",result=\"completed\"} 1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_in_the_same_bytes_changes_nothing_and_leaves_the_fence_alone() {
    let host = test_host().await;
    let bytes = crate::bundled::plugin(World::Retention).unwrap().to_vec();
    let report = host
        .plugins
        .swap(World::Retention, bytes, "test".into(), "alice")
        .await
        .unwrap();
    assert!(!report.changed);
    assert_eq!(report.authority_generation, 0);
    assert!(swap_events(host.kv.as_ref()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_another_world_is_refused_and_the_old_one_keeps_serving() {
    let host = test_host().await;
    let old = host
        .plugins
        .current(World::Purge)
        .plugin()
        .info()
        .hash
        .clone();
    let wrong = crate::bundled::plugin(World::Archive).unwrap().to_vec();
    let error = host
        .plugins
        .swap(World::Purge, wrong, "archive.wasm".into(), "alice")
        .await
        .unwrap_err();
    let SwapError::Refused(reason) = error else {
        panic!("refused, not {error}")
    };
    assert!(reason.contains("is not a purge plugin"), "{reason}");
    assert_eq!(host.plugins.current(World::Purge).plugin().info().hash, old);
    assert!(swap_events(host.kv.as_ref()).await.is_empty());
    assert!(
        host.metrics
            .render()
            .contains("custodian_plugin_swaps_total{world=\"purge\",result=\"refused\"} 1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_oracle_keeps_answering_across_a_retention_swap() {
    let host = test_host().await;
    let item = Item {
        created_ms: 1_000,
        noncurrent_since_ms: None,
        hold: false,
        stage: Stage::Retaining,
    };
    let oracle = host.plugins.retention();
    let before = tokio::task::block_in_place(|| oracle.assess(item, 2_000)).unwrap();
    host.plugins
        .swap(
            World::Retention,
            rebuilt(World::Retention),
            "test".into(),
            "alice",
        )
        .await
        .unwrap();
    // The same oracle handle now reaches the new build, which answers
    // as the old one did (it is the same policy).
    let after = tokio::task::block_in_place(|| oracle.assess(item, 2_000)).unwrap();
    assert_eq!(before, after);
    assert_eq!(
        before.retain_until_ms,
        1_000 + crate::serve::test_host::RETENTION_MS
    );
}

/// Files `request` as an operator action planned by `policy` under `guard`.
async fn file(
    host: &crate::serve::Host,
    (policy, guard): (Arc<TakedownPolicy>, Vec<Precondition>),
    request: crate::policy::takedown::Request,
) -> Result<(), crate::policy::requests::RequestError> {
    use crate::policy::requests::{self, Action};
    let call = host.plugins.takedown_call(&policy);
    let io = host.plugins.services().io.clone();
    let kv = host.kv.clone();
    let now_ms = request.created_ms;
    tokio::task::spawn_blocking(move || {
        let action = Action {
            operator: "alice",
            now_ms,
            guard: &guard,
        };
        requests::create(&policy, call, &io, kv.as_ref(), &request, action)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_action_planned_before_a_swap_cannot_commit_after_it() {
    use crate::content::RepoName;
    use crate::content::push::push_bytes;
    use crate::policy::requests::RequestError;
    use crate::policy::takedown::Request;

    let host = test_host().await;
    let repo = RepoName::parse("acme/site").unwrap();
    let entry = push_bytes(
        host.kv.as_ref(),
        host.stores["serving"].as_ref(),
        &repo,
        "a.txt",
        bytes::Bytes::from_static(b"planned before the swap"),
    )
    .await
    .unwrap();
    let planned = host.plugins.takedown_for_action().await.unwrap();
    host.plugins
        .swap(
            World::Takedown,
            rebuilt(World::Takedown),
            "test".into(),
            "alice",
        )
        .await
        .unwrap();

    let request = Request::new(
        repo.to_string(),
        host.clock.now_ms(),
        vec![entry.id.0],
        None,
    );
    let answer = file(&host, planned, request.clone()).await;
    assert!(matches!(answer, Err(RequestError::Swapped)), "{answer:?}");
    assert!(
        crate::timers::get(host.kv.as_ref(), "takedown", &request.id)
            .await
            .unwrap()
            .is_none(),
        "nothing of the stale action committed"
    );

    // Planned afresh, by the new plugin, it commits.
    let planned = host.plugins.takedown_for_action().await.unwrap();
    file(&host, planned, request).await.unwrap();
}
