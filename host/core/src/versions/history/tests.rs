//! Reading pointer files from a real git repository's history.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn pointer(version: &str) -> String {
    format!(
        "outs:\n- md5: 900150983cd24fb0d6963f7d28e17f72\n  size: 3\n  hash: md5\n  path: a.csv\n  cloud:\n    r:\n      etag: e\n      version_id: {version}\n"
    )
}

/// A repository with three commits: `one` pins a.csv at v1 (and
/// sub/b.dvc), `two` at v2, `three` only touches an unrelated file.
fn repository() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path();
    git(top, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("a.csv.dvc"), pointer("v1")).unwrap();
    std::fs::write(
        top.join("sub/b.dvc"),
        pointer("w1").replace("a.csv", "b.bin"),
    )
    .unwrap();
    git(top, &["add", "-A"]);
    git(top, &["commit", "-qm", "one"]);
    let one = git(top, &["rev-parse", "HEAD"]);
    std::fs::write(top.join("a.csv.dvc"), pointer("v2")).unwrap();
    git(top, &["commit", "-qam", "two"]);
    let two = git(top, &["rev-parse", "HEAD"]);
    std::fs::write(top.join("README"), "x").unwrap();
    git(top, &["add", "-A"]);
    git(top, &["commit", "-qm", "three"]);
    let three = git(top, &["rev-parse", "HEAD"]);
    (dir, vec![three, two, one])
}

fn versions(read: &[AtRevision]) -> Vec<(String, String, String)> {
    read.iter()
        .flat_map(|at| {
            at.pointers.pins.iter().map(|p| {
                (
                    short(&at.commit).to_owned(),
                    p.key.clone(),
                    p.version_id.clone(),
                )
            })
        })
        .collect()
}

#[test]
fn every_revision_yields_the_pins_its_pointer_files_held_named_by_commit_and_path() {
    let (dir, commits) = repository();
    let repo = Repository::discover(dir.path()).unwrap();
    let all = repo.commits(&Revisions::All, MAX_REVISIONS).unwrap();
    assert_eq!(all, commits);
    let read = repo.read(&all, &[], &ManifestOptions::default()).unwrap();
    let found = versions(&read);
    let (three, two, one) = (short(&commits[0]), short(&commits[1]), short(&commits[2]));
    assert!(
        found.contains(&(one.into(), "a.csv".into(), "v1".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&(two.into(), "a.csv".into(), "v2".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&(three.into(), "a.csv".into(), "v2".into())),
        "{found:?}"
    );
    // Keys are relative to the repository's top level by default.
    assert!(
        found.contains(&(one.into(), "sub/b.bin".into(), "w1".into())),
        "{found:?}"
    );
    let named = &read
        .iter()
        .find(|at| at.commit == commits[2])
        .unwrap()
        .pointers
        .pins[0];
    assert_eq!(named.manifest, format!("{one}:a.csv.dvc"));
}

#[test]
fn named_revisions_and_ranges_select_their_commits_only() {
    let (dir, commits) = repository();
    let repo = Repository::discover(&dir.path().join("sub")).unwrap();
    let named = repo
        .commits(&Revisions::Named(vec!["HEAD~2".into(), "main".into()]), 10)
        .unwrap();
    assert_eq!(named, [commits[2].clone(), commits[0].clone()]);
    let range = repo
        .commits(&Revisions::Ranges(vec!["HEAD~2..HEAD".into()]), 10)
        .unwrap();
    assert_eq!(range, commits[..2]);
    // Paths are relative to the current directory, as git takes them.
    let read = repo
        .read(
            &named[..1],
            &[PathBuf::from("b.dvc")],
            &ManifestOptions::default(),
        )
        .unwrap();
    assert_eq!(versions(&read)[0].1, "sub/b.bin");
}

#[test]
fn a_bad_revision_an_option_in_disguise_or_too_many_commits_is_refused() {
    let (dir, _) = repository();
    let repo = Repository::discover(dir.path()).unwrap();
    for bad in ["no-such-branch", "--output=/tmp/x", "HEAD:a.csv.dvc"] {
        let error = repo
            .commits(&Revisions::Named(vec![bad.into()]), 10)
            .unwrap_err();
        assert!(
            error.to_string().contains("is not a commit"),
            "{bad}: {error}"
        );
    }
    let error = repo.commits(&Revisions::All, 2).unwrap_err();
    assert!(error.to_string().contains("more than the 2"), "{error}");
    let error = repo
        .commits(&Revisions::Ranges(vec!["nope..HEAD".into()]), 10)
        .unwrap_err();
    assert_eq!(error.kind(), "git");
}

#[test]
fn a_named_pointer_that_is_a_symlink_or_absent_is_refused() {
    let (dir, _) = repository();
    let top = dir.path();
    std::os::unix::fs::symlink("/etc/passwd", top.join("link.dvc")).unwrap();
    git(top, &["add", "-A"]);
    git(top, &["commit", "-qm", "link"]);
    let repo = Repository::discover(top).unwrap();
    let head = repo
        .commits(&Revisions::Named(vec!["HEAD".into()]), 10)
        .unwrap();
    let error = repo
        .read(
            &head,
            &[PathBuf::from("link.dvc")],
            &ManifestOptions::default(),
        )
        .unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    // Listing every pointer skips the symlink rather than follow it.
    let read = repo.read(&head, &[], &ManifestOptions::default()).unwrap();
    assert!(read.iter().all(|at| at.path != "link.dvc"));
    let error = repo
        .read(
            &head,
            &[PathBuf::from("absent.dvc")],
            &ManifestOptions::default(),
        )
        .unwrap_err();
    assert!(error.to_string().contains("every pointer file"), "{error}");
}

#[test]
fn a_root_inside_the_repository_makes_keys_relative_to_it_and_skips_what_is_outside() {
    let (dir, commits) = repository();
    let repo = Repository::discover(dir.path()).unwrap();
    let options = ManifestOptions {
        root: Some(dir.path().join("sub")),
        remote: None,
    };
    let read = repo.read(&commits[..1], &[], &options).unwrap();
    assert_eq!(
        versions(&read),
        [(short(&commits[0]).into(), "b.bin".into(), "w1".into())]
    );
    let outside = ManifestOptions {
        root: Some(std::env::temp_dir()),
        remote: None,
    };
    assert!(repo.read(&commits[..1], &[], &outside).is_err());
}

#[test]
fn a_directory_that_is_not_a_repository_is_a_git_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = Repository::discover(dir.path()).unwrap_err();
    assert_eq!(error.kind(), "git", "{error}");
}
