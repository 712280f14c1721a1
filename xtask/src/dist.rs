//! `cargo xtask dist`: what a production host installs, in target/dist/: static binaries in a
//! tarball, a .deb and an .rpm with the same files, an OCI image archive, and SHA256SUMS. The
//! version everywhere is the git description of the build (docs/install.md says how each
//! package format spells it).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use sha2::{Digest as _, Sha256};

use crate::util::{cargo, output, root, run};

const TARGET: &str = "x86_64-unknown-linux-musl";
const BINARIES: [&str; 2] = ["blkprof-trace", "blkprof"];

/// The build's version, as git describes it and as the package formats accept it.
pub(crate) struct Version {
    /// `v0.2.0`, `v0.2.0-3-gabc1234`, or without a tag `0.1.0-312-gabc1234`; `-dirty` when
    /// the work tree had changes.
    pub describe: String,
    /// The same for dpkg and rpm, which order versions and reserve `-`:
    /// `0.1.0+312.gabc1234`, `0.1.0+312.gabc1234.dirty`.
    pub package: String,
}

pub(crate) fn version() -> Result<Version> {
    let git = |args: &[&str]| output(Command::new("git").arg("-C").arg(root()).args(args));
    let crate_version = env!("CARGO_PKG_VERSION");
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?
        .trim()
        .is_empty();
    let described = git(&["describe", "--tags", "--match", "v[0-9]*", "--long"]).ok();
    let (base, count, hash) = if let Some(d) = described.as_deref().map(str::trim) {
        // vX.Y.Z-N-gHASH
        let mut parts = d.rsplitn(3, '-');
        let hash = parts.next().unwrap_or_default().to_string();
        let count: u64 = parts.next().unwrap_or("0").parse().unwrap_or(0);
        let tag = parts.next().unwrap_or(d).to_string();
        (tag, count, hash)
    } else {
        let count: u64 = git(&["rev-list", "--count", "HEAD"])?.trim().parse()?;
        let hash = format!("g{}", git(&["rev-parse", "--short=7", "HEAD"])?.trim());
        (crate_version.to_string(), count, hash)
    };
    let mut describe = if count == 0 && base.starts_with('v') {
        base.clone()
    } else {
        format!("{base}-{count}-{hash}")
    };
    let plain = base.trim_start_matches('v');
    let mut package = if count == 0 && base.starts_with('v') {
        plain.to_string()
    } else {
        format!("{plain}+{count}.{hash}")
    };
    if dirty {
        describe.push_str("-dirty");
        package.push_str(".dirty");
    }
    Ok(Version { describe, package })
}

/// Build everything; the directory it went to.
pub(crate) fn dist() -> Result<PathBuf> {
    let t0 = Instant::now();
    let version = version()?;
    eprintln!(
        "dist: blkprof {} (packages: {})",
        version.describe, version.package
    );
    let cc = crate::setup::musl()?;
    let build = Instant::now();
    run(cargo()
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "-p",
            "tracer",
            "-p",
            "analyzer",
        ])
        .env("CC_x86_64_unknown_linux_musl", &cc)
        .env("BLKPROF_VERSION", &version.describe)
        // The eBPF object keeps its BTF (its package's profile); the binaries need no
        // debug info, only their symbols for a backtrace.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0"))?;
    let build_s = build.elapsed().as_secs_f64();
    let bin_dir = root().join("target").join(TARGET).join("release");
    for b in BINARIES {
        let got = output(Command::new(bin_dir.join(b)).arg("--version"))?;
        if got.trim() != format!("{b} {}", version.describe) {
            bail!("{b} --version says {got:?}, not {}", version.describe);
        }
    }
    let dir = root().join("target/dist");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let work = root().join("target/dist-work");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&dir)?;
    let assets = work.join("assets");
    for b in BINARIES {
        run(Command::new(bin_dir.join(b))
            .arg("--generate-assets")
            .arg(&assets))?;
    }
    let epoch = source_date_epoch()?;
    let tree = package_tree(&bin_dir, &assets)?;
    let mut files = vec![
        tarball(&dir, &version, &tree, epoch)?,
        deb(&dir, &work, &version, &tree, epoch)?,
        rpm(&dir, &work, &version, &tree)?,
        oci(&dir, &version, &bin_dir, epoch)?,
    ];
    files.push(checksums(&dir, &files)?);
    std::fs::remove_dir_all(&work)?;
    eprintln!(
        "dist: built in {build_s:.0} s, packaged in {:.0} s:",
        t0.elapsed().as_secs_f64() - build_s
    );
    for f in &files {
        let size = std::fs::metadata(f)?.len();
        eprintln!(
            "  {:>10}  {}",
            format!("{:.1} MiB", size as f64 / 1_048_576.0),
            f.display()
        );
    }
    Ok(dir)
}

