//! Rebuild when the bpf-linker binary changes (the build has an undeclared dependency on it).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
