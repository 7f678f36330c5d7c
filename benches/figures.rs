//! toolpool's side of the peer benchmark (docs/benchmarks.md), driven through the
//! library API, plus P1's floor: a bare length-prefixed echo between this
//! process and `python3` over the same pipes with the same codec.
//!
//! Prints one JSON object; `benches/peers` runs it next to the Python peers
//! and prints the comparison. `--quick` takes fewer samples.

// The allocator the toolpool binary runs with (src/bin/toolpool/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use toolpool::wire::{encode_invoke_frame, CallContext, DEFAULT_MAX_FRAME};
use toolpool::SandboxMode;
use toolpool::{InvokeOptions, Pool};

fn tools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/tools")
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

async fn pool(workers: usize, session: &Path) -> Pool {
    pool_on("python3", workers, session, SandboxMode::Off).await
}

async fn pool_on(python: &str, workers: usize, session: &Path, sandbox: SandboxMode) -> Pool {
    Pool::builder()
        .python(python)
        .functions_dir(tools_dir())
        .workers(workers)
        .session_dir(session)
        .sandbox(sandbox)
        .build()
        .await
        .expect("pool starts")
}

/// The 10 000 / 2 000 small records of P8 and P9, as the peers build them.
fn records(count: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|i| json!({"id": i, "name": format!("item-{i}"), "score": i as f64 * 0.5, "tags": ["a", "b"]}))
            .collect(),
    )
}

/// pebble's side of P2, P8 and P9 (`benches/pebble_sampler.py` on the bench
/// venv's interpreter, which benches/peers passes), one measurement per
/// request so that its measurements alternate with toolpool's.
struct PebbleSampler {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    answers: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl PebbleSampler {
    fn start() -> Option<PebbleSampler> {
        let python = std::env::var("TOOLPOOL_BENCH_PEBBLE_PYTHON").ok()?;
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/pebble_sampler.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the pebble sampler starts");
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        use tokio::io::AsyncBufReadExt;
        let answers = tokio::io::BufReader::new(stdout).lines();
        Some(PebbleSampler {
            child,
            stdin,
            answers,
        })
    }

    /// One pebble call of `function` (`records` or `take_records`): ms.
    async fn sample(&mut self, function: &str) -> f64 {
        self.ask(function).await
    }

    /// `calls` no-op calls on pebble, 64 in flight, 2 workers: calls/s.
    async fn throughput(&mut self, calls: usize) -> f64 {
        self.ask(&format!("throughput {calls}")).await
    }

