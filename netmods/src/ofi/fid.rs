//! Owning wrappers over the raw libfabric objects: each closes its object
//! (`fi_close`, `fi_freeinfo`) when dropped. libfabric wants children
//! closed before their parents (endpoint and memory regions, then address
//! vector and completion queue, then domain, then fabric); the netmod
//! declares its fields in that order, and `Base` holds the parents.

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::{self, NonNull};

use libc::c_void;

use super::sys::*;

/// A libfabric call failed with `-code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FiError {
    pub code: i32,
    pub what: &'static str,
}

impl fmt::Display for FiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.what, strerror(self.code), self.code)
    }
}

/// libfabric's description of error `code` (positive).
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static string (or its
    // own "unknown" text) for any value.
    let s = unsafe { fi_strerror(code) };
    if s.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// `Ok` for 0, else the error.
fn check(ret: i32, what: &'static str) -> Result<(), FiError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(FiError {
            code: ret.abs(),
            what,
        })
    }
}

/// A C string libfabric owns (or null) as a Rust string.
///
/// # Safety
/// `p` must be null or NUL-terminated and valid for the call.
pub(crate) unsafe fn c_str(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

/// libfabric's text for `data` of `kind` (`fi_tostr_r`: `fi_tostr`'s
/// static buffer would race between netmods on different threads).
///
/// # Safety
/// `data` must point at a value of the type `kind` names.
pub(crate) unsafe fn tostr(data: *const c_void, kind: u32) -> String {
    let mut buf = [0 as libc::c_char; 256];
    let p = fi_tostr_r(buf.as_mut_ptr(), buf.len(), data, kind);
    if p.is_null() {
        return String::new();
    }
    c_str(buf.as_ptr())
}

/// A `strdup` copy libfabric may free with `fi_freeinfo`.
fn c_dup(s: &str) -> Result<*mut libc::c_char, FiError> {
    let c = CString::new(s).map_err(|_| FiError {
        code: FI_EINVAL,
        what: "name with a NUL byte",
    })?;
    // SAFETY: `c` is a valid C string; strdup copies it with malloc.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(FiError {
            code: FI_ENOMEM,
            what: "strdup",
        });
    }
    Ok(p)
}

/// An `fi_info` list.
pub(crate) struct Info(NonNull<fi_info>);

impl Info {
    /// An empty `fi_info` with its attribute structs, for hints.
    pub(crate) fn alloc() -> Result<Info, FiError> {
        // SAFETY: plain allocation; freed by Drop.
        let p = unsafe { fi_allocinfo() };
        let p = NonNull::new(p).ok_or(FiError {
            code: FI_ENOMEM,
            what: "fi_allocinfo",
        })?;
        // fi_dupinfo(NULL) allocates every attribute struct; check anyway.
        // SAFETY: `p` is a valid fi_info.
        let i = unsafe { p.as_ref() };
        if i.tx_attr.is_null()
            || i.rx_attr.is_null()
            || i.ep_attr.is_null()
            || i.domain_attr.is_null()
            || i.fabric_attr.is_null()
        {
            // SAFETY: allocated by fi_allocinfo.
            unsafe { fi_freeinfo(p.as_ptr()) };
            return Err(FiError {
                code: FI_ENOMEM,
                what: "fi_allocinfo",
            });
        }
        Ok(Info(p))
    }

    /// The entries libfabric offers for `hints` (API 1.17); `None` if none.
    pub(crate) fn get(hints: &Info) -> Result<Option<Info>, FiError> {
        let mut out = ptr::null_mut();
        // SAFETY: `hints` is a valid fi_info; `out` receives a list we own.
        let ret = unsafe {
            fi_getinfo(
                FI_VERSION_1_17,
                ptr::null(),
                ptr::null(),
                0,
                hints.0.as_ptr(),
                &mut out,
            )
        };
        if ret == -FI_ENODATA {
            return Ok(None);
        }
        check(ret, "fi_getinfo")?;
        Ok(NonNull::new(out).map(Info))
    }

