//! In-process costs of P8's and P9's payloads, printed (not a benchmark:
//! run by hand with `cargo test --lib measure_table_payloads -- --ignored
//! --nocapture`).

use std::time::Instant;

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed().as_secs_f64() * 1000.0
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore]
fn measure_table_payloads() {
    let script = "import json, marshal, sys\n\
            rows = [{'id': i, 'name': f'item-{i}', 'score': i * 0.5, 'tags': ['a', 'b']} for i in range(10000)]\n\
            open(sys.argv[1], 'wb').write(marshal.dumps(rows, 4))\n\
            open(sys.argv[2], 'w').write(json.dumps(rows, separators=(',', ':')))";
    let dir = tempfile::tempdir().unwrap();
    let (blob_path, text_path) = (dir.path().join("blob"), dir.path().join("text"));
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&blob_path)
        .arg(&text_path)
        .status()
        .unwrap();
    assert!(status.success());
    let blob = std::fs::read(&blob_path).unwrap();
    let text = std::fs::read_to_string(&text_path).unwrap();
    let marshal_ms = best_of(20, || super::from_marshal(&blob).unwrap());
    let json_ms = best_of(20, || {
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    });
    println!("P8 result, 10 000 records: marshal decode {marshal_ms:.2} ms, serde_json parse {json_ms:.2} ms");

    let rows: serde_json::Value = serde_json::from_str(&text).unwrap();
    let args = serde_json::json!({"rows": rows.as_array().unwrap()[..2000]});
    let write_ms = best_of(20, || {
        crate::protocol::marshal_writer::to_marshal(&args).unwrap()
    });
    let text_ms = best_of(20, || serde_json::to_string(&args).unwrap());
    std::fs::write(
        &blob_path,
        crate::protocol::marshal_writer::to_marshal(&args).unwrap(),
    )
    .unwrap();
    std::fs::write(&text_path, serde_json::to_string(&args).unwrap()).unwrap();
    println!("P9 arguments, 2 000 records: marshal write {write_ms:.2} ms, serde_json text {text_ms:.2} ms");
    let script = "import json, marshal, sys, time\n\
            blob, text = open(sys.argv[1], 'rb').read(), open(sys.argv[2]).read()\n\
            def best(f):\n    \
                times = []\n    \
                for _ in range(50):\n        \
                    start = time.perf_counter(); f(); times.append(time.perf_counter() - start)\n    \
                return min(times) * 1000\n\
            assert marshal.loads(blob) == json.loads(text)\n\
            print(f'P9 in the shim: marshal.loads {best(lambda: marshal.loads(blob)):.2f} ms, json.loads {best(lambda: json.loads(text)):.2f} ms')";
    let output = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&blob_path)
        .arg(&text_path)
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
