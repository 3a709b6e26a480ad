//! Every command of the control connections (rivetrun ↔ proxy, parent
//! proxy ↔ child proxy), declared once: a message's first word. Both ends
//! name a command only through these constants, so a misspelt one does not
//! compile, and this table is the protocol's one list. The encoding of a
//! message is in `wire`.

macro_rules! commands {
    ($($(#[doc = $doc:literal])* $name:ident = $word:literal;)*) => {
        $($(#[doc = $doc])* pub const $name: &str = $word;)*
        /// Every command word, for the test that they are distinct.
        #[cfg(test)]
        pub const ALL: &[&str] = &[$($word),*];
    };
}

commands! {
    // rivetrun → proxy: the job description, one line each, ended by START.
    /// `job SIZE KVS`: the job's size and KVS name; opens the description.
    JOB = "job";
    /// `env NAME VALUE`: job-wide before the first APP, else that app's.
    ENV = "env";
    /// `app`: opens the next app (MPMD); PROG, ARG, WDIR and ENV follow.
    APP = "app";
    /// `prog PATH ARGV0`: the app's program.
    PROG = "prog";
    /// `arg WORD`: one more argument of the app.
    ARG = "arg";
    /// `wdir DIR`: the app's working directory.
    WDIR = "wdir";
    /// `app_sizes N...`: each app's rank count (ranks are consecutive).
    APP_SIZES = "app_sizes";
    /// `rank R APPNUM`: one rank this proxy starts.
    RANK = "rank";
    /// `tree HAS_PARENT CHILD...`: the proxy's place in the barrier tree.
    TREE = "tree";
    /// `nodes HOST...`: every host of the job, by node id.
    NODES = "nodes";
    /// `attr KEY VALUE`: a job attribute the ranks can read.
    ATTR = "attr";
    /// `label`: prefix output lines with the rank.
    LABEL = "label";
    /// `report-bindings`: print where each rank is bound.
    REPORT_BINDINGS = "report-bindings";
    /// `pmi-port`: ranks reach PMI on a port, not an inherited fd.
    PMI_PORT = "pmi-port";
    /// `map-by POLICY`, `bind-to LEVEL`: placement on the node.
    MAP_BY = "map-by";
    BIND_TO = "bind-to";
    /// `grace SECONDS`: how long ranks have after a failure before SIGKILL.
    GRACE = "grace";
    /// `start`: the description is complete; start the ranks.
    START = "start";

    // rivetrun → proxy, while the job runs.
    /// `parent ADDR`: where the proxy's tree parent listens.
    PARENT = "parent";
    /// `barrier_out K V ...`: a barrier completed, with every key put since
    /// the last one, job-wide (also parent proxy → child proxy).
    BARRIER_OUT = "barrier_out";
    /// `child_done ID`: that child proxy's ranks all ended.
    CHILD_DONE = "child_done";
    /// `stdin DATA`, `stdin_eof`: rank 0's input.
    STDIN = "stdin";
    STDIN_EOF = "stdin_eof";
    /// `signal N`: forward a signal to the ranks.
    SIGNAL = "signal";
    /// `term`: end the ranks (the job failed elsewhere).
    TERM = "term";
    /// `name_done CONN ok|err LINE|WHY`: the answer to NAME.
    NAME_DONE = "name_done";
    /// `pmi_out CONN BYTES`: a group message for one PMI connection.
    PMI_OUT = "pmi_out";
    /// `dmodex_ask FROM ID NS RANK`: PMIx direct modex, to the rank's proxy.
    DMODEX_ASK = "dmodex_ask";
    /// `dmodex_done ID STATUS HEX`: the answer, to the asking proxy.
    DMODEX_DONE = "dmodex_done";
    /// `coll_out KEY STATUS CONTEXT NODE DATA ...`: a PMIx collective over
    /// some hosts completed, to each of them.
    COLL_OUT = "coll_out";
    /// `fence_failed N STATUS`: whole-job PMIx fence N (the N-th) fails on
    /// every host (a host's `PMIX_TIMEOUT` passed first), to every proxy.
    FENCE_FAILED = "fence_failed";

    // Both ways.
    /// `gend NS RANK [GROUP]`: a PMIx group member ended (proxy → rivetrun:
    /// one of its host; GROUP, one that did not allow it, fails the job).
    GEND = "gend";
    /// `pmix_spawned KVS [NODE] PARENT_NS PARENT_RANK SIZES`: a proxy
    /// spawned KVS (proxy → rivetrun); register it (rivetrun → proxies,
    /// with the spawning NODE).
    PMIX_SPAWNED = "pmix_spawned";

    // proxy → rivetrun.
    /// `hello SECRET PROXY_ID HOSTNAME`: the first line, authenticating it.
    HELLO = "hello";
    /// `listen ADDR`: a proxy with tree children listens there.
    LISTEN = "listen";
    /// `barrier K V ...`: once per barrier per subtree, with its puts (also
    /// child proxy → parent proxy).
    BARRIER = "barrier";
    /// `stranded CHILD`: a child proxy ended before its subtree's barrier.
    STRANDED = "stranded";
    /// `orphaned`: a barrier needs the parent proxy, which ended.
    ORPHANED = "orphaned";
    /// `exit RANK CODE SIGNAL UNFINALIZED`: a rank ended.
    EXIT = "exit";
    /// `abort RANK CODE MESSAGE`: a rank called abort.
    ABORT = "abort";
    /// `error TEXT`: the proxy failed.
    ERROR = "error";
    /// `done JOB_MS PLACED_MS STARTED_MS`: all the node's ranks ended.
    DONE = "done";
    /// `name KVS RANK CONN LINE`: a name-service request.
    NAME = "name";
    /// `pmi KVS RANK CONN LINE`: a group message.
    PMI = "pmi";
    /// `spawned KVS SIZE`: a spawn started processes on this host.
    SPAWNED = "spawned";
    /// `sexit KVS INDEX CODE SIGNAL`: one of them ended.
    SEXIT = "sexit";
    /// `dmodex ID NS RANK`: PMIx direct modex request.
    DMODEX = "dmodex";
    /// `dmodex_data FROM ID STATUS HEX`: a node's answer to DMODEX_ASK.
    DMODEX_DATA = "dmodex_data";
    /// `coll KEY NODES DATA`: a node's part of a PMIx fence over a subset
    /// or a group.
    COLL = "coll";
    /// `coll_late KEY`: that collective's `PMIX_TIMEOUT` passed on this
    /// node; rivetrun fails it everywhere unless it completed.
    COLL_LATE = "coll_late";
    /// `fence_late N`: whole-job PMIx fence N's `PMIX_TIMEOUT` passed on
    /// this node; rivetrun fails it everywhere unless its barrier completed.
    FENCE_LATE = "fence_late";

    // child proxy → parent proxy.
    /// `child SECRET PROXY_ID`: the first line, authenticating it.
    CHILD = "child";
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_command_word_is_distinct_and_one_wire_word() {
        let mut seen = std::collections::HashSet::new();
        for w in super::ALL {
            assert!(seen.insert(w), "{w} declared twice");
            assert!(!w.is_empty() && w.bytes().all(|b| b.is_ascii_graphic() && b != b'%'));
        }
    }
}
