//! Running kustomize where no credential and no network can be reached.
//!
//! A package is hostile input, and kustomize reads whatever files and URLs a package names. So the
//! kustomize process is confined by the kernel, whatever the package says; [`crate::refs`] checks
//! references only as a second wall. Between `fork` and `exec` the child:
//!
//! 1. leaves the network: a new network namespace, with only a loopback that is down, so no
//!    address — a cluster's API server, a cloud metadata service, a loopback listener — has a
//!    route. Unprivileged, it first makes a user namespace that maps only its own uid and gid.
//!    Where no namespace can be made (a container under a runtime's default seccomp profile),
//!    Landlock's TCP rules (Linux 6.7, ABI 4) refuse every TCP connect and bind instead;
//! 2. sets `no_new_privs` and restricts itself with Landlock to reading the render's inputs (the
//!    fetched repository and the render's work directory) and executing the kustomize binary.
//!    Everything else — a kubeconfig, `/var/run/secrets/kubernetes.io/serviceaccount/token`,
//!    `/proc/<pid>/environ` — cannot be opened, and nothing can be written or mounted;
//! 3. running as root, drops every capability and locks root out of regaining any at `exec`.
//!
//! Its environment is empty but for `HOME` ([`crate::Kustomize::build`]). When the kernel
//! offers neither wall (no Landlock, or no namespace and no Landlock network rules) the render is
//! refused: kustomize never runs unconfined.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

// Landlock's ABI (include/uapi/linux/landlock.h). The syscall numbers are the same on every
// architecture that has Landlock.
const SYS_LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const SYS_LANDLOCK_ADD_RULE: libc::c_long = 445;
const SYS_LANDLOCK_RESTRICT_SELF: libc::c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
/// Every filesystem access right of ABI 1 (execute through make_sym).
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13; // ABI 2
const FS_TRUNCATE: u64 = 1 << 14; // ABI 3
const FS_IOCTL_DEV: u64 = 1 << 15; // ABI 5
const NET_BIND_TCP: u64 = 1 << 0; // ABI 4
const NET_CONNECT_TCP: u64 = 1 << 1; // ABI 4
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0; // ABI 6
const SCOPE_SIGNAL: u64 = 1 << 1; // ABI 6

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

// Capabilities and securebits (include/uapi/linux/capability.h, securebits.h).
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Set once by a process that runs where no network is reachable at all: the renderer pod
/// ([`crate::remote`]), whose egress deploy/'s NetworkPolicy denies. There a child that can raise
/// no network wall of its own (a pod under the runtime's default seccomp profile on a kernel
/// before 6.7) still renders; everywhere else it is refused.
static NETWORK_WALLED_OUTSIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this process has no network route (see [`NETWORK_WALLED_OUTSIDE`]).
pub fn network_walled_outside() {
    NETWORK_WALLED_OUTSIDE.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled).
pub fn landlock_abi() -> i32 {
    // SAFETY: the version query takes no pointer and changes nothing.
    let v = unsafe { libc::syscall(SYS_LANDLOCK_CREATE_RULESET, std::ptr::null::<RulesetAttr>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION) };
    if v < 0 { 0 } else { v as i32 }
}

/// Why kustomize cannot be confined here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SandboxError {
    #[error("this kernel has no Landlock (Linux 5.13 or later with Landlock enabled is required), so kustomize cannot be kept from reading the operator's credentials; renders are refused")]
    NoLandlock,
    #[error("cannot open {path} to confine kustomize to it: {error}")]
    Open { path: PathBuf, error: String },
}

/// What one kustomize process may read and execute, prepared before the fork: descriptors of the
/// allowed paths and the id maps, so the child does nothing but system calls.
pub struct Confinement {
    abi: i32,
    /// The network is walled off outside this process ([`network_walled_outside`]).
    walled_outside: bool,
    readable: Vec<OwnedFd>,
    executable: OwnedFd,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn open_path(path: &Path) -> Result<OwnedFd, SandboxError> {
    let open_error = |error: String| SandboxError::Open { path: path.to_path_buf(), error };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| open_error(e.to_string()))?;
    // SAFETY: a valid C string; the descriptor returned is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(open_error(io::Error::last_os_error().to_string()));
    }
    // SAFETY: `fd` was just opened and is not owned elsewhere.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