    async fn ask(&mut self, request: &str) -> f64 {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .expect("the sampler reads");
        let line = self.answers.next_line().await.expect("the sampler answers");
        line.and_then(|l| l.parse().ok()).expect("a number")
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}

/// Serial p50s (ms) of P8 and P9 for toolpool and, alongside, for pebble.
struct Payloads {
    p8: f64,
    p9: f64,
    pebble: Option<(f64, f64)>,
}

/// P8 and P9 on `python`: serial p50 (ms) of a 10 000-record result and of a
/// 2 000-record argument, one worker; with pebble's calls (when the sampler
/// runs) alternating with toolpool's, one each.
async fn payloads(
    python: &str,
    session: &Path,
    calls: usize,
    mut pebble: Option<&mut PebbleSampler>,
) -> Payloads {
    let pool = pool_on(python, 1, session, SandboxMode::Off).await;
    let result_args = json!({"count": 10_000});
    let argument = json!({"rows": records(2_000)});
    let mut time = async |name: &'static str, args: &Value| {
        let mut ours = Vec::with_capacity(calls);
        let mut theirs = Vec::with_capacity(calls);
        for i in 0..(calls + 5) {
            // The copy is the benchmark's own (a caller builds its
            // arguments once), as pebble's side passes the same rows each time.
            let args = args.clone();
            let started = Instant::now();
            pool.invoke(name, args, InvokeOptions::default())
                .await
                .expect("payload call succeeds");
            let elapsed = started.elapsed().as_secs_f64() * 1e3;
            if let Some(pebble) = pebble.as_mut() {
                let pebble_ms = pebble.sample(name).await;
                if i >= 5 {
                    theirs.push(pebble_ms);
                }
            }
            if i >= 5 {
                ours.push(elapsed);
            }
        }
        (median(ours), (!theirs.is_empty()).then(|| median(theirs)))
    };
    let (p8, pebble_p8) = time("records", &result_args).await;
    let (p9, pebble_p9) = time("take_records", &argument).await;
    pool.shutdown().await;
    Payloads {
        p8,
        p9,
        pebble: pebble_p8.zip(pebble_p9),
    }
}

async fn noop(pool: &Pool) {
    pool.invoke("noop", json!({}), InvokeOptions::default())
        .await
        .expect("noop succeeds");
}

/// P1: serial no-op round trips, in microseconds.
async fn serial_round_trip(session: &Path, calls: usize) -> Vec<f64> {
    let pool = pool(1, session).await;
    for _ in 0..200 {
        noop(&pool).await;
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        noop(&pool).await;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    pool.shutdown().await;
    samples
}

/// P1's floor: the same request and reply frames, echoed by a bare Python loop.
async fn floor_round_trip(calls: usize) -> Vec<f64> {
    let install = toolpool::wire::PrivateInstall::new().expect("a private directory");
    let shim = install.shim().expect("shim installs");
    let python = toolpool::wire::resolve_interpreter("python3")
        .await
        .expect("python3 runs");
    let mut child = tokio::process::Command::new(python)
        .arg("-I")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/echo_floor.py"))
        .arg(&shim)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("echo starts");
    let mut stdin = child.stdin.take().expect("piped");
    // The same framing as the worker channel's.
    let mut stdout = FramedRead::new(
        child.stdout.take().expect("piped"),
        LengthDelimitedCodec::builder()
            .length_field_length(4)
            .max_frame_length(DEFAULT_MAX_FRAME)
            .new_codec(),
    );
    let args = json!({});
    let context = CallContext::default();
    let mut samples = Vec::with_capacity(calls);
    for i in 0..(calls + 200) {
        let started = Instant::now();
        let frame = encode_invoke_frame(i as u64, "noop", &args, &context, DEFAULT_MAX_FRAME)
            .expect("encodes");
        toolpool::wire::write_frame(&mut stdin, &frame)
            .await
            .expect("writes");
        let body = stdout.next().await.expect("echo answers").expect("a frame");
        let _: Value = rmp_serde::from_slice(&body).expect("decodes");
        if i >= 200 {
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    drop(stdin);
    let _ = child.wait().await;
    samples
}

/// P2: `calls` no-op calls, `in_flight` at a time, on 2 workers: calls/s.
async fn throughput(session: &Path, calls: usize, in_flight: usize) -> f64 {
    let pool = pool(2, session).await;
    for _ in 0..100 {
        noop(&pool).await;
    }
    let started = Instant::now();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let permit = semaphore.clone().acquire_owned().await.expect("open");
        // Reap finished tasks as we go: a JoinSet holding 20 000 finished
        // tasks costs the spawning thread page faults, not the pool.
        while tasks.try_join_next().is_some() {}
        let pool = pool.clone();
        tasks.spawn(async move {
            noop(&pool).await;
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    pool.shutdown().await;
    rate
}

/// One timeout round on `pool`: how late a 200 ms timeout is reported (ms),
/// and how soon the next call is answered after the kill (ms).
async fn timeout_round(pool: &Pool) -> (f64, f64) {
    let options = InvokeOptions {
        timeout: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let started = Instant::now();
    let error = pool
        .invoke("sleep", json!({"seconds": 10}), options)
        .await
        .expect_err("times out");
    assert!(error.is_timeout(), "{error}");
    let late = (started.elapsed().as_secs_f64() - 0.2) * 1e3;
    let started = Instant::now();
    noop(pool).await;
    (late, started.elapsed().as_secs_f64() * 1e3)
}

/// P3 and P4 on a 1-worker pool, and P10's next call after a kill on a
/// sandboxed one, in alternating rounds: whatever else the machine does
/// meanwhile weighs on both sides of P10's ratio alike.
/// Returns (P3 late, P4 next, P10 next), in ms.
async fn timeouts(session: &Path, rounds: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let plain = pool_on("python3", 1, session, SandboxMode::Off).await;
    let sandboxed = pool_on("python3", 1, session, SandboxMode::Strict).await;
    noop(&plain).await;
    noop(&sandboxed).await;
    let (mut late, mut next, mut next_sandboxed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Let the replacement (or spare) be ready, as between real calls.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (l, n) = timeout_round(&plain).await;
        late.push(l);
        next.push(n);
        tokio::time::sleep(Duration::from_millis(300)).await;
        next_sandboxed.push(timeout_round(&sandboxed).await.1);
    }
    plain.shutdown().await;
    sandboxed.shutdown().await;
    (late, next, next_sandboxed)
}

/// G1: on a 1-worker pool with a 1 s grace, how late a 200 ms timeout is
/// answered for a tool whose `finally` takes 10 ms, and how late one that
/// catches the TimeoutError and goes on is killed past timeout + grace (ms).
async fn graced_timeouts(session: &Path, rounds: usize) -> (Vec<f64>, Vec<f64>) {
    let pool = Pool::builder()
        .functions_dir(tools_dir())
        .workers(1)
        .session_dir(session)
        .timeout(Duration::from_millis(200))
        .timeout_grace(Duration::from_secs(1))
        .build()
        .await
        .expect("pool starts");
    noop(&pool).await;
    let (mut cleaned, mut killed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (tool, args, end, into) in [
            (
                "tidy",
                json!({"seconds": 10, "cleanup_ms": 10}),
                0.2,
                &mut cleaned,
            ),
            ("stubborn", json!({"seconds": 10}), 1.2, &mut killed),
        ] {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let started = Instant::now();
            let error = pool
                .invoke(tool, args, InvokeOptions::default())
                .await
                .expect_err("times out");
            assert!(error.is_timeout(), "{error}");
            into.push((started.elapsed().as_secs_f64() - end) * 1e3);
        }
    }
    pool.shutdown().await;
    (cleaned, killed)
}

/// G2: a pool of 4 shrunk to 1 (`--min-workers 1 --worker-idle 0.2`): from
/// 4 calls at once until 4 workers are busy (ms).
async fn regrowth(session: &Path) -> f64 {
    let pool = Pool::builder()
        .functions_dir(tools_dir())
        .workers(4)
        .min_workers(1)
        .worker_idle(Some(Duration::from_millis(200)))
        .session_dir(session)
        .build()
        .await
        .expect("pool starts");
    while pool.stats().target_workers > 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The spare refilled, as a quiet pool has it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Each call says when it began, by the wall clock: the last of them is
    // when the pool was back to 4 busy workers.
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.invoke("hold", json!({"seconds": 1}), InvokeOptions::default())
                    .await
                    .ok()
                    .and_then(|began| began.as_f64())
            })
        })
        .collect();
    let mut last = 0.0f64;
    for call in calls {
        let began = call.await.ok().flatten().expect("the call ran");
        last = last.max(began);
    }
    let busy_after = (last - started) * 1e3;
    pool.shutdown().await;
    busy_after
}

/// P5 (and P10 sandboxed): time until a pool of `workers` is ready, from cold (ms).
async fn cold_start(session: &Path, workers: usize, sandbox: SandboxMode) -> f64 {
    let started = Instant::now();
    let pool = pool_on("python3", workers, session, sandbox).await;
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    pool.shutdown().await;
    elapsed
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// P7: a catalog of 1 000 typed, documented functions in 100 modules (s).
async fn big_catalog(session: &Path) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    for m in 0..100 {
        let mut code = String::from("from typing import Annotated, Literal, Optional\n\n");
        for f in 0..10 {
            code.push_str(&format!(
                "def tool_{m}_{f}(path: str, count: int = 3, mode: Literal['a', 'b'] = 'a', \
                 limit: Optional[float] = None, tags: list[str] | None = None) -> str:\n    \
                 \"\"\"Tool {f} of module {m}.\n\n    Args:\n        path: Where.\n        \
                 count: How many.\n    \"\"\"\n    return path\n\n"
            ));
        }
        std::fs::write(dir.path().join(format!("module_{m:03}.py")), code).expect("write module");
    }
    let started = Instant::now();
    let pool = Pool::builder()
        .functions_dir(dir.path())
        .workers(1)
        .session_dir(session)
        .build()
        .await
        .expect("pool starts");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(pool.catalog().functions.len(), 1000);
    pool.shutdown().await;
    elapsed
}

/// Every thread of this process on `cpus` (the processes it starts from
/// then on inherit it).
fn pin_threads(cpus: &nix::sched::CpuSet) {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    for task in tasks.flatten() {
        if let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) {
            // A thread that ended meanwhile is not there to pin.
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), cpus);
        }
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    percentile(&mut samples, 0.5)
}

/// P8's or P9's JSON: toolpool's p50s (without and with the C extension),
/// pebble's measured alongside each, and the ratios.
fn payload_figure(
    plain: &Payloads,
    c_ext: Option<&Payloads>,
    ours: impl Fn(&Payloads) -> f64,
    theirs: impl Fn((f64, f64)) -> f64,
) -> Value {
    let pebble = plain.pebble.map(&theirs);
    let pebble_c_ext = c_ext.and_then(|c| c.pebble).map(&theirs);
    json!({
        "toolpool_p50_ms": ours(plain),
        "pebble_p50_ms": pebble,
        "ratio_vs_pebble": pebble.map(|p| ours(plain) / p),
        "toolpool_p50_ms_c_ext": c_ext.map(&ours),
        "pebble_p50_ms_c_ext": pebble_c_ext,
        "ratio_vs_pebble_c_ext": c_ext.map(&ours).zip(pebble_c_ext).map(|(o, p)| o / p),
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this
    // binary without it, as a smoke test with very few samples.
    let smoke = !args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let scale = match (smoke, quick) {
        (true, _) => 50,
        (false, true) => 5,
        (false, false) => 1,
    };
    let session = tempfile::tempdir().expect("temp dir");
    let session = session.path();

    // P6 first, while this process is still only a supervisor.
    let idle = pool(4, session).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p6 = rss_mb();
    idle.shutdown().await;

    // P1's two sides take turns, five rounds each, so that a burst of other
    // work on the machine weighs on both alike.
    let (mut toolpool_p1, mut floor_p1) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        toolpool_p1.extend(serial_round_trip(session, 1000 / scale).await);
        floor_p1.extend(floor_round_trip(1000 / scale).await);
    }
    // And again on one CPU, where neither side waits for another CPU to
    // wake: the floor is two figures otherwise (about 10 µs when the
    // scheduler puts both ends of the pipe on one CPU, 65 to 90 on two of a
    // virtual machine's), and which one a run gets is chance.
    let all_cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
    let mut one_cpu = nix::sched::CpuSet::new();
    one_cpu
        .set(
            (0..nix::sched::CpuSet::count())
                .find(|&cpu| all_cpus.is_set(cpu).unwrap_or(false))
                .unwrap_or(0),
        )
        .expect("a CPU");
    pin_threads(&one_cpu);
    let (mut toolpool_p1_one, mut floor_p1_one) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        toolpool_p1_one.extend(serial_round_trip(session, 1000 / scale).await);
        floor_p1_one.extend(floor_round_trip(1000 / scale).await);
    }
    pin_threads(&all_cpus);
    // pebble's P2, P8 and P9, alternating with toolpool's (when benches/peers runs this).
    let mut pebble = PebbleSampler::start();
    let (mut p2, mut pebble_p2) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        p2.push(throughput(session, 20_000 / scale, 64).await);
        if let Some(pebble) = pebble.as_mut() {
            pebble_p2.push(pebble.throughput(20_000 / scale).await);
        }
    }
    let p2 = median(p2);
    let pebble_p2 = (!pebble_p2.is_empty()).then(|| median(pebble_p2));
    let timeout_rounds = match scale {
        1 => 30,
        5 => 10,
        _ => 1,
    };
    let (mut late, next, next_sandboxed) = timeouts(session, timeout_rounds).await;
    let (mut cleaned, mut killed) = graced_timeouts(session, timeout_rounds).await;
    let mut one = Vec::new();
    let mut four = Vec::new();
    let mut four_sandboxed = Vec::new();
    let mut regrown = Vec::new();
    for _ in 0..(5 / scale).max(1) {
        one.push(cold_start(session, 1, SandboxMode::Off).await);
        four.push(cold_start(session, 4, SandboxMode::Off).await);
        four_sandboxed.push(cold_start(session, 4, SandboxMode::Strict).await);
        regrown.push(regrowth(session).await);
    }
    let p7 = big_catalog(session).await;
    let payload_calls = (50 / scale).max(3);
    let plain = payloads("python3", session, payload_calls, pebble.as_mut()).await;
    // With the msgpack C extension: the interpreter of a venv that has it
    // (benches/peers passes the bench venv's).
    let c_ext = match std::env::var("TOOLPOOL_BENCH_C_EXT_PYTHON") {
        Ok(python) => Some(payloads(&python, session, payload_calls, pebble.as_mut()).await),
        Err(_) => None,
    };
    if let Some(pebble) = pebble {
        pebble.stop().await;
    }

