//! A pseudo-terminal for tests that need a person's terminal: a job's
//! controlling terminal and stdin, or where its output is shown.

use super::{run, Run};

/// A pseudo-terminal the test holds both ends of, in raw mode so that every
/// byte pushed into its input can be read at once, as a shell would read it.
pub struct Terminal {
    master: std::os::fd::OwnedFd,
    slave: std::os::fd::OwnedFd,
}

impl Terminal {
    pub fn open() -> Terminal {
        use std::os::fd::FromRawFd;
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two fds; the rest may be null.
        let opened = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: openpty just made both, owned by nobody else.
        let terminal = unsafe {
            Terminal {
                master: std::os::fd::OwnedFd::from_raw_fd(master),
                slave: std::os::fd::OwnedFd::from_raw_fd(slave),
            }
        };
        // SAFETY: termios is plain data, filled by tcgetattr before use.
        unsafe {
            let mut attributes: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(slave, &mut attributes), 0);
            libc::cfmakeraw(&mut attributes);
            assert_eq!(libc::tcsetattr(slave, libc::TCSANOW, &attributes), 0);
        }
        terminal
    }

    /// Runs `command` as a shell runs a job: in a session whose controlling
    /// terminal is this one, reading it on stdin (stdout and stderr piped).
    pub fn run(&self, command: &mut std::process::Command) -> Run {
        use std::os::unix::process::CommandExt;
        command.stdin(std::process::Stdio::from(self.slave.try_clone().unwrap()));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        run(command)
    }

    /// What was pushed into the terminal's input and not read: what the
    /// shell would run once the job ends.
    pub fn pending_input(&self) -> String {
        drain(&self.slave)
    }

    /// Where a program writes to show text on this terminal.
    pub fn output_end(&self) -> std::process::Stdio {
        std::process::Stdio::from(self.slave.try_clone().unwrap())
    }

    /// What was written to the terminal (as the person would see it).
    pub fn shown(&self) -> String {
        drain(&self.master)
    }

    /// Its path under /dev/pts.
    pub fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", self.slave.as_raw_fd());
        std::fs::read_link(link).unwrap().display().to_string()
    }
}

/// Every byte readable on `fd` now (waiting 200 ms for more).
fn drain(fd: &std::os::fd::OwnedFd) -> String {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    let mut pending = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let mut ready = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut ready, 1, 200) } <= 0 {
            break;
        }
        // SAFETY: reads into a buffer of the length given.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n <= 0 {
            break;
        }
        pending.extend_from_slice(&chunk[..n as usize]);
    }
    String::from_utf8_lossy(&pending).into_owned()
}
