//! The table itself. Order: as the README lists them. A default of `""`
//! means unset (the setting then falls back as its doc says).

/// Which part of Rivet reads a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Engine,
    Shm,
    Tcp,
    Ofi,
    Pmi,
    Launcher,
    Bench,
    /// Test hooks: listed so they draw no warning, kept out of the README.
    Test,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Engine => "engine",
            Scope::Shm => "shared memory",
            Scope::Tcp => "tcp netmod",
            Scope::Ofi => "ofi netmod",
            Scope::Pmi => "PMI client",
            Scope::Launcher => "rivetrun",
            Scope::Bench => "rivet-bench",
            Scope::Test => "tests only",
        }
    }
}

/// One `RIVET_*` variable.
#[derive(Debug, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    /// As a user would write it; `""`: unset.
    pub default: &'static str,
    pub scope: Scope,
    pub doc: &'static str,
}

const fn s(name: &'static str, default: &'static str, scope: Scope, doc: &'static str) -> Setting {
    Setting {
        name,
        default,
        scope,
        doc,
    }
}

pub static SETTINGS: &[Setting] = &[
    s("RIVET_NETMOD", "auto", Scope::Engine,
      "`auto`: shared memory on the node; to other nodes the ofi netmod where `RIVET_OFI_PROVIDER` names a provider or libfabric has one faster than tcp (`verbs;ofi_rxm`, `efa`, `cxi`, `psm3`; libfabric is loaded for this only where an interconnect device exists: `/sys/class/infiniband`, `/sys/class/cxi`, `/dev/hfi1*`), else tcp. `tcp`: tcp to every peer, on-node ones too (testing, benchmarks). `ofi`: the libfabric netmod to every peer. `rivet-bench info` (under rivetrun) says which is in use and why"),
    s("RIVET_OFI_PROVIDER", "", Scope::Ofi,
      "ofi: a provider name as `fi_info` prints it (`tcp;ofi_rxm`, `shm`, `verbs;ofi_rxm`), matched exactly; setting it also makes `auto` use ofi for other nodes. Unset: libfabric's choice, which honours its own `FI_PROVIDER`"),
    s("RIVET_OFI_DOMAIN", "", Scope::Ofi,
      "ofi: a domain (`mlx5_0`, `eth0`); unset: the provider's first (its `lo` where it has one, for a job all on one node)"),
    s("RIVET_OFI_EAGER_MAX", "", Scope::Ofi,
      "ofi: largest eager message; unset: `RIVET_EAGER_MAX`, else 64K (8K on `shm`, whose rendezvous reads are single copy)"),
    s("RIVET_OFI_PIECE", "1M", Scope::Ofi,
      "ofi: the largest payload of one message when rendezvous data is streamed"),
    s("RIVET_OFI_RMA", "1", Scope::Ofi,
      "ofi: `0` streams rendezvous data with sends even where the provider could read it (`FI_RMA`)"),
    s("RIVET_OFI_TIMEOUT", "60s", Scope::Ofi,
      "ofi: how long a peer may leave us without progress before it counts as failed (`500ms`, `30s`)"),
    s("RIVET_TCP_BACKEND", "auto", Scope::Tcp,
      "`auto` (io_uring where the kernel allows it, else poll; `rivet-bench info` says which and why), `uring` (a start-up error where it is unavailable), `poll` (epoll and plain system calls); BENCHMARKS.md compares them"),
    s("RIVET_TCP_IFACE", "", Scope::Tcp,
      "comma-separated interface names whose addresses peers connect to; unset: every up non-loopback interface (`lo` if that is all)"),
    s("RIVET_TCP_EAGER_MAX", "", Scope::Tcp,
      "tcp: largest eager message; unset: `RIVET_EAGER_MAX`, else 64K"),
    s("RIVET_TCP_PIECE", "1M", Scope::Tcp,
      "tcp: the size of the pieces a rendezvous message streams in"),
    s("RIVET_TCP_KEEPALIVE", "60s", Scope::Tcp,
      "tcp: a connection whose peer host stops answering (gone without a reset: power loss, a cut link) fails after about this long: TCP keepalive probes after half of it idle, then four an eighth apart. `0` or `off`: the kernel's settings (no probes)"),
    s("RIVET_TCP_HANDSHAKE_TIMEOUT", "10s", Scope::Tcp,
      "tcp: an accepted connection that has not sent its whole HELLO by then is closed, so a stranger holding a connection open costs nothing"),
    s("RIVET_TCP_STATS", "", Scope::Tcp,
      "tcp: `1`: when the netmod closes, each rank prints one line on stderr with its system calls and, on io_uring, the bytes each receive path took (provided buffers, which cost one copy more, direct recv, single-shot RECV)"),
    s("RIVET_NETMOD_EAGER_WINDOW", "4M", Scope::Engine,
      "eager bytes a sender may have in flight to one netmod peer before it waits for credit: bounds what a receiver buffers for messages it has not asked for (at least 4K)"),
    s("RIVET_EAGER_MAX", "", Scope::Engine,
      "bytes; larger messages use rendezvous (every transport, unless its own limit is set). Sizes here and in `rivet-bench` options take binary suffixes: `16K`, `1MiB` (`KB`/`MB` are refused as ambiguous)"),
    s("RIVET_SHM_EAGER_MAX", "64K", Scope::Shm,
      "the same for shared memory only (wins over `RIVET_EAGER_MAX`); a message longer than one cell's payload spans up to 4 cells, so the cap is 4 cells' payload (fewer with under 8 cells per rank)"),
    s("RIVET_SHM_LMT", "auto", Scope::Shm,
      "`auto`, `cma` or `copy`: how large messages cross shared memory"),
    s("RIVET_SHM_SPLIT_MIN", "64K", Scope::Shm,
      "bytes (0: never): a single-copy message from this size on is copied by both ranks at once, the receiver reading the first half while the sender writes the second (`process_vm_writev`)"),
    s("RIVET_THREAD_LEVEL", "", Scope::Engine,
      "`single`, `funneled`, `serialized` or `multiple`: raises the thread level the program asks for (never lowers it); at `multiple` each call locks the state of one worker (`RIVET_WORKERS`)"),
    s("RIVET_WORKERS", "4", Scope::Engine,
      "1 to 32: workers at `multiple` (each its own lock, requests, matching, shared-memory lane and netmod instance; a communicator of our world runs on one, by context id); in a one-node job on shared memory alone the node's leader decides for the node; with a netmod every rank must use the same; shared memory grows by that factor, and each worker opens its own tcp listener or ofi endpoint"),
    s("RIVET_SHM_FASTBOX_SIZE", "32K", Scope::Shm,
      "bytes of each per-pair ring (a power of two)"),
    s("RIVET_SHM_FASTBOX_MAX", "1K", Scope::Shm,
      "the largest payload sent through a per-pair ring"),
    s("RIVET_SHM_CELLS", "64", Scope::Shm,
      "cells per rank of the shared-memory queues"),
    s("RIVET_SHM_CELL_SIZE", "16K", Scope::Shm,
      "bytes per cell of the shared-memory queues, header included (a power of two)"),
    s("RIVET_YIELD", "auto", Scope::Engine,
      "`auto` (yield when idle if local ranks outnumber CPUs), `always`, `never`; a yielding wait that has yielded a few times with nothing to do blocks in the tcp netmod for up to 1 ms instead (one thread, one worker, no shared memory)"),
    s("RIVET_PMI", "auto", Scope::Pmi,
      "`auto`: PMI-1 over `PMI_FD`/`PMI_PORT` if set, else PMIx if `PMIX_NAMESPACE` and `PMIX_RANK` are (OpenPMIx's client), else a singleton; `pmi1`: never PMIx (a PMIx-only launch is an error); `pmi2`: PMI-2 over `PMI_FD`/`PMI_PORT` (rivetrun, `srun --mpi=pmi2`), an error without them; `pmix`: PMIx or an error (under rivetrun: its PMIx server instead of PMI-1)"),
    s("RIVET_PMIX_PREPUT", "", Scope::Pmi,
      "set by a Rivet process for the children it spawns through PMIx: the pairs the parent pre-put for them (its port), which their PMIx client answers gets from; never set it by hand"),
    s("RIVET_JOBID", "", Scope::Launcher,
      "set by rivetrun for its ranks; names their shm segments so rivetrun can remove leftovers"),
    s("RIVET_JOB_SECRET", "", Scope::Launcher,
      "set by rivetrun for every process of the job (a random key): tcp and ofi HELLOs between them carry a MAC with it; never printed"),
    s("RIVET_PMI_SECRET", "", Scope::Launcher,
      "set by rivetrun (or a host's proxy) with `--pmi-port`: what a rank presents on its PMI connection before anything is served; never printed"),
    s("RIVET_NAMESERVER", "", Scope::Launcher,
      "`HOST:PORT` of a name server (`rivetrun --name-server`) for rivetrun's jobs; `--nameserver` wins"),
    s("RIVET_IMPI_DIRECT", "1", Scope::Launcher,
      "`rivetrun --impi-client`: `1` gives every rank a listening socket and sends their ports (`RIVET_P_PORT`), so ranks of Rivet clients talk over direct channels; `0` sends none, as a client of another implementation, so every channel to another client runs through the agents' host links"),
    s("RIVET_LAUNCHER_EXTRA_ARGS", "", Scope::Launcher,
      "multi-host jobs: words (split on white space) that `--launcher ssh` or `rsh` puts before the host, e.g. `-F FILE` or `-p PORT` (Hydra's `HYDRA_LAUNCHER_EXTRA_ARGS`); rivetrun's own ssh options (`BatchMode=yes`, `ConnectTimeout=10`) come after them"),
    s("RIVET_PROXY_FANOUT", "8", Scope::Launcher,
      "multi-host jobs: barriers go up a tree of per-node proxies with this fan-out, so rivetrun handles at most this many barrier messages each way per barrier"),
    s("RIVET_BENCH_FONT", "", Scope::Bench,
      "a TrueType font file for `rivet-bench plot` and `compare --plot`; unset: DejaVu Sans or another usual system font"),
    s("RIVET_TCP_URING_INJECT_FAILURE", "", Scope::Test,
      "`1`: the io_uring backend fails as if the kernel refused it (tests of the fallback)"),
    s("RIVET_TEST_TAG", "", Scope::Test,
      "set by the integration tests on every job, to find processes that outlive it"),
    s("RIVET_BLESS", "", Scope::Test,
      "set: tests that compare generated files rewrite them instead (`rivet.h`, the README's settings table)"),
    s("RIVET_SHM_TEST_CHILD", "", Scope::Test,
      "set by shared-memory unit tests in the child processes they start"),
];
