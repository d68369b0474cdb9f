//! bench io's reporting: the table printed, the locality figures and the JSON report.

use super::*;

/// Local bytes over all bytes of a phase, `None` when nothing moved.
pub(super) fn local_fraction(t: &Traffic, write: bool) -> Option<f64> {
    let (l, r) = if write {
        (t.local_written + t.direct_written, t.remote_written)
    } else {
        (t.local_read + t.direct_read, t.remote_read)
    };
    (l + r > 0).then(|| l as f64 / (l + r) as f64)
}

pub(super) fn print_locality(ours: &Phases, total: u64, servers_known: bool) {
    let f = |t: Option<Traffic>, w| {
        t.and_then(|t| local_fraction(&t, w))
            .map(|x| format!("{:.0}%", x * 100.0))
            .unwrap_or("-".into())
    };
    let c = |s: Option<f64>| {
        cpu::per_gib(s, total)
            .map(|x| format!("{x:.2}"))
            .unwrap_or("-".into())
    };
    println!(
        "bytes on the client's own host: write {}, read {}; CPU s/GiB servers {} / {}, servers+clients {} / {} (write / read){}",
        f(ours.write_traffic, true),
        f(ours.read_traffic, false),
        c(ours.write_cpu.server_s),
        c(ours.read_cpu.server_s),
        c(ours.write_cpu.total_s()),
        c(ours.read_cpu.total_s()),
        if servers_known { "" } else { " (server CPU unknown: no pid files beside the cluster file)" }
    );
}

pub(super) fn print_table(
    sh: &Shape,
    r: &Remote,
    ours: &Phases,
    mount: Option<&Phases>,
    ceiling: Option<f64>,
    base: Option<&Phases>,
) {
    println!(
        "bench io: {} clients x {} transfers of {} ({} each), {}, stripe {} x {}",
        sh.clients,
        sh.segments,
        format_size(sh.xfer),
        format_size(sh.block()),
        if sh.file_per_process {
            "file per process"
        } else if sh.interleaved {
            "one shared file, interleaved"
        } else {
            "one shared file"
        },
        format_size(r.stripe_size as u64),
        r.stripe_count
    );
    println!(
        "{:<12} {:>14} {:>12} {:>10} {:>16} {:>11}",
        "phase", "MiB/s", "ceiling", "% ceiling", "baseline MiB/s", "% baseline"
    );
    let ceil = ceiling.map(|c| format!("{c:.0}")).unwrap_or("-".into());
    let mut rows = vec![
        ("write", ours.write_mib_s, base.map(|b| b.write_mib_s)),
        ("read", ours.read_mib_s, base.map(|b| b.read_mib_s)),
    ];
    if let Some(m) = mount {
        rows.push(("mount write", m.write_mib_s, base.map(|b| b.write_mib_s)));
        rows.push(("mount read", m.read_mib_s, base.map(|b| b.read_mib_s)));
    }
    for (name, v, b) in rows {
        println!(
            "{:<12} {:>14.0} {:>12} {:>10} {:>16} {:>11}",
            name,
            v,
            ceil,
            pct(v, ceiling),
            b.map(|b| format!("{b:.0}")).unwrap_or("-".into()),
            pct(v, b)
        );
    }
    println!(
        "verified: yes   page cache dropped before reads: {}",
        if ours.caches_dropped {
            "yes"
        } else {
            "no (not root)"
        }
    );
}

/// The figures `bench io` and `stripefs-mpi io` both report, under the same keys.
pub(super) fn shared_report(
    a: &IoArgs,
    sh: &Shape,
    remote: &Remote,
    cluster: &ClusterConfig,
    seed: u64,
    ours: &Phases,
    ceiling: Option<f64>,
) -> serde_json::Value {
    json!({
        "benchmark": "io",
        "clients": a.clients,
        "block_bytes": sh.block(),
        "xfer_bytes": sh.xfer,
        "segments": sh.segments,
        "interleaved": sh.interleaved,
        "file_per_process": a.file_per_process,
        "stripe_size_bytes": remote.stripe_size,
        "stripe_count": remote.stripe_count,
        "servers": remote.servers,
        "host": cluster.client_host(),
        "seed": seed,
        "write_mib_s": ours.write_mib_s,
        "read_mib_s": ours.read_mib_s,
        "write_s": ours.write_s,
        "read_s": ours.read_s,
        "verified": true,
        "caches_dropped": ours.caches_dropped,
        "ceiling_mib_s": ceiling,
    })
}

/// Adds `more`'s fields to the object `report`.
pub(super) fn extend(report: &mut serde_json::Value, more: serde_json::Value) {
    if let (Some(r), serde_json::Value::Object(m)) = (report.as_object_mut(), more) {
        r.extend(m);
    }
}
