use std::sync::Arc;
use std::time::Duration;

use custodian_base::clock::FixedClock;
use custodian_kv::memory::MemoryKv;

use super::*;

fn kv() -> Arc<dyn Kv> {
    Arc::new(MemoryKv::new(Arc::new(FixedClock::new(1_000))))
}

fn principals(kv: &Arc<dyn Kv>, ttl: Duration) -> Principals {
    Principals::new(kv.clone(), Arc::new(FixedClock::new(1_000)), ttl)
}

fn roles(list: &[&str]) -> Vec<String> {
    list.iter().map(|r| (*r).to_owned()).collect()
}

async fn who(p: &Principals, token: &str) -> Option<String> {
    p.authenticate(token.as_bytes())
        .await
        .unwrap()
        .map(|p| p.name)
}

#[tokio::test]
async fn a_created_principal_authenticates_with_its_token_and_carries_its_roles() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    let new = p
        .create("alice", roles(&["reader:store/serving"]))
        .await
        .unwrap();
    let principal = p
        .authenticate(new.issued.token.as_bytes())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(principal.name, "alice");
    assert_eq!(principal.roles, roles(&["reader:store/serving"]));
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].credentials, vec![new.issued.id.clone()]);
    assert!(
        !serde_json::to_string(&listed)
            .unwrap()
            .contains(&new.issued.token[22..])
    );
}

#[tokio::test]
async fn a_wrong_secret_an_unknown_id_and_garbage_authenticate_nobody() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    let new = p.create("alice", Vec::new()).await.unwrap();
    let mut forged = new.issued.token.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'a' { b'b' } else { b'a' };
    assert_eq!(p.authenticate(&forged).await.unwrap(), None);
    let other = credential::issue().unwrap();
    assert_eq!(who(&p, &other.token).await, None);
    for garbage in [&b""[..], b"Bearer", &[0xff; 64], &[b'x'; 10_000]] {
        assert_eq!(p.authenticate(garbage).await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_revocation_through_this_process_takes_effect_at_once() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(3600));
    let new = p.create("alice", Vec::new()).await.unwrap();
    assert_eq!(who(&p, &new.issued.token).await.as_deref(), Some("alice"));
    p.revoke("alice", &new.issued.id).await.unwrap();
    assert_eq!(who(&p, &new.issued.token).await, None);
}

#[tokio::test]
async fn another_host_sees_a_revocation_once_its_cache_bound_has_passed() {
    let kv = kv();
    let here = principals(&kv, Duration::from_secs(1));
    let there = principals(&kv, Duration::from_millis(200));
    let new = here.create("alice", Vec::new()).await.unwrap();
    assert_eq!(
        who(&there, &new.issued.token).await.as_deref(),
        Some("alice")
    );
    here.revoke("alice", &new.issued.id).await.unwrap();
    // Still cached there: the bound is the point of the cache.
    assert_eq!(
        who(&there, &new.issued.token).await.as_deref(),
        Some("alice")
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(who(&there, &new.issued.token).await, None);
}

#[tokio::test]
async fn rotation_replaces_every_credential_with_one_new_one() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    let first = p.create("alice", Vec::new()).await.unwrap();
    let second = p.issue("alice").await.unwrap();
    let rotated = p.rotate("alice").await.unwrap();
    assert_eq!(who(&p, &first.issued.token).await, None);
    assert_eq!(who(&p, &second.issued.token).await, None);
    assert_eq!(
        who(&p, &rotated.issued.token).await.as_deref(),
        Some("alice")
    );
    assert_eq!(
        p.get("alice").await.unwrap().credentials,
        vec![rotated.issued.id]
    );
}

#[tokio::test]
async fn deleting_a_principal_deletes_its_credentials_and_roles_change_everywhere() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    let new = p.create("alice", roles(&["reader"])).await.unwrap();
    p.set_roles("alice", roles(&["writer"])).await.unwrap();
    let principal = p
        .authenticate(new.issued.token.as_bytes())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(principal.roles, roles(&["writer"]));
    p.delete("alice").await.unwrap();
    assert_eq!(who(&p, &new.issued.token).await, None);
    let rows = kv.scan(&partition(), b"", None, None, 100).await.unwrap();
    assert!(rows.entries.is_empty(), "{rows:?}");
    assert!(matches!(
        p.get("alice").await,
        Err(PrincipalError::NotFound(_))
    ));
}

