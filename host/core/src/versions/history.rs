//! Pin manifests read from a git repository's history.
//!
//! DVC keeps its pointer files in git, so the versions a project ever
//! pinned are the pointer files of every commit. This module reads them
//! with the `git` CLI (the repository's own git, whatever its format or
//! extensions), never touching the working tree:
//!
//! - commits are chosen as [`Revisions`] says: named revisions, `git
//!   rev-list` ranges (`v1..main`), or every commit reachable from any ref;
//!   at most [`MAX_REVISIONS`] of them, else the run is refused (a silent
//!   cut would make a purge list miss pinned versions);
//! - each commit's pointer files are listed with `git ls-tree`: the paths
//!   given (relative to the current directory, as git takes them), or
//!   every `*.dvc` and `dvc.lock` file outside `.dvc/`. A given path that is not a
//!   regular file at a commit (a symlink, a submodule) is refused;
//! - each distinct file (path and blob) is read once (`git cat-file`,
//!   at most [`MAX_MANIFEST_BYTES`]) and parsed once: pointers carried
//!   unchanged through many commits cost one parse.
//!
//! Keys are relative to the `root` of [`ManifestOptions`], which here
//! defaults to the repository's top level (the layout DVC gives a
//! version-aware remote); a pointer file outside the root is refused when
//! named, skipped when found by listing. Each item names its manifest as
//! `COMMIT:PATH` (the commit abbreviated to 12 digits), git's own syntax
//! for a file at a revision.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::dvc::{Pointers, is_dvc_name};
use super::error::VersionsError;
use super::manifest::parse_manifest;
use super::pins::{MAX_MANIFEST_BYTES, ManifestOptions};

/// Most commits one run reads: each costs a `git ls-tree`, and the
/// candidates of all of them are held in memory.
pub const MAX_REVISIONS: usize = 10_000;

/// Which commits to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revisions {
    /// These revisions (anything `git rev-parse` resolves to a commit).
    Named(Vec<String>),
    /// The commits of these `git rev-list` ranges (`A..B`, `^A B`).
    Ranges(Vec<String>),
    /// Every commit reachable from any ref (`git rev-list --all`).
    All,
}

/// A repository, and the directory its path arguments are relative to.
#[derive(Debug, Clone)]
pub struct Repository {
    top: PathBuf,
    cwd: PathBuf,
}

/// A pointer file at one commit, and what it names.
#[derive(Debug, Clone)]
pub struct AtRevision {
    /// The full commit id.
    pub commit: String,
    /// The file's path in the repository.
    pub path: String,
    /// What it names (each item's `manifest` is `COMMIT:PATH`).
    pub pointers: Pointers,
}

fn git_error(what: impl Into<String>, reason: impl Into<String>) -> VersionsError {
    VersionsError::Git {
        what: what.into(),
        reason: reason.into(),
    }
}

impl Repository {
    /// The repository holding `dir`.
    ///
    /// # Errors
    /// [`VersionsError::Git`] when `dir` is not in a git work tree or git
    /// cannot run.
    pub fn discover(dir: &Path) -> Result<Self, VersionsError> {
        let cwd = std::fs::canonicalize(dir).map_err(|e| VersionsError::io(dir, e))?;
        let probe = Self {
            top: cwd.clone(),
            cwd: cwd.clone(),
        };
        let top = probe.git(&["rev-parse", "--show-toplevel"], "the repository")?;
        let top = String::from_utf8(top)
            .map_err(|_| git_error("the repository", "its path is not UTF-8"))?;
        Ok(Self {
            top: PathBuf::from(top.trim_end_matches('\n')),
            cwd,
        })
    }

    /// The repository's top-level directory.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// Runs git in the current directory; its stdout.
    fn git(&self, args: &[&str], what: &str) -> Result<Vec<u8>, VersionsError> {
        let output = Command::new("git")
            .arg("-C")
            .arg(&self.cwd)
            .args(args)
            // The user's pager, editor or replace refs must not change
            // what is read.
            .env("GIT_PAGER", "cat")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .output()
            .map_err(|e| git_error(what, format!("cannot run git: {e}")))?;
        if !output.status.success() {
            return Err(git_error(
                what,
                String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            ));
        }
        Ok(output.stdout)
    }

