# SPDX-License-Identifier: Apache-2.0
"""Job files and dicts → fp8d.v1.Job, with the conventions of `fp8ctl submit` (client/job_file.h).

The fields are those of fp8d.v1.Job in snake_case (camelCase is accepted too, as proto JSON
does); an unknown field is InvalidArgument naming it. Durations may be written "500ms", "30s",
"5m", "2h", "1h30m" or a bare number of seconds. A string field written as a bare YAML number
stays a string. Relative paths of the spec are made absolute against the job file's directory
(the current directory for a dict), because the daemon runs elsewhere. Output-only fields (a
file saved from `fp8ctl get -o yaml`) are dropped.
"""
import os
import re

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from fp8d.errors import InvalidArgument
from fp8d.v1 import job_pb2

_OUTPUT_ONLY = ("name", "state", "attempt", "progress", "checkpoint", "result", "error",
                "create_time", "start_time", "end_time", "update_time", "version", "attempts",
                "events", "owner", "run_as_uid")
_UNIT_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
            "d": 86400 * 10**9}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([a-z]*)")


def parse_duration(text, field=None):
    """'1h30m' → '5400s' (proto JSON's spelling); a bare number is seconds.

    field names the Job field in the error message.
    """
    at = f"{field}: " if field else ""
    if isinstance(text, bool):
        raise InvalidArgument(f"{at}expected a duration such as 30s, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise InvalidArgument(f"{at}duration {text} must not be negative")
        return _seconds_text(round(text * 10**9))
    s = re.sub(r"\s+", "", str(text))
    if not s:
        raise InvalidArgument(f"{at}empty duration")
    if s.startswith("-"):
        raise InvalidArgument(f"{at}duration {text!r} must not be negative")
    total_ns, pos, parts = 0, 0, 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise InvalidArgument(f"{at}duration {text!r}: expected a number")
        number, unit = m.groups()
        if not unit:
            if parts or m.end() != len(s):
                raise InvalidArgument(f"{at}duration {text!r}: missing unit (ms, s, m, h)")
            unit = "s"
        if unit not in _UNIT_NS:
            raise InvalidArgument(f"{at}duration {text!r}: unknown unit {unit!r} (use ms, s, m, h)")
        total_ns += round(float(number) * _UNIT_NS[unit])
        pos, parts = m.end(), parts + 1
    return _seconds_text(total_ns)


def _seconds_text(total_ns):
    seconds, nanos = divmod(total_ns, 10**9)
    return f"{seconds}.{nanos:09d}s" if nanos else f"{seconds}s"


def _field_by_key(desc, key):
    return desc.fields_by_name.get(key) or next(
        (f for f in desc.fields if f.json_name == key), None)


def _normalize(value, desc, path):
    """Rewrites YAML's values into what json_format.ParseDict accepts for message `desc`."""
    if desc.full_name == "google.protobuf.Duration":
        return parse_duration(value, path)
    if desc.full_name in ("google.protobuf.Struct", "google.protobuf.Value",
                          "google.protobuf.Timestamp") or not isinstance(value, dict):
        return value  # ParseDict reports a wrong shape itself, with the field
    out = {}
    for key, v in value.items():
        key = str(key)
        field = _field_by_key(desc, key)
        if field is None:
            raise InvalidArgument(f"unknown field {path}.{key}")
        sub = f"{path}.{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[key] = v if not isinstance(v, dict) else {
                str(k): _normalize_scalar(x, value_field, f"{sub}[{k}]") for k, x in v.items()}
        elif field.label == FieldDescriptor.LABEL_REPEATED and isinstance(v, list):
            out[key] = [_normalize_scalar(x, field, f"{sub}[{i}]") for i, x in enumerate(v)]
        else:
            out[key] = _normalize_scalar(v, field, sub)
    return out


def _normalize_scalar(v, field, path):
    if field.message_type is not None:
        return _normalize(v, field.message_type, path)
    if field.type == FieldDescriptor.TYPE_STRING and isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return v


def _resolve(p, base_dir):
    if not p or os.path.isabs(p):
        return p
    return os.path.normpath(os.path.join(base_dir, p))


def resolve_paths(job, base_dir):
    """The paths fp8ctl resolves (client/job_file.cc ResolveJobPaths), against base_dir."""
    kind = job.WhichOneof("spec")
    if kind == "train":
        t = job.train
        if t.HasField("data"):
            t.data.train = _resolve(t.data.train, base_dir)
            t.data.val = _resolve(t.data.val, base_dir)
        t.output_dir = _resolve(t.output_dir, base_dir)
        t.init_from = _resolve(t.init_from, base_dir)
    elif kind == "calibrate":
        c = job.calibrate
        c.input = _resolve(c.input, base_dir)
        c.output_dir = _resolve(c.output_dir, base_dir)
        if c.HasField("activations"):
            c.activations.data = _resolve(c.activations.data, base_dir)


def job_from_dict(spec, base_dir=None):
    """A dict with the fields of fp8d.v1.Job → Job (paths resolved against base_dir or the cwd)."""
    if not isinstance(spec, dict):
        raise InvalidArgument(f"job: expected a mapping of Job fields, got {type(spec).__name__}")
    job = job_pb2.Job()
    try:
        json_format.ParseDict(_normalize(spec, job.DESCRIPTOR, "job"), job)
    except json_format.ParseError as e:
        raise InvalidArgument(f"job: {e}") from None
    for name in _OUTPUT_ONLY:
        job.ClearField(name)
    resolve_paths(job, base_dir or os.getcwd())
    return job


def load_job_file(path):
    """Reads a YAML (or JSON) job file as `fp8ctl submit FILE` does."""
    import yaml  # python3-yaml; only job files need it
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            docs = list(yaml.safe_load_all(f))
    except OSError as e:
        raise InvalidArgument(f"job file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise InvalidArgument(f"job file {path}: {e}") from None
    if len(docs) != 1:
        raise InvalidArgument(f"job file {path}: expected one YAML document, found {len(docs)}")
    try:
        return job_from_dict(docs[0], os.path.dirname(os.path.abspath(path)))
    except InvalidArgument as e:
        raise InvalidArgument(f"job file {path}: {e.message}") from None