/// The commit's time: every file in the archives carries it, so that two builds of one commit
/// differ only where the compiler's output does.
fn source_date_epoch() -> Result<u64> {
    if let Some(v) = std::env::var_os("SOURCE_DATE_EPOCH") {
        return v
            .to_str()
            .and_then(|s| s.parse().ok())
            .context("SOURCE_DATE_EPOCH is not a number of seconds");
    }
    Ok(output(
        Command::new("git")
            .arg("-C")
            .arg(root())
            .args(["log", "-1", "--format=%ct"]),
    )?
    .trim()
    .parse()?)
}

/// One file of the packages: where it goes on the host, from where, with which mode.
struct Entry {
    source: Source,
    mode: u32,
}

enum Source {
    File(PathBuf),
    /// Gzipped on the way (man pages).
    Gzip(PathBuf),
}

/// Path on the host (without the leading `/`) -> entry: the .deb and .rpm hold exactly these.
type Tree = BTreeMap<String, Entry>;

/// The zsh completions' directory differs: Debian's zsh reads vendor-completions, Fedora's
/// site-functions. The one difference between the .deb's and the .rpm's file lists.
pub(crate) const ZSH_DEB: &str = "usr/share/zsh/vendor-completions";
pub(crate) const ZSH_RPM: &str = "usr/share/zsh/site-functions";

fn package_tree(bin_dir: &Path, assets: &Path) -> Result<Tree> {
    let repo = root();
    let mut tree = Tree::new();
    let mut add = |to: String, source: Source, mode: u32| {
        tree.insert(to, Entry { source, mode });
    };
    for b in BINARIES {
        add(format!("usr/bin/{b}"), Source::File(bin_dir.join(b)), 0o755);
    }
    for page in sorted_dir(&assets.join("man"))? {
        let name = file_name(&page);
        add(
            format!("usr/share/man/man1/{name}.gz"),
            Source::Gzip(page),
            0o644,
        );
    }
    for b in BINARIES {
        let c = assets.join("completions");
        add(
            format!("usr/share/bash-completion/completions/{b}"),
            Source::File(c.join(b)),
            0o644,
        );
        add(
            format!("{ZSH_DEB}/_{b}"),
            Source::File(c.join(format!("_{b}"))),
            0o644,
        );
        add(
            format!("usr/share/fish/vendor_completions.d/{b}.fish"),
            Source::File(c.join(format!("{b}.fish"))),
            0o644,
        );
    }
    let deploy = repo.join("deploy");
    add(
        "usr/lib/systemd/system/blkprof-agent.service".into(),
        Source::File(deploy.join("systemd/blkprof-agent.service")),
        0o644,
    );
    add(
        "usr/lib/sysusers.d/blkprof.conf".into(),
        Source::File(deploy.join("packaging/sysusers.conf")),
        0o644,
    );
    add(
        "usr/lib/tmpfiles.d/blkprof.conf".into(),
        Source::File(deploy.join("packaging/tmpfiles.conf")),
        0o644,
    );
    add(
        "usr/share/blkprof/seccomp.json".into(),
        Source::File(deploy.join("container/seccomp.json")),
        0o644,
    );
    add(
        "usr/share/blkprof/grafana-dashboard.json".into(),
        Source::File(repo.join("docs/agent/grafana-dashboard.json")),
        0o644,
    );
    for doc in docs()? {
        let rel = doc
            .strip_prefix(&repo)
            .context("a doc outside the repository")?
            .to_string_lossy()
            .into_owned();
        add(
            format!("usr/share/doc/blkprof/{rel}"),
            Source::File(doc),
            0o644,
        );
    }
    Ok(tree)
}

