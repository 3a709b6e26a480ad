//! The hand-written libfabric bindings (`ofi::sys`) against the C headers:
//! a C program prints `sizeof`/`offsetof` of every struct and field bound
//! and the value of every constant, compiled with the system `cc` into a
//! temporary directory and compared with the Rust side. It needs `cc` and
//! the headers (Debian: libfabric-dev), and fails without them.

#![cfg(feature = "ofi")]

use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use rivet_netmods::ofi::sys::*;

/// `(C expression, Rust value)` pairs.
type Checks = Vec<(String, u64)>;

/// Size of each struct and the offset of each field; a trailing `_` of a
/// Rust field name (`type_`) is not in the C name.
macro_rules! structs {
    ($checks:ident; $($s:ident { $($f:ident),* $(,)? })*) => {$(
        $checks.push((format!("sizeof(struct {})", stringify!($s)), size_of::<$s>() as u64));
        $(
            $checks.push((
                format!(
                    "offsetof(struct {}, {})",
                    stringify!($s),
                    stringify!($f).trim_end_matches('_')
                ),
                offset_of!($s, $f) as u64,
            ));
        )*
    )*};
}

macro_rules! constants {
    ($checks:ident; $($c:ident),* $(,)?) => {$(
        $checks.push((stringify!($c).to_string(), $c as u64));
    )*};
}

fn checks() -> Checks {
    let mut c = Checks::new();
    structs!(c;
        fi_tx_attr { caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit,
                     rma_iov_limit, tclass }
        fi_rx_attr { caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size,
                     iov_limit }
        fi_ep_attr { type_, protocol, protocol_version, max_msg_size, msg_prefix_size,
                     max_order_raw_size, max_order_war_size, max_order_waw_size,
                     mem_tag_format, tx_ctx_cnt, rx_ctx_cnt, auth_key_size, auth_key }
        fi_domain_attr { domain, name, threading, control_progress, data_progress,
                         resource_mgmt, av_type, mr_mode, mr_key_size, cq_data_size, cq_cnt,
                         ep_cnt, tx_ctx_cnt, rx_ctx_cnt, max_ep_tx_ctx, max_ep_rx_ctx,
                         max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit, caps, mode,
                         auth_key, auth_key_size, max_err_data, mr_cnt, tclass }
        fi_fabric_attr { fabric, name, prov_name, prov_version, api_version }
        fi_info { next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr,
                  dest_addr, handle, tx_attr, rx_attr, ep_attr, domain_attr, fabric_attr, nic }
        fi_ops { size, close, bind, control, ops_open, tostr, ops_set }
        fid { fclass, context, ops }
        fi_ops_fabric { size, domain, passive_ep, eq_open, wait_open, trywait, domain2 }
        fid_fabric { fid, ops, api_version }
        fi_context2 { internal }
        fi_av_attr { type_, rx_ctx_bits, count, ep_per_node, name, map_addr, flags }
        fi_ops_av { size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set }
        fid_av { fid, ops }
        fid_mr { fid, mem_desc, key }
        fi_ops_domain { size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open,
                        stx_ctx, srx_ctx, query_atomic, query_collective, endpoint2 }
        fi_ops_mr { size, reg, regv, regattr }
        fid_domain { fid, ops, mr }
        fi_ops_ep { size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left }
        fi_ops_cm { size, setname, getname, getpeer, connect, listen, accept, reject, shutdown,
                    join }
        fi_ops_tagged { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata,
                        injectdata }
        fi_ops_rma { size, read, readv, readmsg, write, writev, writemsg, inject, writedata,
                     injectdata }
        fid_ep { fid, ops, cm, msg, rma, tagged, atomic, collective }
        fi_cq_attr { size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set }
        fi_cq_tagged_entry { op_context, flags, len, buf, data, tag }
        fi_cq_err_entry { op_context, flags, len, buf, data, tag, olen, err, prov_errno,
                          err_data, err_data_size }
        fi_ops_cq { size, read, readfrom, readerr, sread, sreadfrom, signal, strerror }
        fid_cq { fid, ops }
    );
    constants!(c;
        FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_READ, FI_WRITE, FI_RECV, FI_SEND, FI_TRANSMIT,
        FI_REMOTE_READ, FI_REMOTE_WRITE, FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_COMPLETION,
        FI_INJECT, FI_HMEM, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SOURCE, FI_DIRECTED_RECV,
        FI_CONTEXT, FI_MSG_PREFIX, FI_ASYNC_IOV, FI_RX_CQ_DATA, FI_LOCAL_MR, FI_CONTEXT2,
        FI_ORDER_SAS, FI_MR_BASIC, FI_MR_SCALABLE, FI_MR_LOCAL, FI_MR_RAW, FI_MR_VIRT_ADDR,
        FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_ENDPOINT,
        FI_MR_HMEM, FI_EP_RDM, FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE, FI_PROGRESS_AUTO,
        FI_PROGRESS_MANUAL, FI_THREAD_DOMAIN, FI_RM_ENABLED, FI_FORMAT_UNSPEC, FI_SOCKADDR,
        FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_ADDR_STR, FI_ADDR_UNSPEC, FI_ADDR_NOTAVAIL,
        FI_ENABLE, FI_TYPE_INFO, FI_TYPE_CAPS, FI_TYPE_MODE, FI_TYPE_MR_MODE, FI_TYPE_PROTOCOL,
        FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE, FI_SUCCESS, FI_ENOENT, FI_EIO, FI_EAGAIN,
        FI_ENOMEM, FI_EINVAL, FI_ENOSYS, FI_ENODATA, FI_EOPNOTSUPP, FI_ECONNREFUSED,
        FI_ECONNRESET, FI_ENOTCONN, FI_ECANCELED, FI_EOTHER, FI_EAVAIL, FI_ETRUNC, FI_ENORX,
    );
    c.push(("FI_VERSION(1, 17)".into(), FI_VERSION_1_17 as u64));
    c
}

