//! The seccomp filter: system calls a tool never needs fail with `EPERM`
//! (a Python `PermissionError`, not a dead worker). Built with seccompiler
//! (rust-vmm); installed by the worker itself (see the module above).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Denied whatever their arguments.
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_clock_adjtime,
    libc::SYS_vhangup,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// `ioctl` requests that reach beyond the worker through a terminal:
/// pushing input into it (`TIOCSTI`; `TIOCLINUX`'s paste), or making it the
/// caller's controlling terminal (`TIOCSCTTY`, which root may steal).
// The constants' type is the C library's `Ioctl` (unsigned long on glibc,
// int on musl): the cast is a no-op on some targets only.
#[allow(clippy::unnecessary_cast)]
const TERMINAL_REQUESTS: &[u64] = &[
    libc::TIOCSTI as u64,
    libc::TIOCLINUX as u64,
    libc::TIOCSCTTY as u64,
];

/// Namespace flags `clone` may not carry (it would be `unshare` by another name).
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u64;

#[cfg(target_arch = "x86_64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;

/// The filter as BPF.
pub(super) fn program() -> Result<BpfProgram, seccompiler::Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|call| (*call, Vec::new())).collect();
    // Each namespace flag is its own rule: the rules of a call are or-ed.
    let mut clone_rules = Vec::new();
    for bit in 0..64 {
        let flag = 1u64 << bit;
        if NAMESPACE_FLAGS & flag != 0 {
            clone_rules.push(SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])?);
        }
    }
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(libc::SYS_ioctl, terminal_rules()?);
    let mut program = compile(rules)?;
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS
    // makes the C library fall back to clone, whose flags it can.
    program.splice(0..0, clone3_enosys());
    Ok(program)
}

/// The filter of a worker without `--sandbox`: only the terminal requests
/// fail (see [`TERMINAL_REQUESTS`]).
pub(super) fn terminal_program() -> Result<BpfProgram, seccompiler::Error> {
    compile(BTreeMap::from([(libc::SYS_ioctl, terminal_rules()?)]))
}

/// One rule per request (the rules of a call are or-ed). The kernel reads
/// the request as an `unsigned int`: its low 32 bits are compared.
fn terminal_rules() -> Result<Vec<SeccompRule>, seccompiler::Error> {
    TERMINAL_REQUESTS
        .iter()
        .map(|request| {
            let condition =
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)?;
            Ok(SeccompRule::new(vec![condition])?)
        })
        .collect()
}

/// The rules as BPF: a matching call fails with EPERM, the rest pass.
fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, seccompiler::Error> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    Ok(filter.try_into()?)
}

/// `if nr == clone3: return ERRNO(ENOSYS)`, after the arch check that
/// seccompiler's program starts with would have passed (the first three
/// instructions load and check the arch, then load the number).
fn clone3_enosys() -> Vec<seccompiler::sock_filter> {
    use seccompiler::sock_filter;
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    vec![
        // Load the syscall number (offset 0 of seccomp_data).
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_clone3 as u32,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
    ]
}

/// The program as the shim reads it: each instruction as 8 bytes
/// (`code` u16, `jt` u8, `jf` u8, `k` u32, native order), in hex.
pub(super) fn program_hex() -> std::io::Result<String> {
    hex(program())
}

/// [`terminal_program`] as the shim reads it.
pub(crate) fn terminal_program_hex() -> std::io::Result<String> {
    hex(terminal_program())
}

fn hex(program: Result<BpfProgram, seccompiler::Error>) -> std::io::Result<String> {
    let program = program.map_err(std::io::Error::other)?;
    let mut hex = String::with_capacity(program.len() * 16);
    for instruction in &program {
        let mut bytes = Vec::with_capacity(8);
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
        for b in bytes {
            hex.push_str(&format!("{b:02x}"));
        }
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles() {
        let program = super::program().expect("compiles");
        assert!(program.len() > super::DENIED.len());
    }
}
