//! Thin wrappers over the socket system calls both backends use: errors as
//! `io::Error`, `EINTR` retried, `MSG_NOSIGNAL` on every send.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{frame, syscall, wire};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Whether `e` says the socket has no data or no room now (EAGAIN): by the
/// error number, without `kind()`'s decoding, since an idle poll asks
/// every time (callgrind: some 20 instructions a check).
#[inline]
pub(crate) fn would_block(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN)
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A socket address in the kernel's layout, kept at a stable place (boxed by
/// its owner) while an io_uring CONNECT reads it.
#[derive(Clone, Copy)]
pub(crate) struct SockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl SockAddr {
    pub(crate) fn new(addr: SocketAddr) -> SockAddr {
        // SAFETY: sockaddr_storage is plain data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // sockaddr_in.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
                size_of::<libc::sockaddr_in6>()
            }
        };
        SockAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    pub(crate) fn as_ptr(&self) -> *const libc::sockaddr {
        &self.storage as *const _ as *const libc::sockaddr
    }

    pub(crate) fn len(&self) -> libc::socklen_t {
        self.len
    }
}

/// A `sockaddr` as the kernel filled it (getsockname, getifaddrs).
///
/// # Safety
/// `sa` must point to a valid socket address of its family's size.
pub(crate) unsafe fn to_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: the caller guarantees a valid address of its family.
    unsafe {
        match (*sa).sa_family as libc::c_int {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(
                    sin.sin_addr.s_addr.to_ne_bytes(),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// A new TCP socket for `addr`'s family, close-on-exec, with Nagle off.
pub(crate) fn tcp_socket(addr: &SocketAddr, nonblocking: bool) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: plain system call.
    let fd = cvt(unsafe { libc::socket(family, ty, 0) })?;
    // SAFETY: `fd` is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_nodelay(fd.as_raw_fd())?;
    Ok(fd)
}

/// TCP_NODELAY: frames are whole messages; waiting to coalesce them only
/// adds latency.
pub(crate) fn set_nodelay(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` outlives the call; the length matches.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// TCP keepalive so a host that vanished without a reset (power loss, a
/// cut cable) fails the connection after about `after`: the first probe
/// after half of it idle, then four probes an eighth apart.
pub(crate) fn set_keepalive(fd: RawFd, after: std::time::Duration) -> io::Result<()> {
    let secs = after.as_secs().clamp(2, 1 << 20) as libc::c_int;
    for (level, opt, val) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 2).max(1)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (secs / 8).max(1)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4),
    ] {
        // SAFETY: `val` outlives the call; the length matches.
        cvt(unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                &val as *const _ as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

/// `SO_KEEPALIVE` of `fd` and its `TCP_KEEPIDLE` in seconds (for tests).
#[cfg(test)]
pub(crate) fn keepalive_of(fd: RawFd) -> io::Result<(bool, i32)> {
    let get = |level, opt| -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` outlive the call and describe `v`.
        cvt(unsafe {
            libc::getsockopt(
                fd,
                level,
                opt,
                &mut v as *mut _ as *mut libc::c_void,
                &mut len,
            )
        })?;
        Ok(v)
    };
    Ok((
        get(libc::SOL_SOCKET, libc::SO_KEEPALIVE)? != 0,
        get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)?,
    ))
}

/// A listening socket on `addr` (port 0: ephemeral); returns it and the
/// address it got.
pub(crate) fn listen(addr: SocketAddr, nonblocking: bool) -> io::Result<(OwnedFd, SocketAddr)> {
    let fd = tcp_socket(&addr, nonblocking)?;
    let sa = SockAddr::new(addr);
    // SAFETY: `sa` is a valid address of `len` bytes.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), sa.as_ptr(), sa.len()) })?;
    // SAFETY: plain system call.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 1024) })?;
    // SAFETY: zeroed storage is valid; the kernel fills at most `len` bytes.
    let mut st: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `st` has `len` bytes of room.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            &mut st as *mut _ as *mut libc::sockaddr,
            &mut len,
        )
    })?;
    // SAFETY: the kernel wrote a valid address of our socket's family.
    let ip = unsafe { to_ip(&st as *const _ as *const libc::sockaddr) };
    let port = match st.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says which layout it is.
            u16::from_be(unsafe { (*(&st as *const _ as *const libc::sockaddr_in)).sin_port })
        }
        // SAFETY: the family says which layout it is.
        _ => u16::from_be(unsafe { (*(&st as *const _ as *const libc::sockaddr_in6)).sin6_port }),
    };
    let ip = ip.ok_or_else(|| io::Error::other("getsockname: unknown family"))?;
    let local = match ip {
        IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, 0)),
    };
    Ok((fd, local))
}

