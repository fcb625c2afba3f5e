"""Minimal safetensors reader / writer for F32 and I32 tensors, written from the format.

File layout (all integers little-endian):
  bytes 0..7      N = length of the JSON header in bytes (unsigned 64-bit)
  bytes 8..8+N-1  JSON object: {NAME: {"dtype": "F32"|"I32", "shape": [...],
                                      "data_offsets": [BEGIN, END]}, ...,
                               "__metadata__": {str: str}}   (metadata optional)
                  padded with trailing spaces so that 8 + N is a multiple of 8
  bytes 8+N..     the data buffer; a tensor's bytes are buffer[BEGIN:END], row-major,
                  little-endian, END - BEGIN = prod(shape) * 4. The tensors cover the buffer
                  without holes or overlaps.

Used by the reference model (tests/ref/spec_model.py) and its test; no dependency but numpy."""
import json
import struct

import numpy as np

# safetensors dtype name -> numpy little-endian dtype
DTYPES = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4")}


class SafetensorsError(ValueError):
    pass


def _dtype_name(arr):
    if arr.dtype.kind == "f":
        return "F32"
    if arr.dtype.kind in "iu":
        return "I32"
    raise SafetensorsError(f"unsupported dtype {arr.dtype} (F32 and I32 only)")


def dumps(tensors, metadata=None):
    """Serializes {name: array} (floats as F32, integers as I32, in the dict's order) and
    an optional {str: str} metadata dict into safetensors bytes."""
    header = {}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' is not a tensor name")
        arr = np.asarray(arr)
        dt = _dtype_name(arr)
        data = np.ascontiguousarray(arr, dtype=DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": [int(s) for s in arr.shape],
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError("metadata keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def save(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(dumps(tensors, metadata))


def loads(buf, where="<bytes>"):
    """Parses safetensors bytes; returns ({name: np.ndarray}, metadata dict)."""
    if len(buf) < 8:
        raise SafetensorsError(f"{where}: {len(buf)} bytes, expected at least the 8-byte header length")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise SafetensorsError(f"{where}@0: header length {n} exceeds the file ({len(buf)} bytes)")
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{where}@8: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}@8: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(buf)[8 + n:]
    tensors = {}
    spans = []
    for name, info in header.items():
        try:
            dt = DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise SafetensorsError(f"{where}: tensor {name}: bad or unsupported entry {info!r} ({e})")
        if any(s < 0 for s in shape):
            raise SafetensorsError(f"{where}: tensor {name}: negative dimension in {shape}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if not (0 <= begin <= end <= len(data)) or end - begin != nbytes:
            raise SafetensorsError(f"{where}: tensor {name}: data_offsets [{begin}, {end}] do not fit "
                                   f"shape {list(shape)} x {dt.itemsize} bytes in a {len(data)}-byte buffer")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(shape).copy()
        spans.append((begin, end, name))
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            raise SafetensorsError(f"{where}: tensor {name} starts at {begin}, expected {pos} (hole or overlap)")
        pos = end
    if pos != len(data):
        raise SafetensorsError(f"{where}: tensors end at {pos}, the buffer has {len(data)} bytes")
    return tensors, metadata


def load(path):
    with open(path, "rb") as f:
        return loads(f.read(), where=path)