/// The README, the user's pages under docs/ (not the benchmarks' journal, the design notes or
/// the experiments' pages, which are for the project) and the licences.
fn docs() -> Result<Vec<PathBuf>> {
    let repo = root();
    let mut out = vec![
        repo.join("README.md"),
        repo.join("LICENSE-MIT"),
        repo.join("LICENSE-APACHE"),
        repo.join("docs/agent/README.md"),
        repo.join("docs/agent/threat-model.md"),
        repo.join("deploy/kubernetes/blkprof.yaml"),
        repo.join("deploy/kubernetes/README.md"),
    ];
    out.extend(
        sorted_dir(&repo.join("docs"))?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    for p in &out {
        if !p.is_file() {
            bail!("{} is missing", p.display());
        }
    }
    Ok(out)
}

fn sorted_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.retain(|p| p.is_file());
    v.sort();
    Ok(v)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn contents(source: &Source) -> Result<Vec<u8>> {
    match source {
        Source::File(p) => std::fs::read(p).with_context(|| format!("cannot read {}", p.display())),
        Source::Gzip(p) => {
            let data = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            // No name and no time in the header: the same page gives the same bytes.
            let mut gz = flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::best());
            gz.write_all(&data)?;
            Ok(gz.finish()?)
        }
    }
}

/// Write the tree under `dir` on disk (for dpkg-deb and rpmbuild).
fn stage(tree: &Tree, dir: &Path, epoch: u64) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    for (to, e) in tree {
        let path = dir.join(to);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents(&e.source)?)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode))?;
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(mtime)?;
    }
    Ok(())
}

/// A tar entry's header: root-owned, the given mode and time.
fn header(mode: u32, size: u64, epoch: u64, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(epoch);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// Append `dirs` (and their parents, once each) then `files` to a tar.
fn tar_tree<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    files: &[(String, u32, Vec<u8>)],
    extra_dirs: &[(&str, u32)],
    epoch: u64,
) -> Result<()> {
    let mut dirs: BTreeMap<String, u32> = BTreeMap::new();
    for (path, _, _) in files {
        let mut p = Path::new(path).parent();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            dirs.entry(format!("{}/", d.display())).or_insert(0o755);
            p = d.parent();
        }
    }
    for (d, mode) in extra_dirs {
        dirs.insert(format!("{d}/"), *mode);
    }
    for (d, mode) in &dirs {
        let mut h = header(*mode, 0, epoch, tar::EntryType::Directory);
        tar.append_data(&mut h, d, std::io::empty())?;
    }
    for (path, mode, data) in files {
        let mut h = header(*mode, data.len() as u64, epoch, tar::EntryType::Regular);
        tar.append_data(&mut h, path, data.as_slice())?;
    }
    Ok(())
}

/// The static binaries with the same man pages, completions, unit and docs, for hosts without
/// dpkg or rpm and for a newcomer without Rust: `blkprof-VERSION-x86_64-linux-musl/`.
fn tarball(dir: &Path, version: &Version, tree: &Tree, epoch: u64) -> Result<PathBuf> {
    let top = format!("blkprof-{}-x86_64-linux-musl", version.describe);
    let path = dir.join(format!("{top}.tar.gz"));
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(std::fs::File::create(&path)?, flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut files = Vec::new();
    for (to, e) in tree {
        // Binaries at the top; the rest where it goes on a host, under share/ and lib/.
        let rel = to.strip_prefix("usr/bin/").map_or_else(
            || {
                to.strip_prefix("usr/")
                    .unwrap_or(to)
                    .replace("share/doc/blkprof/", "doc/")
            },
            str::to_string,
        );
        files.push((format!("{top}/{rel}"), e.mode, contents(&e.source)?));
    }
    tar_tree(&mut tar, &files, &[], epoch)?;
    tar.into_inner()?.finish()?.sync_all()?;
    Ok(path)
}

fn maintainer_script(name: &str) -> Result<String> {
    let p = root().join("deploy/packaging").join(name);
    std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))
}