/// Starts a connect on a nonblocking socket: `Ok(true)` connected,
/// `Ok(false)` in progress.
pub(crate) fn connect(fd: RawFd, addr: &SockAddr) -> io::Result<bool> {
    // SAFETY: `addr` is a valid address of `len` bytes.
    match cvt(unsafe { libc::connect(fd, addr.as_ptr(), addr.len()) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pending error of a socket (result of a nonblocking connect).
pub(crate) fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` has `len` bytes of room.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

/// One pending connection, nonblocking and close-on-exec, Nagle off.
pub(crate) fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: null address pointers are allowed.
        let r = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        match cvt(r) {
            // SAFETY: a fresh descriptor we own.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Nonblocking receive into `len` bytes at `buf`.
///
/// # Safety
/// `buf..buf+len` must be writable.
pub(crate) unsafe fn recv(fd: RawFd, buf: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller guarantees the buffer.
    unsafe { recv_nb(fd, buf, len) }.map_err(io::Error::from_raw_os_error)
}

/// [`recv`] with the error as its bare number: the busy wait's reads of
/// an empty socket (EAGAIN, most of them) build and drop no `io::Error`
/// (callgrind: some 35 instructions a call); `io::Error::from_raw_os_error`
/// makes one where it is reported.
///
/// # Safety
/// `buf..buf+len` must be writable.
#[inline]
pub(crate) unsafe fn recv_nb(fd: RawFd, buf: *mut u8, len: usize) -> Result<usize, i32> {
    loop {
        // SAFETY: the caller guarantees the buffer.
        match unsafe { syscall::recv(fd, buf, len) } {
            Err(libc::EINTR) => continue,
            r => return r,
        }
    }
}

/// Up to this many bytes in all, a frame is written into one buffer on
/// the stack and sent by `send(2)` rather than `sendmsg(2)` with an iovec
/// per part: a small frame (prefix, header, payload) is the whole of a
/// ping-pong's send, and the kernel's `sendmsg` costs more per call (it
/// first copies in the msghdr and the iovec array). Loopback TCP, one
/// thread, CPU time per 48-byte send + recv: `sendmsg` of 3 iovecs
/// 0.2-0.7 µs more than one `send`, one iovec in between
/// (BENCHMARKS.md). Writing 512 bytes costs far less than that.
pub(crate) const GATHER_MAX: usize = 512;

/// Nonblocking `send(2)` of one buffer, without SIGPIPE.
#[inline]
fn send_one(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    loop {
        match syscall::send(fd, data) {
            Err(libc::EINTR) => continue,
            r => return r.map_err(io::Error::from_raw_os_error),
        }
    }
}

/// Nonblocking send of one frame (`frame.rs`: prefix, header, payload),
/// without SIGPIPE: written in place into a stack buffer and sent by one
/// `send(2)` up to `GATHER_MAX` bytes (the direct send of a small message),
/// else by `send`'s `sendmsg(2)` of the three parts.
#[inline]
pub(crate) fn send_frame(fd: RawFd, header: &[u8], payload: &[u8]) -> io::Result<usize> {
    let total = frame::len(header, payload);
    if total > GATHER_MAX {
        let prefix = wire::encode_prefix(header.len(), payload.len());
        return send(fd, &[&prefix, header, payload]);
    }
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); GATHER_MAX];
    let at: *mut u8 = buf.as_mut_ptr().cast();
    // SAFETY: `total <= GATHER_MAX` bytes of our own stack buffer, which
    // the parts (the caller's) do not overlap.
    unsafe { frame::write(at, header, payload) };
    send_one(fd, {
        // SAFETY: the first `total` bytes were just written.
        unsafe { std::slice::from_raw_parts(at, total) }
    })
}

/// Nonblocking send of the concatenation of `parts` (at most 3 non-empty
/// ones), without SIGPIPE: one buffer by `send(2)`, more by one
/// `sendmsg(2)` (a small frame is written into one buffer first,
/// [`send_frame`]).
pub(crate) fn send(fd: RawFd, parts: &[&[u8]]) -> io::Result<usize> {
    if let [one] = parts {
        return send_one(fd, one);
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 3];
    let mut n = 0;
    for p in parts.iter().filter(|p| !p.is_empty()).take(3) {
        iov[n] = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
        n += 1;
    }
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    loop {
        // SAFETY: `msg` points at `n` iovecs over live slices the kernel
        // only reads.
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        match cvt_size(r) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

/// Both directions: wakes every operation blocked on the socket.
pub(crate) fn shutdown(fd: RawFd) {
    // SAFETY: plain system call; errors (not connected) do not matter.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// The sending side only: the peer reads end of stream once it has every
/// byte written before; receiving goes on.
pub(crate) fn shutdown_write(fd: RawFd) {
    // SAFETY: plain system call; errors (not connected) do not matter.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// `poll(2)` with timeout 0 over `fds`.
pub(crate) fn poll_now(fds: &mut [libc::pollfd]) -> io::Result<usize> {
    // SAFETY: `fds` is a valid array of its length.
    Ok(cvt(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) })? as usize)
}

/// A level-triggered epoll set, for finding readable connections among many.
pub(crate) struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain system call.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` outlives the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    pub(crate) fn del(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above; failure (not registered) does not matter.
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Tokens of ready descriptors, without waiting.
    pub(crate) fn ready(&mut self) -> io::Result<impl Iterator<Item = u64> + '_> {
        let n = loop {
            // SAFETY: `events` has room for its length.
            let r = unsafe {
                libc::epoll_wait(
                    self.fd.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    self.events.len() as i32,
                    0,
                )
            };
            match cvt(r) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r? as usize,
            }
        };
        Ok(self.events[..n].iter().map(|e| e.u64))
    }

    /// Blocks until a descriptor of the set is ready or `timeout` (rounded
    /// up to whole milliseconds, at least one) passes; interrupted by a
    /// signal, returns early. The events are not taken: the set is
    /// level-triggered, so the next `ready` reports them again. True if
    /// the timeout passed with nothing ready.
    pub(crate) fn wait(&mut self, timeout: std::time::Duration) -> bool {
        let ms = timeout
            .as_micros()
            .div_ceil(1000)
            .clamp(1, i32::MAX as u128) as i32;
        // SAFETY: `events` has room for its length.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                ms,
            )
        };
        n == 0
    }
}