    /// A list of just `entry` (copied).
    pub(crate) fn dup(entry: &fi_info) -> Result<Info, FiError> {
        // SAFETY: `entry` is a valid fi_info; fi_dupinfo copies one entry.
        let p = unsafe { fi_dupinfo(entry) };
        NonNull::new(p).map(Info).ok_or(FiError {
            code: FI_ENOMEM,
            what: "fi_dupinfo",
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &fi_info> {
        let mut next = self.0.as_ptr() as *const fi_info;
        std::iter::from_fn(move || {
            // SAFETY: entries of a list libfabric built, alive while `self` is.
            let i = unsafe { next.as_ref()? };
            next = i.next;
            Some(i)
        })
    }

    pub(crate) fn first(&self) -> &fi_info {
        // SAFETY: a valid, non-null entry owned by `self`.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn as_ptr(&self) -> *mut fi_info {
        self.0.as_ptr()
    }

    /// Mutable access to the first entry's attributes (for hints).
    pub(crate) fn hints(&mut self) -> Hints<'_> {
        // SAFETY: alloc() checked every attribute pointer; we own them all.
        unsafe {
            let i = self.0.as_mut();
            Hints {
                caps: &mut i.caps,
                mode: &mut i.mode,
                tx: &mut *i.tx_attr,
                rx: &mut *i.rx_attr,
                ep: &mut *i.ep_attr,
                domain: &mut *i.domain_attr,
                fabric: &mut *i.fabric_attr,
            }
        }
    }
}

/// The fields of a hints `fi_info` the netmod sets.
pub(crate) struct Hints<'a> {
    pub caps: &'a mut u64,
    pub mode: &'a mut u64,
    pub tx: &'a mut fi_tx_attr,
    pub rx: &'a mut fi_rx_attr,
    pub ep: &'a mut fi_ep_attr,
    pub domain: &'a mut fi_domain_attr,
    pub fabric: &'a mut fi_fabric_attr,
}

impl Hints<'_> {
    /// Only this provider (libfabric frees the copy with the hints).
    pub(crate) fn set_provider(&mut self, name: &str) -> Result<(), FiError> {
        self.fabric.prov_name = c_dup(name)?;
        Ok(())
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: we own the list; nothing points into it after this.
        unsafe { fi_freeinfo(self.0.as_ptr()) }
    }
}

