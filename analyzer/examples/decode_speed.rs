#![expect(
    unused_crate_dependencies,
    reason = "an example links all the package's dependencies; the lib target checks them"
)]

fn main() {
    let dir = std::env::temp_dir().join("blkprof-decode");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("big.blkp");
    let mut ios = analyzer::synth::cassandra_like(600, 8000, &[(10.0, 3.0, 2000.0)]);
    let t = std::time::Instant::now();
    analyzer::synth::write_trace(&p, &mut ios).unwrap();
    eprintln!("wrote {} in {:?}", ios.len(), t.elapsed());
    let t = std::time::Instant::now();
    let mut r = tracer_common::format::TraceReader::open(&p).unwrap();
    let mut buf = Vec::new();
    let mut n = 0u64;
    let mut sum = 0u64;
    while r.next_chunk(&mut buf).unwrap() {
        n += buf.len() as u64;
        sum += buf.iter().map(|r| u64::from(r.bytes)).sum::<u64>();
    }
    let e = t.elapsed();
    eprintln!(
        "read {n} records in {e:?}: {:.1} M/s ({sum})",
        n as f64 / e.as_secs_f64() / 1e6
    );
    let t = std::time::Instant::now();
    let s = analyzer::summary::summarize(&p, &analyzer::series::Options::default()).unwrap();
    let e = t.elapsed();
    eprintln!(
        "summary {} records in {e:?}: {:.1} M/s",
        s.records,
        n as f64 / e.as_secs_f64() / 1e6
    );
}
