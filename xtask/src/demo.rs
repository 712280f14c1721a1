pub fn demo(_seconds: u64, _out: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