/// Closes `f` when dropped, ignoring the result: there is nothing to do
/// about a failed close at teardown.
macro_rules! owned_fid {
    ($(#[$doc:meta])* $name:ident, $raw:ty) => {
        $(#[$doc])*
        pub(crate) struct $name(NonNull<$raw>);

        impl $name {
            pub(crate) fn raw(&self) -> *mut $raw {
                self.0.as_ptr()
            }

            pub(crate) fn fid(&self) -> *mut fid {
                // SAFETY: every libfabric object starts with its `fid`.
                unsafe { ptr::addr_of_mut!((*self.0.as_ptr()).fid) }
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: a live object we own; its children were closed
                // first (field order of the owners).
                unsafe { fi_close(self.fid()) };
            }
        }
    };
}

owned_fid!(
    /// The fabric (network) the provider serves.
    Fabric,
    fid_fabric
);
owned_fid!(
    /// A domain: one NIC (or the shm segment set) as the provider sees it.
    Domain,
    fid_domain
);
owned_fid!(
    /// The completion queue every operation reports to.
    Cq,
    fid_cq
);
owned_fid!(
    /// The address vector: peer endpoint names to `fi_addr_t`.
    Av,
    fid_av
);
owned_fid!(
    /// The reliable-datagram endpoint.
    Endpoint,
    fid_ep
);
owned_fid!(
    /// A registered memory region.
    Mr,
    fid_mr
);

/// Turns an out-pointer filled by a successful open into its owner.
fn opened<T>(ret: i32, p: *mut T, what: &'static str) -> Result<NonNull<T>, FiError> {
    check(ret, what)?;
    NonNull::new(p).ok_or(FiError {
        code: FI_EOTHER,
        what,
    })
}

impl Fabric {
    pub(crate) fn open(info: &Info) -> Result<Fabric, FiError> {
        let mut f = ptr::null_mut();
        // SAFETY: the entry's fabric_attr is valid; `f` receives the object.
        let ret = unsafe { fi_fabric(info.first().fabric_attr, &mut f, ptr::null_mut()) };
        opened(ret, f, "fi_fabric").map(Fabric)
    }

    pub(crate) fn domain(&self, info: &Info) -> Result<Domain, FiError> {
        let mut d = ptr::null_mut();
        // SAFETY: live fabric, valid info; `d` receives the object.
        let ret = unsafe { fi_domain(self.raw(), info.as_ptr(), &mut d, ptr::null_mut()) };
        opened(ret, d, "fi_domain").map(Domain)
    }
}

impl Domain {
    /// A tagged-format completion queue that is only polled.
    pub(crate) fn cq(&self, size: usize) -> Result<Cq, FiError> {
        let mut attr = fi_cq_attr {
            size,
            flags: 0,
            format: FI_CQ_FORMAT_TAGGED,
            wait_obj: FI_WAIT_NONE,
            signaling_vector: 0,
            wait_cond: 0,
            wait_set: ptr::null_mut(),
        };
        let mut cq = ptr::null_mut();
        // SAFETY: live domain, valid attr; `cq` receives the object.
        let ret = unsafe { fi_cq_open(self.raw(), &mut attr, &mut cq, ptr::null_mut()) };
        opened(ret, cq, "fi_cq_open").map(Cq)
    }

    pub(crate) fn av(&self, kind: u32, count: usize) -> Result<Av, FiError> {
        let mut attr = fi_av_attr {
            type_: kind,
            rx_ctx_bits: 0,
            count,
            ep_per_node: 0,
            name: ptr::null(),
            map_addr: ptr::null_mut(),
            flags: 0,
        };
        let mut av = ptr::null_mut();
        // SAFETY: live domain, valid attr; `av` receives the object.
        let ret = unsafe { fi_av_open(self.raw(), &mut attr, &mut av, ptr::null_mut()) };
        opened(ret, av, "fi_av_open").map(Av)
    }

    pub(crate) fn endpoint(&self, info: &Info) -> Result<Endpoint, FiError> {
        let mut ep = ptr::null_mut();
        // SAFETY: live domain, valid info; `ep` receives the object.
        let ret = unsafe { fi_endpoint(self.raw(), info.as_ptr(), &mut ep, ptr::null_mut()) };
        opened(ret, ep, "fi_endpoint").map(Endpoint)
    }

    /// Registers `buf..buf+len` for `access` (`FI_SEND`, `FI_RECV`,
    /// `FI_READ`, `FI_REMOTE_READ`), asking for `key` where the provider
    /// lets us choose.
    ///
    /// # Safety
    /// The memory must stay allocated while the region is open and used.
    pub(crate) unsafe fn register(
        &self,
        buf: *const u8,
        len: usize,
        access: u64,
        key: u64,
    ) -> Result<Mr, FiError> {
        let mut mr = ptr::null_mut();
        let ret = fi_mr_reg(
            self.raw(),
            buf.cast(),
            len,
            access,
            0,
            key,
            0,
            &mut mr,
            ptr::null_mut(),
        );
        opened(ret, mr, "fi_mr_reg").map(Mr)
    }
}

impl Endpoint {
    /// Binds the queue and address vector and enables the endpoint.
    pub(crate) fn enable(&self, cq: &Cq, av: &Av) -> Result<(), FiError> {
        // SAFETY: all three objects are live and of the same domain.
        unsafe {
            check(
                fi_ep_bind(self.raw(), cq.fid(), FI_TRANSMIT | FI_RECV),
                "fi_ep_bind(cq)",
            )?;
            check(fi_ep_bind(self.raw(), av.fid(), 0), "fi_ep_bind(av)")?;
            check(fi_enable(self.raw()), "fi_enable")
        }
    }

    /// The endpoint's address (`fi_getname`).
    pub(crate) fn name(&self) -> Result<Vec<u8>, FiError> {
        let mut buf = vec![0u8; 64];
        loop {
            let mut len = buf.len();
            // SAFETY: `buf` is writable for `len` bytes.
            let ret = unsafe { fi_getname(self.raw(), buf.as_mut_ptr().cast(), &mut len) };
            if ret == -FI_ETOOSMALL && len > buf.len() && len <= 4096 {
                buf.resize(len, 0);
                continue;
            }
            check(ret, "fi_getname")?;
            buf.truncate(len);
            return Ok(buf);
        }
    }
}

/// `FI_ETOOSMALL`: a buffer was too small (fi_getname says how large).
const FI_ETOOSMALL: i32 = 257;

impl Av {
    /// Inserts one endpoint name; its `fi_addr_t`.
    ///
    /// # Safety
    /// `name` must be at least as long as the domain's address format
    /// reads (checked by the caller against our own name).
    pub(crate) unsafe fn insert(&self, name: &[u8]) -> Result<fi_addr_t, FiError> {
        let mut addr = FI_ADDR_NOTAVAIL;
        let ret = fi_av_insert(
            self.raw(),
            name.as_ptr().cast(),
            1,
            &mut addr,
            0,
            ptr::null_mut(),
        );
        if ret == 1 && addr != FI_ADDR_NOTAVAIL {
            return Ok(addr);
        }
        Err(FiError {
            code: if ret < 0 { -ret } else { FI_EINVAL },
            what: "fi_av_insert",
        })
    }
}

impl Mr {
    pub(crate) fn key(&self) -> u64 {
        // SAFETY: a live region.
        unsafe { fi_mr_key(self.raw()) }
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        // SAFETY: a live region.
        unsafe { fi_mr_desc(self.raw()) }
    }

    /// `FI_MR_ENDPOINT`: attach the region to `ep` and enable it.
    pub(crate) fn bind_enable(&self, ep: &Endpoint) -> Result<(), FiError> {
        // SAFETY: both objects are live and of the same domain.
        unsafe {
            check(fi_bind(self.fid(), ep.fid(), 0), "fi_mr_bind")?;
            check(fi_mr_enable(self.raw()), "fi_mr_enable")
        }
    }
}

/// The parents of the endpoint, in the order they close: address vector
/// and queue, then domain, fabric, and the `fi_info` they were made from.
pub(crate) struct Base {
    pub av: Av,
    pub cq: Cq,
    pub domain: Domain,
    /// Only held: it must outlive the domain.
    #[allow(dead_code)]
    pub fabric: Fabric,
    /// Only held: the objects were opened with it.
    #[allow(dead_code)]
    pub info: Info,
}