    let (one, four) = (median(one), median(four));
    let regrown = median(regrown);
    let four_sandboxed = median(four_sandboxed);
    let (next, next_sandboxed) = (median(next), median(next_sandboxed));
    let figures = json!({
        "P1": {"toolpool_p50_us": percentile(&mut toolpool_p1, 0.5),
               "toolpool_p99_us": percentile(&mut toolpool_p1, 0.99),
               "floor_p50_us": percentile(&mut floor_p1, 0.5),
               "one_cpu": {"toolpool_p50_us": percentile(&mut toolpool_p1_one, 0.5),
                           "floor_p50_us": percentile(&mut floor_p1_one, 0.5)}},
        "P2": {"toolpool_calls_per_s": p2, "pebble_calls_per_s": pebble_p2,
               "ratio_vs_pebble": pebble_p2.map(|pebble| p2 / pebble)},
        "P3": {"toolpool_p99_ms": percentile(&mut late, 0.99)},
        "P4": {"toolpool_p50_ms": next},
        "P5": {"toolpool_ms": four, "one_worker_ms": one, "ratio_vs_one_worker": four / one},
        "P6": {"toolpool_mb": p6},
        "P7": {"toolpool_s": p7},
        "P8": payload_figure(&plain, c_ext.as_ref(), |p| p.p8, |pebble| pebble.0),
        "P9": payload_figure(&plain, c_ext.as_ref(), |p| p.p9, |pebble| pebble.1),
        "G1": {"cleaned_up_late_p99_ms": percentile(&mut cleaned, 0.99),
               "killed_late_p99_ms": percentile(&mut killed, 0.99)},
        "G2": {"busy_4_ms": regrown, "cold_4_ms": four, "ratio_vs_cold": regrown / four},
        "P10": {"cold_4_ms": four_sandboxed, "cold_4_unsandboxed_ms": four,
                "cold_ratio": four_sandboxed / four,
                "next_after_kill_p50_ms": next_sandboxed, "next_after_kill_unsandboxed_p50_ms": next,
                "next_ratio": next_sandboxed / next},
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&figures).unwrap_or_default()
    );
}