#[tokio::test]
async fn the_bootstrap_token_belongs_to_an_admin_and_registering_it_twice_changes_nothing() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    p.register_bootstrap("0123456789abcdef0123").await.unwrap();
    p.register_bootstrap("0123456789abcdef0123").await.unwrap();
    let admin = p
        .authenticate(b"0123456789abcdef0123")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(admin.name, BOOTSTRAP_PRINCIPAL);
    assert_eq!(admin.roles, roles(&[ADMIN_ROLE]));
    assert_eq!(p.get("admin").await.unwrap().credentials.len(), 1);
    // Another host's token joins the same principal.
    p.register_bootstrap("another-host-token-0123")
        .await
        .unwrap();
    assert_eq!(p.get("admin").await.unwrap().credentials.len(), 2);
    assert_eq!(
        who(&p, "0123456789abcdef0123").await.as_deref(),
        Some("admin")
    );
}

#[tokio::test]
async fn names_roles_duplicates_and_credential_counts_are_bounded() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    for bad in ["", "Alice", "a/b", &"a".repeat(65)] {
        assert!(
            matches!(
                p.create(bad, Vec::new()).await,
                Err(PrincipalError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    for bad in [
        roles(&[""]),
        roles(&["has space"]),
        vec!["r".repeat(129)],
        vec!["r".into(); 33],
    ] {
        assert!(matches!(
            p.create("bob", bad).await,
            Err(PrincipalError::Invalid(_))
        ));
    }
    p.create("bob", Vec::new()).await.unwrap();
    assert!(matches!(
        p.create("bob", Vec::new()).await,
        Err(PrincipalError::Exists(_))
    ));
    for _ in 1..MAX_CREDENTIALS {
        p.issue("bob").await.unwrap();
    }
    assert!(matches!(
        p.issue("bob").await,
        Err(PrincipalError::Invalid(_))
    ));
    assert!(matches!(
        p.revoke("bob", "nothex").await,
        Err(PrincipalError::Invalid(_))
    ));
    assert!(matches!(
        p.revoke("bob", "0000000000000000").await,
        Err(PrincipalError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_corrupt_row_is_corrupt_not_a_panic_or_a_login() {
    let kv = kv();
    let p = principals(&kv, Duration::ZERO);
    let new = p.create("alice", Vec::new()).await.unwrap();
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put(principal_key("alice"), b"{not json".to_vec())],
    };
    kv.apply(&batch).await.unwrap();
    assert!(matches!(
        p.authenticate(new.issued.token.as_bytes()).await,
        Err(PrincipalError::Corrupt(_))
    ));
}

#[tokio::test]
async fn an_s3_key_finds_its_secret_and_principal_and_is_no_bearer_token() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    let new = p.create("alice", roles(&["writer"])).await.unwrap();
    let key = p.issue_s3_key("alice").await.unwrap();
    let found = p.s3_key(&key.issued.access_key_id).await.unwrap().unwrap();
    assert_eq!(&*found.secret, key.issued.secret.as_str());
    assert_eq!(found.principal.name, "alice");
    assert_eq!(found.principal.roles, roles(&["writer"]));
    // Neither kind of credential passes as the other.
    assert_eq!(who(&p, &key.issued.secret).await, None);
    assert_eq!(who(&p, &key.issued.access_key_id).await, None);
    let token_id = credential::access_key_id(&parse_credential_id(&new.issued.id).unwrap());
    assert!(p.s3_key(&token_id).await.unwrap().is_none());
    assert!(p.s3_key("AKIAIOSFODNN7EXAMPLE").await.unwrap().is_none());
    // It is listed as a credential and never shows its secret.
    let view = p.get("alice").await.unwrap();
    assert!(view.credentials.contains(&key.issued.id));
    assert!(
        !serde_json::to_string(&view)
            .unwrap()
            .contains(&key.issued.secret)
    );
}

#[tokio::test]
async fn a_revoked_or_rotated_away_s3_key_finds_nothing() {
    let kv = kv();
    let p = principals(&kv, Duration::from_secs(1));
    p.create("alice", Vec::new()).await.unwrap();
    let first = p.issue_s3_key("alice").await.unwrap();
    let second = p.issue_s3_key("alice").await.unwrap();
    p.revoke("alice", &first.issued.id).await.unwrap();
    assert!(
        p.s3_key(&first.issued.access_key_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        p.s3_key(&second.issued.access_key_id)
            .await
            .unwrap()
            .is_some()
    );
    p.rotate("alice").await.unwrap();
    assert!(
        p.s3_key(&second.issued.access_key_id)
            .await
            .unwrap()
            .is_none()
    );
}