/// Removes the directory when the test ends, pass or fail.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn bindings_match_the_c_headers() {
    let checks = checks();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n\
         #include <rdma/fi_domain.h>\n#include <rdma/fi_endpoint.h>\n#include <rdma/fi_cm.h>\n\
         #include <rdma/fi_tagged.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_eq.h>\n\
         #include <rdma/fi_errno.h>\nint main(void) {\n",
    );
    for (expr, _) in &checks {
        writeln!(src, "  printf(\"%llu\\n\", (unsigned long long)({expr}));").unwrap();
    }
    src.push_str("  return 0;\n}\n");

    let dir = TempDir(std::env::temp_dir().join(format!(
        "rivet-ofi-layout-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let c_file = dir.0.join("layout.c");
    let exe = dir.0.join("layout");
    std::fs::write(&c_file, &src).unwrap();
    let mut cc = Command::new("cc");
    cc.arg("-o").arg(&exe).arg(&c_file);
    if let Ok(out) = Command::new("pkg-config")
        .args(["--cflags", "libfabric"])
        .output()
    {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            cc.arg(flag);
        }
    }
    let out = match cc.output() {
        Ok(o) => o,
        Err(e) => panic!("the libfabric layout check needs a C compiler: cannot run cc: {e}"),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("rdma/") && err.contains("No such file") {
            panic!("the libfabric layout check needs the headers (install libfabric-dev): {err}");
        }
        panic!("the layout program did not compile:\n{err}");
    }
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "the layout program failed");
    let lines: Vec<String> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), checks.len(), "one line per check");
    let mut wrong = Vec::new();
    for ((expr, rust), c) in checks.iter().zip(&lines) {
        if c.parse::<u64>().ok() != Some(*rust) {
            wrong.push(format!("{expr}: C {c}, Rust {rust}"));
        }
    }
    assert!(wrong.is_empty(), "layout differs:\n{}", wrong.join("\n"));
    eprintln!(
        "checked {} sizes, offsets and constants against the C headers",
        checks.len()
    );
}
