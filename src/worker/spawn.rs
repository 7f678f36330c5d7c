//! Starting a worker's guardian process: cloned from a template
//! (`template`) where one runs, else spawned from nothing.
//!
//! Every worker is started from one long-lived thread (the [`Spawner`]):
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, so
//! forking from tokio's short-lived blocking threads would kill idle workers.
//! A guardian the template clones is that thread's child too (`CLONE_PARENT`).

use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::Arc;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::guardian::GuardianProcess;
use super::launch::{guardian_command, worker_cgroup, Spawned};
use super::template::Template;
use super::{StartError, WorkerSpec};

/// The one thread every worker is started from; lives as long as its pool.
pub(crate) struct Spawner {
    jobs: std::sync::mpsc::Sender<Job>,
}

enum Job {
    Spawn {
        spec: Arc<WorkerSpec>,
        reply: oneshot::Sender<std::io::Result<Spawned>>,
    },
    /// The pool has shut down: its template ends, and no other starts.
    EndTemplate,
}

impl Spawner {
    /// Starts the spawner thread; must be called inside a tokio runtime.
    /// `use_template`: clone workers from a template process (see `template`).
    pub(crate) fn new(use_template: bool) -> std::io::Result<Spawner> {
        let handle = tokio::runtime::Handle::current();
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("toolpool-spawner".into())
            .spawn(move || {
                // tokio::process and pipes need a runtime context to register.
                let _runtime = handle.enter();
                let mut templates = Templates::new(use_template);
                for job in queue {
                    match job {
                        Job::Spawn { spec, reply } => {
                            let _ = reply.send(templates.start_guardian(&spec));
                        }
                        Job::EndTemplate => templates = Templates::new(false),
                    }
                }
            })?;
        Ok(Spawner { jobs })
    }

    pub(super) async fn spawn(
        &self,
        spec: Arc<WorkerSpec>,
    ) -> Result<std::io::Result<Spawned>, StartError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Spawn { spec, reply })
            .map_err(|_| StartError::SpawnerGone)?;
        answer.await.map_err(|_| StartError::SpawnerGone)
    }

    /// Ends the template (the pool has shut down); later workers are spawned.
    pub(crate) fn end_template(&self) {
        let _ = self.jobs.send(Job::EndTemplate);
    }
}

/// The spawner thread's templates, one per spec (a sandboxed pool has one
/// spec per session: each worker's view holds its session's folders), each
/// started at the spec's first worker.
struct Templates {
    enabled: bool,
    running: Vec<Template>,
    /// Starts or clones that failed in a row: after
    /// [`MAX_TEMPLATE_FAILURES`] the pool spawns every worker (an
    /// interpreter that cannot be a template).
    failures: u32,
}

/// Failed template starts or clones after which a pool stops trying.
const MAX_TEMPLATE_FAILURES: u32 = 3;
/// Templates kept running at once; past it the one used least recently ends.
const MAX_TEMPLATES: usize = 4;

impl Templates {
    fn new(enabled: bool) -> Templates {
        Templates {
            enabled,
            running: Vec::new(),
            failures: 0,
        }
    }

    fn start_guardian(&mut self, spec: &Arc<WorkerSpec>) -> std::io::Result<Spawned> {
        if !self.enabled || !Template::can_serve(spec) || self.failures >= MAX_TEMPLATE_FAILURES {
            return spawn_process(spec);
        }
        match self.clone_from_template(spec) {
            Ok(spawned) => {
                self.failures = 0;
                Ok(spawned)
            }
            Err(e) => {
                self.failures += 1;
                self.running.retain(|t| !t.serves(spec));
                if self.failures >= MAX_TEMPLATE_FAILURES {
                    tracing::warn!("workers are spawned from now on: the template failed: {e}");
                } else {
                    tracing::debug!("spawning a worker: the template failed: {e}");
                }
                spawn_process(spec)
            }
        }
    }

    fn clone_from_template(&mut self, spec: &Arc<WorkerSpec>) -> std::io::Result<Spawned> {
        // A template whose spec nobody else holds serves no one any more (a
        // session that ended); a dead one, or one tampered with, is started
        // again (dropped, it is killed).
        self.running
            .retain_mut(|t| Arc::strong_count(t.spec()) > 1 && t.is_sound());
        let index = match self.running.iter().position(|t| t.serves(spec)) {
            Some(index) => index,
            None => {
                if self.running.len() >= MAX_TEMPLATES {
                    self.running.remove(0);
                }
                self.running.push(Template::start(spec)?);
                self.running.len() - 1
            }
        };
        // Most recently used last.
        let mut template = self.running.remove(index);
        let spawned = template.clone_guardian(spec);
        self.running.push(template);
        spawned
    }
}

fn spawn_process(spec: &WorkerSpec) -> std::io::Result<Spawned> {
    let (dump_read, dump_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let cgroup = worker_cgroup(spec)?;
    let boot_json = spec.boot_json();
    let mut command =
        guardian_command(spec, &[&boot_json], [dump_write.as_raw_fd()], Some(&cgroup));
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::reaper::spawn_known(&mut command)?;
    drop(dump_write);
    let missing = || std::io::Error::other("a stdio pipe of the guardian is missing");
    let stdin = child.stdin.take().ok_or_else(missing)?.into_owned_fd()?;
    let stdout = child.stdout.take().ok_or_else(missing)?.into_owned_fd()?;
    let stderr = child.stderr.take().ok_or_else(missing)?.into_owned_fd()?;
    Ok(Spawned {
        guardian: GuardianProcess::Spawned(child),
        stdin: pipe::Sender::from_owned_fd(stdin)?,
        stdout: pipe::Receiver::from_owned_fd(stdout)?,
        stderr: pipe::Receiver::from_owned_fd(stderr)?,
        dump: dump_read,
        cgroup,
    })
}
