#!/usr/bin/env python3
"""Compares Parquet parts with the NDJSON result of the same job, row for row.

    parquet_compare.py RESULT.ndjson PARTS.json

PARTS.json lists {"config", "table", "file"} for every part. Every Parquet value,
read with pyarrow, is rendered the way NDJSON prints it (docs/encodings.md) and compared
with the NDJSON value of the same row and column; row counts and column sets must match.
Prints {"config.table": {"column": "<arrow type>"}} on success; exits 1 with the first
difference otherwise. Temporal values are read as their stored integers, so years
outside Python's datetime range compare too.
"""
import base64
import json
import math
import struct
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
I32_MAX, I32_MIN = 2**31 - 1, -(2**31)


def civil_from_days(z):
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y), m, d


def year_text(y):
    return f"{y:04d}" if 0 <= y <= 9999 else f"{'+' if y > 0 else '-'}{abs(y):04d}"


def fraction(micros):
    return "" if micros == 0 else "." + f"{micros:06d}".rstrip("0")


def clock(us):
    s, frac = divmod(us, 1_000_000)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{fraction(frac)}"


def date_text(days):
    if days == I32_MAX:
        return "infinity"
    if days == I32_MIN:
        return "-infinity"
    y, m, d = civil_from_days(days)
    return f"{year_text(y)}-{m:02d}-{d:02d}T00:00:00Z"


def timestamp_text(us):
    if us == I64_MAX:
        return "infinity"
    if us == I64_MIN:
        return "-infinity"
    days, rest = divmod(us, 86_400_000_000)
    y, m, d = civil_from_days(days)
    return f"{year_text(y)}-{m:02d}-{d:02d}T{clock(rest)}Z"


def float_matches(expected, got, width):
    if isinstance(expected, str):
        return {"NaN": math.isnan(got), "Infinity": got == math.inf, "-Infinity": got == -math.inf}[expected]
    if width == 32:
        return struct.unpack("f", struct.pack("f", float(expected)))[0] == got
    return float(expected) == got


def rendered(column, field):
    """The column's values as NDJSON would print them (None for null)."""
    t = field.type
    ext = t.extension_name if isinstance(t, pa.BaseExtensionType) else None
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_timestamp(t):
        return [None if v is None else timestamp_text(v) for v in column.cast(pa.int64()).to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else date_text(v) for v in column.cast(pa.int32()).to_pylist()]
    if pa.types.is_time64(t):
        return [None if v is None else clock(v) for v in column.cast(pa.int64()).to_pylist()]
    values = column.to_pylist()
    if pa.types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in values]
    if ext == "arrow.uuid" or pa.types.is_fixed_size_binary(t):
        return [None if v is None else str(uuid.UUID(bytes=bytes(v))) for v in values]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [None if v is None else base64.b64encode(v).decode() for v in values]
    return values


def same(expected, got, field, json_column):
    t = field.type.storage_type if isinstance(field.type, pa.BaseExtensionType) else field.type
    if got is None or expected is None:
        return got is None and expected is None
    if pa.types.is_floating(t):
        return float_matches(expected, got, t.bit_width)
    if json_column:
        return json.loads(got) == expected
    if pa.types.is_string(t) and not isinstance(expected, str):
        return json.loads(got) == expected  # a value with no typed column: its JSON text
    return expected == got


def main():
    ndjson_path, parts_path = sys.argv[1], sys.argv[2]
    rows = {}
    with open(ndjson_path, encoding="utf-8") as f:
        for line in f:
            line = json.loads(line)
            rows.setdefault((line["config"], line["table"]), []).append(line["row"])
    parts = json.load(open(parts_path, encoding="utf-8"))
    types = {}
    for part in parts:
        key = (part["config"], part["table"])
        expected = rows.pop(key, [])
        pf = pq.ParquetFile(part["file"])
        table = pf.read()
        name = f"{key[0]}.{key[1]}"
        if table.num_rows != len(expected):
            sys.exit(f"{name}: {table.num_rows} rows in Parquet, {len(expected)} in NDJSON")
        logical = {c.name: str(c.logical_type) for c in pf.schema}
        types[name] = {}
        for i, field in enumerate(table.schema):
            col = table.column(i).combine_chunks()
            json_column = logical.get(field.name, "").startswith("JSON")
            types[name][field.name] = "json" if json_column else str(field.type)
            got = rendered(col, field)
            for r, (row, value) in enumerate(zip(expected, got)):
                if field.name not in row:
                    sys.exit(f"{name}: column {field.name} is not in the NDJSON rows")
                if not same(row[field.name], value, field, json_column):
                    sys.exit(f"{name} row {r} column {field.name}: NDJSON {row[field.name]!r}, Parquet {value!r}")
        for row in expected:
            missing = set(row) - set(table.schema.names)
            if missing:
                sys.exit(f"{name}: NDJSON columns {sorted(missing)} are not in the Parquet file")
    if rows:
        sys.exit(f"tables without a part: {sorted(rows)}")
    print(json.dumps(types, sort_keys=True))


if __name__ == "__main__":
    main()
