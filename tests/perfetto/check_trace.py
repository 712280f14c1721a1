"""Check a `blkprof export --format perfetto` file with Perfetto's own compiled protos (the
`perfetto` package from PyPI), against `blkprof report --json`.

usage: check_trace.py TRACE.pftrace REPORT.json OUT.json

Asserts, printing what failed: the file parses as perfetto.protos.Trace; interned ids resolve;
on every slice track, events come in timestamp order and begin/end pair up (none left open);
slices nest (the device-time slice inside its IO's slice, depth at most 2, so one IO at a time
per lane: lanes never overlap); exactly one outer slice per IO (the report's IO count per
device, absorbed flushes included); the counters equal the report's series per interval.
With --app-log / --stress (given to both the export and the report): the application's
tracks hold one slice per flush and per compaction that starts within the trace's time
(paired from the report's markers as the log parser pairs them: flushes first in, first out
per table, compactions by id), on lanes that never overlap, an instant per SSTable deletion,
and a counter sample per stress status line with a throughput. Writes figures (IOs per
device, lanes, application events) to OUT.json.
"""

import json
import sys
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def fail(msg):
    print("check_trace: " + msg, file=sys.stderr)
    sys.exit(1)


def main(trace_path, report_path, out_path):
    trace = pb.Trace()
    with open(trace_path, "rb") as f:
        trace.ParseFromString(f.read())
    report = json.load(open(report_path))

    tracks = {}  # uuid -> TrackDescriptor
    names, ann_names, strings = {}, {}, {}
    cleared = False
    events = defaultdict(list)  # slice track uuid -> [(ts, type, name)]
    counters = defaultdict(list)  # counter track uuid -> [(ts, value)]
    outer_names = defaultdict(int)
    for p in trace.packet:
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared = True
        if p.HasField("interned_data"):
            if not cleared:
                fail("interned data before the sequence's state was cleared")
            for e in p.interned_data.event_names:
                names[e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                ann_names[e.iid] = e.name
            for e in p.interned_data.debug_annotation_string_values:
                strings[e.iid] = e.str.decode()
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.uuid in tracks:
                fail(f"track {td.uuid} described twice")
            tracks[td.uuid] = td
        if not p.HasField("track_event"):
            continue
        if p.trusted_packet_sequence_id != 1:
            fail("a track event outside sequence 1")
        te = p.track_event
        if te.track_uuid not in tracks:
            fail(f"event on track {te.track_uuid} before its descriptor")
        if te.type == TE.TYPE_COUNTER:
            counters[te.track_uuid].append((p.timestamp, te.double_counter_value))
            continue
        name = None
        if te.type == TE.TYPE_SLICE_BEGIN:
            if te.name_iid not in names:
                fail(f"name iid {te.name_iid} not interned")
            name = names[te.name_iid]
            for a in te.debug_annotations:
                if a.name_iid not in ann_names:
                    fail(f"annotation name iid {a.name_iid} not interned")
                if a.HasField("string_value_iid") and a.string_value_iid not in strings:
                    fail(f"string iid {a.string_value_iid} not interned")
        events[te.track_uuid].append((p.timestamp, te.type, name, len(te.debug_annotations)))

    def root(u):
        while tracks[u].parent_uuid:
            u = tracks[u].parent_uuid
        return u

    device_names = {d["name"] for d in report["devices"]}
    app_events = {u: evs for u, evs in events.items() if tracks[root(u)].name not in device_names}
    figures_app = check_app(tracks, app_events, counters, report, root)

    # Per lane: time order, pairs, nesting (outer > inner, depth <= 2), one IO at a time.
    ios = defaultdict(int)  # device track uuid -> outer slices
    lanes = defaultdict(int)
    for uuid, evs in events.items():
        if uuid in app_events:
            continue
        td = tracks[uuid]
        dev = td.parent_uuid
        if tracks[dev].parent_uuid:
            fail(f"lane {uuid}'s parent is not a device track")
        if td.sibling_merge_behavior != pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY:
            fail(f"lane {uuid} is not merged by key")
        lanes[dev] += 1
        stack = []
        last = 0
        for ts, typ, name, nargs in evs:
            if ts < last:
                fail(f"lane {uuid}: timestamp {ts} after {last} (out of order)")
            last = ts
            if typ == TE.TYPE_SLICE_BEGIN:
                if not stack:
                    if name == "on device":
                        fail(f"lane {uuid}: a device-time slice outside an IO at {ts}")
                    if nargs < 6:
                        fail(f"lane {uuid}: IO at {ts} has {nargs} arguments")
                    ios[dev] += 1
                    outer_names[name] += 1
                elif len(stack) == 1:
                    if name != "on device":
                        fail(f"lane {uuid}: IO {name!r} at {ts} overlaps IO {stack[0][1]!r} from {stack[0][0]} on one lane")
                else:
                    fail(f"lane {uuid}: slices nested 3 deep at {ts}")
                stack.append((ts, name))
            elif typ == TE.TYPE_SLICE_END:
                if not stack:
                    fail(f"lane {uuid}: an end without a begin at {ts}")
                stack.pop()
            else:
                fail(f"lane {uuid}: unexpected event type {typ}")
        if stack:
            fail(f"lane {uuid}: {len(stack)} slices never end")

    # One outer slice per IO: the report's count per device.
    by_name = {tracks[u].name: u for u in tracks if not tracks[u].parent_uuid}
    figures = {"devices": {}}
    for d in report["devices"]:
        want = sum(o["ios"] for o in d["ops"].values()) + d.get("absorbed_flushes", 0)
        uuid = by_name.get(d["name"])
        got = ios.get(uuid, 0) if uuid is not None else 0
        if got != want:
            fail(f"device {d['name']}: {got} IO slices, the report counts {want}")
        # Counters: each of the report's series, one sample per interval at its start.
        s = d["series"]
        series = {
            "read IOPS": s["read_iops"],
            "write IOPS": s["write_iops"],
            "read MB/s": s["read_mb_per_s"],
            "write MB/s": s["write_mb_per_s"],
            "read p99 us": s["read_p99_us"],
            "write p99 us": s["write_p99_us"],
        }
        checked = 0
        for cname, want_vals in series.items():
            full = f"{d['name']} {cname}"
            cu = [u for u, t in tracks.items() if t.name == full and t.parent_uuid == uuid]
            if all(v == 0 for v in want_vals):
                if cu:
                    fail(f"{full}: a counter track for an all-zero series")
                continue
            if len(cu) != 1:
                fail(f"{full}: {len(cu)} counter tracks")
            if not tracks[cu[0]].HasField("counter"):
                fail(f"{full}: not a counter track")
            got_vals = [v for _, v in counters[cu[0]]]
            if got_vals != want_vals:
                diff = next(i for i in range(min(len(got_vals), len(want_vals)) + 1)
                            if i >= len(got_vals) or i >= len(want_vals) or got_vals[i] != want_vals[i])
                fail(f"{full}: counter differs from the report's series at interval {diff} "
                     f"({len(got_vals)} samples, report {len(want_vals)})")
            ts = [t for t, _ in counters[cu[0]]]
            step = round(s["interval_s"] * 1e9)
            if any(b - a != step for a, b in zip(ts, ts[1:])):
                fail(f"{full}: samples not one interval apart")
            checked += 1
        figures["devices"][d["name"]] = {"ios": got, "lanes": lanes[uuid], "counters_checked": checked}
    extra = set(ios) - {by_name.get(d["name"]) for d in report["devices"]}
    if extra:
        fail(f"IO slices on devices the report does not have: {extra}")
    figures["slice_names"] = len(outer_names)
    figures["app"] = figures_app
    json.dump(figures, open(out_path, "w"))


def check_app(tracks, app_events, counters, report, root):
    """The application's and the stress tool's tracks against the report's markers and status."""
    t0 = report["start_unix_ns"]
    t1 = t0 + round(report["duration_s"] * 1e9)
    within = lambda ns: t0 <= ns < t1
    # Expected, from the report's markers, paired as the log parser pairs them.
    pending, compacting = defaultdict(list), {}
    flushes, compactions, deleted = 0, 0, 0
    for m in sorted(report.get("markers", []), key=lambda m: m["time_ns"]):
        k = m["kind"]
        if k == "flush-enqueued":
            pending[m["table"]].append(m["time_ns"])
        elif k == "flush-completed" and m["table"] is not None and pending[m["table"]]:
            flushes += within(pending[m["table"]].pop(0))
        elif k == "compaction-started":
            compacting[m["detail"].split("(", 1)[1].split(")", 1)[0]] = m["time_ns"]
        elif k == "compaction-completed":
            start = compacting.pop(m["detail"].split("(", 1)[1].split(")", 1)[0], None)
            if start is not None:
                compactions += within(start)
        elif k == "sstable-deleted":
            deleted += within(m["time_ns"])
    got = defaultdict(int)
    for uuid, evs in app_events.items():
        kind = tracks[tracks[uuid].parent_uuid].name if tracks[uuid].parent_uuid else ""
        if tracks[uuid].name == "SSTables deleted":
            if any(t != TE.TYPE_INSTANT for _, t, _, _ in evs):
                fail(f"SSTable deletions track {uuid}: not only instants")
            got["deleted"] += len(evs)
            continue
        open_at, last = None, 0
        for ts, typ, name, _ in evs:
            if ts < last:
                fail(f"application lane {uuid}: timestamp {ts} after {last}")
            last = ts
            if typ == TE.TYPE_SLICE_BEGIN:
                if open_at is not None:
                    fail(f"application lane {uuid}: {name!r} at {ts} overlaps the slice from {open_at}")
                open_at = ts
                got[kind] += 1
            elif typ == TE.TYPE_SLICE_END:
                if open_at is None:
                    fail(f"application lane {uuid}: an end without a begin at {ts}")
                open_at = None
            else:
                fail(f"application lane {uuid}: unexpected event type {typ}")
        if open_at is not None:
            fail(f"application lane {uuid}: a slice never ends")
    for what, want, have in [("memtable flushes", flushes, got["memtable flushes"]),
                             ("compactions", compactions, got["compactions"]),
                             ("SSTable deletions", deleted, got["deleted"])]:
        if want != have:
            fail(f"{what}: {have} on the application's tracks, the report's markers say {want}")
    # Stress: one ops/s sample per status line with a throughput, within the trace's time.
    samples = 0
    for run in report.get("stress", []):
        want = [(p["time_ns"] - t0, p["ops_per_s"]) for p in run["status"]
                if p.get("time_ns") is not None and within(p["time_ns"]) and p.get("ops_per_s") is not None]
        if not want:
            continue
        name = run["path"].rsplit("/", 1)[-1]
        cu = [u for u, t in tracks.items() if t.name == f"{run['tool']} ops/s"
              and tracks[t.parent_uuid].name == f"{run['tool']} ({name})"]
        if len(cu) != 1:
            fail(f"{run['path']}: {len(cu)} ops/s counter tracks")
        got_vals = [v for _, v in counters[cu[0]]]
        if got_vals != [v for _, v in want]:
            fail(f"{run['path']}: ops/s counter {got_vals[:5]}... differs from the report's status lines {[v for _, v in want][:5]}...")
        ts = [t for t, _ in counters[cu[0]]]
        offs = [b - a for a, b in zip(ts, ts[1:])]
        want_offs = [b[0] - a[0] for a, b in zip(want, want[1:])]
        if offs != want_offs:
            fail(f"{run['path']}: ops/s samples not spaced as the status lines")
        samples += len(want)
    return {"flushes": flushes, "compactions": compactions, "sstables_deleted": deleted,
            "stress_ops_samples": samples}


if __name__ == "__main__":
    main(*sys.argv[1:4])
