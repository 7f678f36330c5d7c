//! Reading the process table from `/proc`: the one parser of
//! `/proc/<pid>/stat`, and the children and descendants of a process from one
//! reading of it. What the kernel says, never what a process says of itself.

/// One process, as `/proc/<pid>/stat` describes it.
pub(crate) struct Stat {
    pub pid: i32,
    pub parent: i32,
    /// Its process group.
    pub group: i32,
    pub state: char,
    /// The kernel's `PF_*` flags (`PF_EXITING`: it has begun to exit).
    pub flags: u64,
    pub start_time: u64,
    pub command: String,
}

pub(crate) fn stat(pid: i32) -> Option<Stat> {
    parse_stat(
        pid,
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// `/proc/<pid>/stat`'s text. The command comes in parentheses and may
/// itself hold spaces and `)` (a process names itself), so the fields are
/// counted from the last `)`.
fn parse_stat(pid: i32, text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let command = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the name: state (field 3), ppid (4), pgrp (5), ..., flags (9),
    // ..., starttime (22).
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        flags: fields.get(6)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        command,
    })
}

/// `PF_EXITING` (include/linux/sched.h): set as a process begins to exit.
const PF_EXITING: u64 = 0x4;

impl Stat {
    /// Already on its way out: exiting, a zombie, or with a SIGKILL pending
    /// (a parent-death signal is sent as the parent exits, before the
    /// orphan runs again).
    pub(crate) fn is_dying(&self) -> bool {
        self.flags & PF_EXITING != 0
            || matches!(self.state, 'Z' | 'X' | 'x')
            || sigkill_pending(self.pid)
    }
}

/// Whether SIGKILL waits for `pid`'s main thread or its whole process
/// (`SigPnd` / `ShdPnd` of `/proc/<pid>/status`, masks in hexadecimal).
fn sigkill_pending(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigPnd:")
            .or_else(|| line.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & sigkill != 0)
    })
}

/// The parent of `pid`, from /proc.
pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    stat(pid).map(|s| s.parent)
}

fn every_process() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

pub(crate) fn children_of(parent: i32) -> Vec<Stat> {
    every_process()
        .into_iter()
        .filter(|s| s.parent == parent)
        .collect()
}

/// Resident set size of a process, from `/proc/<pid>/statm`.
pub(crate) fn rss_bytes(pid: i32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    Some(pages * page_size)
}

/// Every process below `root` (children, their children, ...), from one
/// reading of /proc.
pub(crate) fn descendants_of(root: i32) -> Vec<Stat> {
    let mut rest = every_process();
    let mut found: Vec<Stat> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        let (children, others): (Vec<Stat>, Vec<Stat>) =
            rest.into_iter().partition(|s| s.parent == parent);
        rest = others;
        parents.extend(children.iter().map(|c| c.pid));
        found.extend(children);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stat_is_read() {
        let me = stat(std::process::id() as i32).unwrap();
        // The main thread's state: running, or sleeping while test threads run.
        assert!("RS".contains(me.state), "state {}", me.state);
        assert_eq!(me.parent, nix::unistd::getppid().as_raw());
        assert!(me.start_time > 0);
        assert!(!me.command.is_empty());
    }

    #[test]
    fn a_command_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let fields = "S 41 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        let text = format!("4242 (evil) S 1 (x) {fields}\n");
        let parsed = parse_stat(4242, &text).unwrap();
        assert_eq!(parsed.command, "evil) S 1 (x");
        assert_eq!(parsed.state, 'S');
        assert_eq!(parsed.parent, 41);
        assert_eq!(parsed.start_time, 98765);
        assert_eq!(parsed.flags, 4194560);
        let exiting = text.replace("4194560", "4194564");
        assert!(parse_stat(4242, &exiting).unwrap().is_dying(), "PF_EXITING");
    }

    #[test]
    fn a_living_child_is_not_dying_and_its_zombie_is() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let living = stat(pid).unwrap().is_dying();
        child.kill().unwrap();
        // Killed, not yet reaped: a zombie once the kill has landed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stat(pid).is_some_and(|s| s.state != 'Z') && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let zombie = stat(pid).unwrap().is_dying();
        child.wait().unwrap();
        assert!(!living && zombie, "living: {living}, zombie: {zombie}");
    }

    #[test]
    fn a_truncated_stat_is_no_process() {
        assert!(parse_stat(1, "1 (init) S 0 1").is_none());
        assert!(parse_stat(1, "1 init S 0").is_none());
        assert!(parse_stat(1, "").is_none());
    }

    #[test]
    fn own_children_are_found() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        let found = children_of(me).iter().any(|c| c.pid == pid);
        let below = descendants_of(me).iter().any(|c| c.pid == pid);
        assert_eq!(parent_of(pid), Some(me));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found && below, "children {found}, descendants {below}");
    }
}
