//! `custodian repo push` and `repo ls` with the real binary on the
//! embedded default: a data directory with its KV and `serving` store.

use std::path::Path;

use serde_json::Value;

use crate::support::{outcome, run};

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One JSON object a line.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The entries as (path, kind, size).
fn summary(entries: &[Value]) -> Vec<(String, String, u64)> {
    entries
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
                e["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn repo_push_enters_files_and_directories_and_repo_ls_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("docs/sub")).unwrap();
    std::fs::write(tree.join("readme.txt"), "hello").unwrap();
    std::fs::write(tree.join("docs/a.txt"), "a").unwrap();
    std::fs::write(tree.join("docs/sub/b.txt"), "bb").unwrap();
    let big: Vec<u8> = (0..(4 << 20) + 1).map(|i: u32| (i % 253) as u8).collect();
    std::fs::write(tree.join("big.bin"), &big).unwrap();

    let (code, stdout, stderr) = outcome(&run(&[
        "repo",
        "push",
        "acme/site",
        path(&tree.join("readme.txt")),
        path(&tree.join("docs")),
        path(&tree.join("big.bin")),
        "--data",
        path(&data),
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    let pushed = json_lines(&stdout);
    assert_eq!(
        summary(&pushed),
        [
            ("big.bin".into(), "manifest".into(), (4 << 20) + 1),
            ("docs/".into(), "pack".into(), 14 + 2 * 33),
            ("docs/a.txt".into(), "blob".into(), 1),
            ("docs/sub/".into(), "pack".into(), 14 + 33),
            ("docs/sub/b.txt".into(), "blob".into(), 2),
            ("readme.txt".into(), "blob".into(), 5),
        ]
    );
    let readme = &pushed[5]["id"];
    assert_eq!(
        readme.as_str().unwrap(),
        blake3::hash(b"hello").to_hex().as_str()
    );

    let (code, stdout, stderr) = outcome(&run(&[
        "repo",
        "ls",
        "acme/site",
        "--data",
        path(&data),
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json_lines(&stdout), pushed);

    // The bytes are in DATA/serving under content/<id>: the 5 small
    // objects, two chunks and the manifest.
    let store = format!("file://{}", path(&data.join("serving")));
    let (code, stdout, stderr) = outcome(&run(&[
        "object", "ls", "--store", &store, "content/", "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let keys: Vec<String> = serde_json::from_str::<Vec<Value>>(&stdout)
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 8, "{keys:?}");
    for entry in &pushed {
        let key = format!("content/{}", entry["id"].as_str().unwrap());
        assert!(keys.contains(&key), "{key}");
    }

    // Text output: ID  KIND  SIZE  PATH, in path order.
    let (code, stdout, stderr) = outcome(&run(&["repo", "ls", "acme/site", "--data", path(&data)]));
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6);
    let fields: Vec<&str> = lines[5].split_whitespace().collect();
    assert_eq!(
        fields,
        [readme.as_str().unwrap(), "blob", "5", "readme.txt"]
    );

    // Pushing the same file to another repository stores nothing new.
    let (code, stdout, stderr) = outcome(&run(&[
        "repo",
        "push",
        "other/copy",
        path(&tree.join("readme.txt")),
        "--data",
        path(&data),
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json_lines(&stdout)[0]["id"], *readme);
    let (_, stdout, _) = outcome(&run(&[
        "object", "ls", "--store", &store, "content/", "--json",
    ]));
    assert_eq!(
        serde_json::from_str::<Vec<Value>>(&stdout).unwrap().len(),
        8
    );
}

#[test]
fn repo_commands_refuse_a_bad_repository_name_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "x").unwrap();
    for args in [
        vec![
            "repo",
            "push",
            "NoSlash",
            path(&file),
            "--data",
            path(&data),
        ],
        vec!["repo", "ls", "acme/.hidden", "--data", path(&data)],
    ] {
        let (code, stdout, stderr) = outcome(&run(&args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stdout, "");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
    let (code, _, stderr) = outcome(&run(&[
        "repo",
        "push",
        "acme/site",
        path(&dir.path().join("missing")),
        "--data",
        path(&data),
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
}

#[test]
fn repo_get_writes_a_pushed_file_back_byte_for_byte_and_refuses_what_is_not_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("docs")).unwrap();
    std::fs::write(tree.join("docs/a.txt"), "a small file").unwrap();
    // Over two chunks: read back from a manifest, in order.
    let big: Vec<u8> = (0..(8 << 20) + 77).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(tree.join("big.bin"), &big).unwrap();
    let pushed = run(&[
        "repo",
        "push",
        "acme/site",
        path(&tree.join("docs")),
        path(&tree.join("big.bin")),
        "--data",
        path(&data),
    ]);
    assert_eq!(outcome(&pushed).0, 0, "{}", outcome(&pushed).2);

    let out = dir.path().join("out/big.bin");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let (code, _, stderr) = outcome(&run(&[
        "repo",
        "get",
        "acme/site",
        "big.bin",
        "-o",
        path(&out),
        "--data",
        path(&data),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        std::fs::read(&out).unwrap() == big,
        "the file read back differs"
    );

    let (code, stdout, stderr) = outcome(&run(&[
        "repo",
        "get",
        "acme/site",
        "docs/a.txt",
        "--data",
        path(&data),
    ]));
    assert_eq!((code, stdout.as_str()), (0, "a small file"), "{stderr}");

    // No such file: exit 1 and nothing written; a directory: exit 2.
    let missing = dir.path().join("out/missing");
    let (code, _, stderr) = outcome(&run(&[
        "repo",
        "get",
        "acme/site",
        "docs/none.txt",
        "-o",
        path(&missing),
        "--data",
        path(&data),
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no file at \"docs/none.txt\""), "{stderr}");
    assert!(!missing.exists());
    assert_eq!(
        std::fs::read_dir(out.parent().unwrap()).unwrap().count(),
        1,
        "no temporary file is left behind"
    );
    let (code, _, stderr) = outcome(&run(&[
        "repo",
        "get",
        "acme/site",
        "docs/",
        "--data",
        path(&data),
    ]));
    assert_eq!(code, 2, "{stderr}");
}
