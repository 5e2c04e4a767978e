//! Where pin manifests come from, shared by `versions verify|fetch` and
//! `purge list`: files in the working tree, or pointer files read from
//! git history.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use custodian::versions::dvc::Pointers;
use custodian::versions::history::{AtRevision, MAX_REVISIONS, Repository, Revisions};
use custodian::versions::manifest::read_manifest;
use custodian::versions::pins::ManifestOptions;
use indicatif::{ProgressBar, ProgressStyle};

use super::Failure;

/// The manifests to read and how.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Pin manifests (repeatable). `*.dvc` files are DVC pointer files
    /// (and `dvc.lock` files list each stage's `outs:` alike): each
    /// `outs:` row pins its `path` at the version-aware remote's
    /// `cloud: {REMOTE: {version_id, etag}}`, with its `md5` and `size`
    /// (`hash: md5`; rows without `hash` are DVC 2's md5-dos2unix). A
    /// directory output pins each of its `files:` at
    /// PATH/RELPATH, and its DVC listing (`.dir`) is rebuilt. A row with
    /// no `cloud:` entry is on a content-addressed remote: its bytes are
    /// at the remote's cache layout (files/md5/ab/cdef…, or ab/cdef… for
    /// DVC 2), read at the key's current version; a directory there is
    /// its `.dir` object, which lists its files. Other files are
    /// Custodian's JSON:
    ///   {"pins": [{"key": "data/a.csv", "version_id": "…", "etag": "…",
    ///     "size": 3, "md5": "<32 hex>", "hash": "md5"},
    ///    {"key": "…", "version_id": "…", "crc64nvme": "<16 hex>"}]}
    /// with `hash` one of md5, md5-dos2unix (MD5 after CRLF→LF for text
    /// files, as DVC 2 hashes) or crc64nvme; etag and size optional. A
    /// pin without an exact version id (missing, "" or "null") is an
    /// error. With --revision, --revisions or --all-revisions these are
    /// paths in the git repository (relative to the current directory),
    /// read at each commit; without any, every `*.dvc` and `dvc.lock` file of each
    /// commit is read.
    #[arg(long = "pins", num_args = 1.., value_name = "FILE", verbatim_doc_comment)]
    pub manifests: Vec<PathBuf>,
    /// The directory DVC keys are relative to: a `.dvc` file's outputs get
    /// keys `DIR-OF-THE-DVC-FILE-RELATIVE-TO-ROOT/PATH` [default: each
    /// `.dvc` file's own directory, so the key is the `path` alone; with
    /// a revision, the repository's top level, as DVC lays out a
    /// version-aware remote].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The DVC remote whose `cloud:` entry to use, when rows name several.
    #[arg(long, value_name = "NAME")]
    pub dvc_remote: Option<String>,
    /// Read the pointer files as they were at this git revision
    /// (repeatable; anything `git rev-parse` resolves to a commit).
    #[arg(long, value_name = "REV")]
    pub revision: Vec<String>,
    /// Read the pointer files at every commit of this `git rev-list`
    /// range (repeatable), e.g. `v1..main`.
    #[arg(long, value_name = "RANGE", conflicts_with = "revision")]
    pub revisions: Vec<String>,
    /// Read the pointer files at every commit reachable from any ref.
    #[arg(long, conflicts_with_all = ["revision", "revisions"])]
    pub all_revisions: bool,
    /// Refuse to read more commits than this (a silent cut would hide
    /// pinned versions).
    #[arg(long, value_name = "N", default_value_t = MAX_REVISIONS)]
    pub max_revisions: usize,
}

/// Manifests as read: from the working tree, or at commits.
pub enum Read {
    /// The files named, as they are now.
    WorkingTree(Vec<(PathBuf, Pointers)>),
    /// Pointer files at each commit, newest first.
    History(Vec<AtRevision>),
}

impl Read {
    /// Everything named, in order; from history, what many commits
    /// name alike (same key, version, etag, size and digest) once.
    pub fn pointers(&self) -> Pointers {
        let mut all = Pointers::default();
        match self {
            Read::WorkingTree(files) => {
                for (_, pointers) in files {
                    all.extend(pointers.clone());
                }
            }
            Read::History(read) => {
                let mut pins = BTreeSet::new();
                let mut addressed = BTreeSet::new();
                let mut listings = BTreeSet::new();
                for at in read {
                    let mut pointers = at.pointers.clone();
                    pointers.pins.retain(|p| {
                        pins.insert((
                            p.key.clone(),
                            p.version_id.clone(),
                            p.etag.clone(),
                            p.size,
                            p.digest.clone(),
                        ))
                    });
                    pointers
                        .addressed
                        .retain(|a| addressed.insert((a.key.clone(), a.size)));
                    pointers
                        .listings
                        .retain(|l| listings.insert(l.digest.clone()));
                    all.extend(pointers);
                }
            }
        }
        all
    }
}

impl ManifestArgs {
    /// Reads the manifests; bad input (an unreadable or invalid manifest,
    /// a bad revision, no manifest at all) is a usage error (exit 2).
    pub fn read(&self) -> Result<Read, Failure> {
        let options = ManifestOptions {
            root: self.root.clone(),
            remote: self.dvc_remote.clone(),
        };
        let usage = |e: custodian::versions::VersionsError| Failure::Usage(e.into());
        let revisions = if self.all_revisions {
            Some(Revisions::All)
        } else if !self.revisions.is_empty() {
            Some(Revisions::Ranges(self.revisions.clone()))
        } else if !self.revision.is_empty() {
            Some(Revisions::Named(self.revision.clone()))
        } else {
            None
        };
        let Some(revisions) = revisions else {
            if self.manifests.is_empty() {
                return Err(Failure::Usage(anyhow!(
                    "give --pins FILE…, or a revision (--revision, --revisions or \
                     --all-revisions) to read pointer files from git"
                )));
            }
            let mut files = Vec::new();
            for manifest in &self.manifests {
                files.push((
                    manifest.clone(),
                    read_manifest(manifest, &options).map_err(usage)?,
                ));
            }
            return Ok(Read::WorkingTree(files));
        };
        let cwd = std::env::current_dir()
            .map_err(|e| Failure::Usage(anyhow!(e).context("the current directory")))?;
        let repository = Repository::discover(&cwd).map_err(usage)?;
        let commits = repository
            .commits(&revisions, self.max_revisions)
            .map_err(usage)?;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(commits.len() as u64);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} reading git history [{bar:40}] {pos}/{len} commits",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        let read = repository
            .read_observed(&commits, &self.manifests, &options, &|done| {
                if let Some(bar) = &bar {
                    bar.set_position(done as u64);
                }
            })
            .map_err(usage)?;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        Ok(Read::History(read))
    }
}
