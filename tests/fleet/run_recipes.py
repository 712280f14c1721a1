"""Run docs/fleet.md's SQL on a real engine: its setup block for the engine, then every recipe,
as written there (only the data directory is substituted for 'fleet').

usage: run_recipes.py duckdb|spark DATA_DIR FLEET_MD OUT_JSON

Writes {"engine", "seconds": {"start", "setup", recipe...}, "results": {recipe: {"columns",
"rows"}}} to OUT_JSON. Used by tests/tests/fleet.rs, which checks the answers against
`blkprof report --json`.
"""

import datetime
import decimal
import json
import re
import sys
import time


def blocks(md):
    """(kind, name, sql) of each ```sql block whose first line is `-- setup: X` or `-- recipe: X`."""
    out = []
    for body in re.findall(r"```sql\n(.*?)```", md, re.S):
        m = re.match(r"-- (setup|recipe): (\S+)\n", body)
        if m:
            out.append((m.group(1), m.group(2), body[m.end():].strip()))
    return out


def plain(v):
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return v


def main():
    engine, data, md_path, out_path = sys.argv[1:5]
    with open(md_path) as f:
        todo = blocks(f.read())
    data = data.rstrip("/")
    sub = lambda sql: sql.replace("'fleet", "'" + data)
    seconds = {}
    t = time.monotonic()
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect()

        def run(sql):
            r = con.sql(sql)
            return ([d[0] for d in r.description], r.fetchall()) if r is not None else ([], [])

    elif engine == "spark":
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("blkprof-fleet")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")

        def run(sql):
            df = spark.sql(sql)
            return (df.columns, [tuple(r) for r in df.collect()])

    else:
        sys.exit(f"unknown engine {engine}: duckdb or spark")
    seconds["start"] = time.monotonic() - t
    setups = [s for k, n, s in todo if k == "setup" and n == engine]
    if len(setups) != 1:
        sys.exit(f"{md_path}: expected one `-- setup: {engine}` block, found {len(setups)}")
    t = time.monotonic()
    for stmt in setups[0].split(";"):
        if stmt.strip():
            run(sub(stmt))
    seconds["setup"] = time.monotonic() - t
    results = {}
    for kind, name, sql in todo:
        if kind != "recipe":
            continue
        t = time.monotonic()
        cols, rows = run(sub(sql))
        seconds[name] = time.monotonic() - t
        results[name] = {"columns": cols, "rows": [[plain(v) for v in r] for r in rows]}
    with open(out_path, "w") as f:
        json.dump({"engine": engine, "seconds": seconds, "results": results}, f)


main()
