//! The Java side: a JDK 17 and Maven (from Debian's packages when missing), Cassandra's jars
//! and the YCSB client with the project's CQL binding, built with Maven.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use super::PREBUILT_ENV;
use crate::util::{apt_install, have, root, run};

/// The JPMS flags Cassandra 5.0 ships in conf/jvm17-server.options (not in the jar).
pub(super) const JVM17_FLAGS: &[&str] = &[
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
];

/// The JDK 17's java.
pub(super) fn java() -> Result<PathBuf> {
    let jdk17 = Path::new("/usr/lib/jvm/java-17-openjdk-amd64/bin/java");
    if jdk17.exists() {
        return Ok(jdk17.to_path_buf());
    }
    let v = Command::new("java").arg("-version").output();
    if let Ok(v) = v
        && String::from_utf8_lossy(&v.stderr).contains("version \"17")
    {
        return Ok("java".into());
    }
    bail!(
        "Cassandra 5.0 needs Java 17: install openjdk-17-jdk-headless (apt-get install openjdk-17-jdk-headless)"
    )
}

/// Maven and a JDK 17 from Debian's packages if missing.
pub(super) fn packages() -> Result<()> {
    let mut missing = Vec::new();
    if !have("mvn") {
        missing.push("maven");
    }
    if !Path::new("/usr/lib/jvm/java-17-openjdk-amd64/bin/javac").exists() && !have("javac") {
        missing.push("openjdk-17-jdk-headless");
    }
    apt_install(&missing)
}

fn mvn(pom_dir: &Path, goals: &[&str]) -> Result<()> {
    let mut c = Command::new("mvn");
    c.args(["-B", "-q", "-Dstyle.color=never", "-f"])
        .arg(pom_dir.join("pom.xml"))
        .args(goals);
    if Path::new("/usr/lib/jvm/java-17-openjdk-amd64").exists() {
        c.env("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64");
    }
    run(&mut c)
}

/// Class paths: the node's, the YCSB client's (with the binding) and the binding test's.
pub(crate) struct Java {
    pub(super) server_cp: String,
    /// The jamm agent's jar (the node measures its memtables with it).
    pub(super) jamm: String,
    pub(super) client_cp: String,
    pub(super) test_cp: String,
}

/// Cassandra's jars, and the YCSB client with the binding, compiled and unit-tested.
pub(crate) fn build_java() -> Result<Java> {
    let base = root().join("cassandra");
    let t = Instant::now();
    // Inside the VM lab the host built it, and the repository is read-only.
    if std::env::var_os(PREBUILT_ENV).is_none() {
        eprintln!(
            "cassandra: fetching Cassandra 5.0.4, YCSB 0.17.0 and the Java driver (Maven Central), building the CQL binding"
        );
        mvn(&base.join("server"), &["dependency:copy-dependencies"])?;
        mvn(
            &base.join("ycsb-cql"),
            &["package", "dependency:copy-dependencies"],
        )?;
        eprintln!(
            "cassandra: Java side ready in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let jars = |d: PathBuf| -> Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(std::result::Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        Ok(v)
    };
    let server = jars(base.join("server/target/dependency"))?;
    let jamm = server
        .iter()
        .find(|j| j.contains("/jamm-"))
        .context("no jamm jar among Cassandra's dependencies")?
        .clone();
    let b = base.join("ycsb-cql/target");
    let mut client = vec![b.join("ycsb-cql-1.jar").display().to_string()];
    client.extend(jars(b.join("dependency"))?);
    let test_cp = format!("{}:{}", b.join("test-classes").display(), client.join(":"));
    Ok(Java {
        server_cp: server.join(":"),
        jamm,
        client_cp: client.join(":"),
        test_cp,
    })
}