    /// The commits `revisions` selects, newest first where git orders
    /// them, each once.
    ///
    /// # Errors
    /// [`VersionsError::Git`] for a revision git does not resolve, or more
    /// than `limit` commits.
    pub fn commits(
        &self,
        revisions: &Revisions,
        limit: usize,
    ) -> Result<Vec<String>, VersionsError> {
        let mut listed = Vec::new();
        match revisions {
            Revisions::Named(names) => {
                for name in names {
                    // `--end-of-options`: a revision named `--output=x`
                    // is a revision, not an option.
                    let spec = format!("{name}^{{commit}}");
                    let id = self
                        .git(
                            &[
                                "rev-parse",
                                "--verify",
                                "--quiet",
                                "--end-of-options",
                                &spec,
                            ],
                            &format!("revision {name:?}"),
                        )
                        .map_err(|_| git_error(format!("revision {name:?}"), "is not a commit"))?;
                    listed.push(String::from_utf8_lossy(&id).trim().to_owned());
                }
            }
            Revisions::Ranges(ranges) => {
                let mut args = vec!["rev-list", "--end-of-options"];
                args.extend(ranges.iter().map(String::as_str));
                let what = format!("revisions {}", ranges.join(" "));
                listed = lines(&self.git(&args, &what)?);
            }
            Revisions::All => {
                listed = lines(&self.git(&["rev-list", "--all"], "every revision")?);
            }
        }
        let mut seen = BTreeSet::new();
        listed.retain(|id| seen.insert(id.clone()));
        if listed.len() > limit {
            return Err(git_error(
                "the revisions",
                format!(
                    "{} commits, more than the {limit} read at once: name a narrower range",
                    listed.len()
                ),
            ));
        }
        Ok(listed)
    }