const SUMMARY: &str = "eBPF block-IO tracer and workload profiler";
const DESCRIPTION: &str = "blkprof-trace captures every block request with eBPF (device, \
sector, size, op, queue depth, latencies, submitter, cgroup, file) and keeps exact counters, \
HDR histograms, Prometheus metrics and a flight recorder; blkprof reads its traces and reports \
what the disk really did: bursts, queueing, latency by phase, A/B comparisons and exports.";

fn deb(dir: &Path, work: &Path, version: &Version, tree: &Tree, epoch: u64) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let staging = work.join("deb");
    stage(tree, &staging, epoch)?;
    let control = staging.join("DEBIAN");
    std::fs::create_dir_all(&control)?;
    let installed_kb: u64 = tree
        .values()
        .map(|e| contents(&e.source).map(|c| (c.len() as u64).div_ceil(1024)))
        .sum::<Result<u64>>()?;
    std::fs::write(
        control.join("control"),
        format!(
            "Package: blkprof\n\
             Version: {}\n\
             Architecture: amd64\n\
             Maintainer: blkprof developers <blkprof@localhost>\n\
             Installed-Size: {installed_kb}\n\
             Depends: passwd\n\
             Section: admin\n\
             Priority: optional\n\
             Homepage: https://github.com/blkprof/blkprof\n\
             Description: {SUMMARY}\n {}\n",
            version.package, DESCRIPTION
        ),
    )?;
    let scripts = [
        ("postinst", "after-install.sh", ""),
        (
            "prerm",
            "before-remove.sh",
            "[ \"$1\" = remove ] || exit 0\n",
        ),
        (
            "postrm",
            "after-remove.sh",
            "if [ \"$1\" = purge ]; then rm -rf /var/lib/blkprof; fi\n",
        ),
    ];
    for (name, file, guard) in scripts {
        let path = control.join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\nset -e\n{guard}{}", maintainer_script(file)?),
        )?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    let path = dir.join(format!("blkprof_{}_amd64.deb", version.package));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&staging)
        .arg(&path)
        .env("SOURCE_DATE_EPOCH", epoch.to_string()))?;
    Ok(path)
}

fn rpm(dir: &Path, work: &Path, version: &Version, tree: &Tree) -> Result<PathBuf> {
    let top = work.join("rpm");
    let staging = work.join("rpm-files");
    // Same files, Fedora's zsh directory.
    let tree_rpm: Vec<(String, &Entry)> = tree
        .iter()
        .map(|(to, e)| (to.replacen(ZSH_DEB, ZSH_RPM, 1), e))
        .collect();
    for (to, e) in &tree_rpm {
        let path = staging.join(to);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents(&e.source)?)?;
    }
    let mut files = String::new();
    for (to, e) in &tree_rpm {
        let doc = if to.starts_with("usr/share/doc/") {
            "%doc "
        } else {
            ""
        };
        files.push_str(&format!("%attr({:o},root,root) {doc}/{to}\n", e.mode));
    }
    let spec = format!(
        "Name: blkprof\n\
         Version: {version}\n\
         Release: 1\n\
         Summary: {SUMMARY}\n\
         License: MIT OR Apache-2.0\n\
         URL: https://github.com/blkprof/blkprof\n\
         BuildArch: x86_64\n\
         AutoReqProv: no\n\
         Requires(post): shadow-utils\n\
         %global debug_package %{{nil}}\n\
         %global __os_install_post %{{nil}}\n\
         %global _build_id_links none\n\
         %description\n{DESCRIPTION}\n\
         %install\n\
         cp -a {staging}/. %{{buildroot}}/\n\
         %post\n{post}\
         %preun\nif [ $1 -eq 0 ]; then\n{preun}fi\n\
         %postun\nif [ $1 -eq 0 ]; then\n{postun}fi\n\
         %files\n{files}",
        version = version.package,
        staging = staging.display(),
        post = maintainer_script("after-install.sh")?,
        preun = maintainer_script("before-remove.sh")?,
        postun = maintainer_script("after-remove.sh")?,
    );
    std::fs::create_dir_all(&top)?;
    let spec_path = top.join("blkprof.spec");
    std::fs::write(&spec_path, spec)?;
    run(Command::new("rpmbuild")
        .args(["-bb", "--quiet", "--nodeps"])
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .arg(&spec_path))?;
    let built = top
        .join("RPMS/x86_64")
        .join(format!("blkprof-{}-1.x86_64.rpm", version.package));
    let path = dir.join(file_name(&built));
    std::fs::copy(&built, &path)
        .with_context(|| format!("rpmbuild wrote no {}", built.display()))?;
    Ok(path)
}

fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(data)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "writing to a String cannot fail"
            )]
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// An OCI image layout in one tar (`podman load -i`, `skopeo copy oci-archive:...`): one layer
/// with the two static binaries and the state directory, from scratch. The entrypoint is the
/// tracer, so that `podman run IMAGE --device sdb ...` traces; `blkprof` is beside it.
fn oci(dir: &Path, version: &Version, bin_dir: &Path, epoch: u64) -> Result<PathBuf> {
    let mut layer = tar::Builder::new(Vec::new());
    let files: Vec<(String, u32, Vec<u8>)> = BINARIES
        .iter()
        .map(|b| {
            Ok((
                format!("usr/bin/{b}"),
                0o755,
                std::fs::read(bin_dir.join(b))?,
            ))
        })
        .collect::<Result<_>>()?;
    tar_tree(
        &mut layer,
        &files,
        &[
            ("var", 0o755),
            ("var/lib", 0o755),
            ("var/lib/blkprof", 0o700),
            ("tmp", 0o1777),
        ],
        epoch,
    )?;
    let layer = layer.into_inner()?;
    let diff_id = sha256_hex(&layer);
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&layer)?;
    let layer_gz = gz.finish()?;
    let created = jiff::Timestamp::from_second(i64::try_from(epoch)?)?.to_string();
    let labels = serde_json::json!({
        "org.opencontainers.image.title": "blkprof",
        "org.opencontainers.image.description": SUMMARY,
        "org.opencontainers.image.version": version.describe,
        "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
    });
    let config = serde_json::to_vec(&serde_json::json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/usr/bin/blkprof-trace"],
            "Env": ["PATH=/usr/bin"],
            "WorkingDir": "/var/lib/blkprof",
            "Volumes": { "/var/lib/blkprof": {} },
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff_id}")] },
        "history": [{ "created": created, "created_by": "cargo xtask dist" }],
    }))?;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", sha256_hex(&config)),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{}", sha256_hex(&layer_gz)),
            "size": layer_gz.len(),
        }],
        "annotations": labels,
    }))?;
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", sha256_hex(&manifest)),
            "size": manifest.len(),
            "annotations": {
                "org.opencontainers.image.ref.name": format!("blkprof:{}", version.describe),
            },
        }],
    }))?;
    let path = dir.join(format!("blkprof-{}-oci.tar", version.describe));
    let mut archive = tar::Builder::new(std::fs::File::create(&path)?);
    let mut entries = vec![
        (
            "oci-layout".to_string(),
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".to_string(), 0o644, index),
    ];
    for blob in [config, layer_gz, manifest] {
        entries.push((format!("blobs/sha256/{}", sha256_hex(&blob)), 0o644, blob));
    }
    tar_tree(&mut archive, &entries, &[], epoch)?;
    archive.into_inner()?.sync_all()?;
    Ok(path)
}

/// `sha256sum -c SHA256SUMS` checks them.
fn checksums(dir: &Path, files: &[PathBuf]) -> Result<PathBuf> {
    let mut sums = String::new();
    for f in files {
        sums.push_str(&format!(
            "{}  {}\n",
            sha256_hex(&std::fs::read(f)?),
            file_name(f)
        ));
    }
    let path = dir.join("SHA256SUMS");
    std::fs::write(&path, sums)?;
    Ok(path)
}