impl Confinement {
    /// Reading under each of `readable` (directories), executing `bin`, nothing else.
    pub fn new(bin: &Path, readable: &[PathBuf]) -> Result<Self, SandboxError> {
        let abi = landlock_abi();
        if abi < 1 {
            return Err(SandboxError::NoLandlock);
        }
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok(Confinement {
            abi,
            walled_outside: NETWORK_WALLED_OUTSIDE.load(std::sync::atomic::Ordering::SeqCst),
            readable: readable.iter().map(|p| open_path(p)).collect::<Result<_, _>>()?,
            executable: open_path(bin)?,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    /// Sets `cmd` up to confine its process; the command keeps the descriptors until it drops.
    pub fn apply(self, cmd: &mut tokio::process::Command) {
        let this = self;
        // SAFETY: `enter` runs between fork and exec and only makes system calls on memory
        // prepared before the fork: it neither allocates nor takes locks.
        unsafe {
            cmd.pre_exec(move || this.enter());
        }
    }

    /// In the child, before `exec`: the three steps of the module documentation.
    fn enter(&self) -> io::Result<()> {
        let netns = leave_network(&self.uid_map, &self.gid_map);
        if !netns && self.abi < 4 && !self.walled_outside {
            // Neither a namespace nor Landlock's TCP rules: the network stays reachable.
            return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
        }
        // SAFETY: plain prctl and Landlock system calls on valid, prepared memory.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut fs = FS_ABI1;
            if self.abi >= 2 { fs |= FS_REFER }
            if self.abi >= 3 { fs |= FS_TRUNCATE }
            if self.abi >= 5 { fs |= FS_IOCTL_DEV }
            let attr = RulesetAttr {
                handled_access_fs: fs,
                handled_access_net: if self.abi >= 4 { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 },
                scoped: if self.abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 },
            };
            let size = match self.abi { 1..=3 => 8, 4 | 5 => 16, _ => std::mem::size_of::<RulesetAttr>() };
            let ruleset = libc::syscall(SYS_LANDLOCK_CREATE_RULESET, &attr as *const RulesetAttr, size, 0u32);
            if ruleset < 0 {
                return Err(io::Error::last_os_error());
            }
            let ruleset = ruleset as libc::c_int;
            let allow = |fd: &OwnedFd, access: u64| {
                let rule = PathBeneathAttr { allowed_access: access, parent_fd: fd.as_raw_fd() };
                if libc::syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule as *const PathBeneathAttr, 0u32) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            };
            for fd in &self.readable {
                allow(fd, FS_READ_FILE | FS_READ_DIR)?;
            }
            allow(&self.executable, FS_EXECUTE | FS_READ_FILE)?;
            if libc::syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(ruleset);
            if libc::geteuid() == 0 {
                drop_capabilities()?;
            }
        }
        Ok(())
    }
}

/// A new network namespace, through a user namespace of the caller's own ids when the caller may
/// not make one directly. False when neither can be made.
fn leave_network(uid_map: &[u8], gid_map: &[u8]) -> bool {
    // SAFETY: unshare and the writes below touch only this process and prepared buffers.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) == 0 {
            return true;
        }
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
            return false;
        }
        write_file(c"/proc/self/setgroups", b"deny") && write_file(c"/proc/self/uid_map", uid_map) && write_file(c"/proc/self/gid_map", gid_map)
    }
}

unsafe fn write_file(path: &CStr, content: &[u8]) -> bool {
    // SAFETY: the caller passes a valid path and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let written = libc::write(fd, content.as_ptr().cast(), content.len());
        libc::close(fd);
        written == content.len() as isize
    }
}

/// Root without capabilities, now and after `exec` (securebits lock root's implicit ones out).
unsafe fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl and capset with valid arguments.
    unsafe {
        let bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The error of spawning a confined kustomize, saying which wall could not be raised.
pub fn spawn_error(bin: &Path, error: io::Error) -> crate::KustomizeError {
    if error.raw_os_error() == Some(libc::ENETUNREACH) {
        return crate::KustomizeError::Isolation(format!(
            "no network namespace can be made here and this kernel's Landlock (ABI {}) has no TCP rules (Linux 6.7 or later), so kustomize cannot be kept off the network; renders are refused",
            landlock_abi()
        ));
    }
    crate::KustomizeError::Spawn(format!("{} (confined): {error}", bin.display()))
}