/// Whether the connected socket's peer is on another host: its address is
/// neither a loopback one nor our own end's (traffic to our own address
/// goes through loopback too). False when either address is unknown.
pub(crate) fn peer_on_other_host(fd: RawFd) -> bool {
    // SAFETY: the stream only borrows `fd` (never dropped, so never
    // closed) for two getsockname/getpeername calls.
    let s = std::mem::ManuallyDrop::new(unsafe {
        <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    match (s.local_addr(), s.peer_addr()) {
        (Ok(me), Ok(peer)) => !peer.ip().is_loopback() && peer.ip() != me.ip(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// `recv` reports an empty socket as `would_block` and an error by its
    /// number (the bare call's own cases are `syscall.rs`'s tests).
    #[test]
    fn recv_maps_errors_to_io_errors() {
        use std::os::fd::AsRawFd;
        fn rd_io(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
            // SAFETY: `buf` is writable for its whole length.
            unsafe { recv(fd, buf.as_mut_ptr(), buf.len()) }
        }
        let (_a, b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 8];
        let e = rd_io(b.as_raw_fd(), &mut buf).unwrap_err();
        assert!(would_block(&e), "{e}");
        let e = rd_io(-1, &mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }

    /// A small frame (written into one buffer, one `send`), a large one
    /// (`sendmsg` of its parts) and a lone buffer all arrive whole and in
    /// order.
    #[test]
    fn frames_and_buffers_arrive_whole_and_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let payload: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
        let mut want = Vec::new();
        for (header, body) in [(&[2u8; 40][..], &[3u8; 8][..]), (&[5; 40], &payload[..])] {
            let n = send_frame(a.as_raw_fd(), header, body).unwrap();
            let prefix = wire::encode_prefix(header.len(), body.len());
            let whole = [&prefix[..], header, body].concat();
            assert_eq!(n, whole.len());
            want.extend_from_slice(&whole);
        }
        assert_eq!(send(a.as_raw_fd(), &[b"tail"]).unwrap(), 4);
        want.extend_from_slice(b"tail");
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, want);
    }
}