    /// The pointer files of `commit`: `(path, blob)` of the regular files
    /// at `paths` (relative to the current directory), or of every
    /// `*.dvc` and `dvc.lock` file when `paths` is empty.
    ///
    /// # Errors
    /// [`VersionsError::Git`] when a named path is not a regular file.
    pub fn pointer_files(
        &self,
        commit: &str,
        paths: &[PathBuf],
    ) -> Result<Vec<(String, String)>, VersionsError> {
        let mut args = vec![
            "ls-tree",
            "-r",
            "-z",
            "--full-name",
            "--end-of-options",
            commit,
        ];
        let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        if !named.is_empty() {
            args.push("--");
            args.extend(named.iter().map(String::as_str));
        }
        let listing = self.git(&args, &format!("the tree of {}", short(commit)))?;
        let mut files = Vec::new();
        for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let entry = String::from_utf8_lossy(entry);
            let Some((meta, path)) = entry.split_once('\t') else {
                continue;
            };
            let fields: Vec<&str> = meta.split(' ').collect();
            let regular = matches!(fields.as_slice(), ["100644" | "100755", "blob", _]);
            if named.is_empty() {
                if regular && is_dvc_name(path) && !path.starts_with(".dvc/") {
                    files.push((path.to_owned(), fields[2].to_owned()));
                }
            } else if regular {
                files.push((path.to_owned(), fields[2].to_owned()));
            } else {
                return Err(git_error(
                    format!("{}:{path}", short(commit)),
                    "is not a regular file",
                ));
            }
        }
        Ok(files)
    }

    /// The contents of `blob`, at most [`MAX_MANIFEST_BYTES`].
    fn blob(&self, blob: &str, what: &str) -> Result<String, VersionsError> {
        let size = self.git(&["cat-file", "-s", blob], what)?;
        let size: u64 = String::from_utf8_lossy(&size)
            .trim()
            .parse()
            .unwrap_or(u64::MAX);
        if size > MAX_MANIFEST_BYTES {
            return Err(VersionsError::Manifest {
                path: what.to_owned(),
                reason: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
            });
        }
        let bytes = self.git(&["cat-file", "blob", blob], what)?;
        String::from_utf8(bytes).map_err(|_| VersionsError::Manifest {
            path: what.to_owned(),
            reason: "is not UTF-8".into(),
        })
    }

    /// The key prefix of a pointer file at `path` (repository-relative):
    /// its directory relative to `root` (repository-relative, `""` for
    /// the top), or `None` when it lies outside.
    fn key_dir(path: &str, root: &str) -> Option<String> {
        let dir = match path.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/"),
            None => String::new(),
        };
        if root.is_empty() {
            return Some(dir);
        }
        dir.strip_prefix(&format!("{root}/")).map(str::to_owned)
    }

    /// `options.root` relative to the top level (`""` for the top).
    fn root(&self, options: &ManifestOptions) -> Result<String, VersionsError> {
        let Some(root) = &options.root else {
            return Ok(String::new());
        };
        let real = std::fs::canonicalize(root).map_err(|e| VersionsError::io(root, e))?;
        let relative = real.strip_prefix(&self.top).map_err(|_| {
            git_error(
                format!("the root {}", root.display()),
                format!("is not inside the repository {}", self.top.display()),
            )
        })?;
        Ok(relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"))
    }

    /// Reads the pointer files of every commit (see the module doc).
    ///
    /// # Errors
    /// [`VersionsError::Git`]; [`VersionsError::Manifest`] and the other
    /// parse errors of a pointer file, naming it as `COMMIT:PATH`.
    pub fn read(
        &self,
        commits: &[String],
        paths: &[PathBuf],
        options: &ManifestOptions,
    ) -> Result<Vec<AtRevision>, VersionsError> {
        self.read_observed(commits, paths, options, &|_| {})
    }

    /// [`Self::read`], calling `progress(commits done)` after each commit,
    /// so a long history can be watched.
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn read_observed(
        &self,
        commits: &[String],
        paths: &[PathBuf],
        options: &ManifestOptions,
        progress: &dyn Fn(usize),
    ) -> Result<Vec<AtRevision>, VersionsError> {
        let root = self.root(options)?;
        let mut parsed: HashMap<(String, String), Pointers> = HashMap::new();
        let mut found_any = false;
        let mut read = Vec::new();
        for (done, commit) in commits.iter().enumerate() {
            progress(done);
            let files = self.pointer_files(commit, paths)?;
            if !paths.is_empty() && commits.len() == 1 && files.len() < paths.len() {
                return Err(git_error(
                    short(commit),
                    "does not have every pointer file named",
                ));
            }
            for (path, blob) in files {
                found_any = true;
                let name = format!("{}:{path}", short(commit));
                let Some(key_dir) = Self::key_dir(&path, &root) else {
                    if paths.is_empty() {
                        continue;
                    }
                    return Err(git_error(name, format!("is outside the root {root:?}")));
                };
                let id = (path.clone(), blob.clone());
                let pointers = match parsed.get(&id) {
                    Some(pointers) => pointers.clone(),
                    None => {
                        let text = self.blob(&blob, &name)?;
                        let pointers =
                            parse_manifest(&text, &path, || Ok(key_dir), options.remote.as_deref())
                                .map_err(|e| rename(e, &name))?;
                        parsed.insert(id, pointers.clone());
                        pointers
                    }
                };
                read.push(AtRevision {
                    commit: commit.clone(),
                    path,
                    pointers: relabel(pointers, &name),
                });
            }
        }
        if !found_any && !paths.is_empty() {
            return Err(git_error(
                "the pointer files named",
                "are in none of the revisions read",
            ));
        }
        Ok(read)
    }
}

/// A commit id abbreviated as reports show it.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

fn lines(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A parse error of a pointer file, naming it as `name` instead.
fn rename(error: VersionsError, name: &str) -> VersionsError {
    match error {
        VersionsError::Manifest { reason, .. } => VersionsError::Manifest {
            path: name.to_owned(),
            reason,
        },
        VersionsError::NoExactVersion { key, .. } => VersionsError::NoExactVersion {
            path: name.to_owned(),
            key,
        },
        other => other,
    }
}

/// `pointers` with every item's manifest named `name`.
fn relabel(mut pointers: Pointers, name: &str) -> Pointers {
    for pin in &mut pointers.pins {
        name.clone_into(&mut pin.manifest);
    }
    for output in &mut pointers.addressed {
        name.clone_into(&mut output.manifest);
    }
    for listing in &mut pointers.listings {
        name.clone_into(&mut listing.manifest);
    }
    pointers
}

#[cfg(test)]
mod tests;
