#!/usr/bin/python3
"""Writes the hand-crafted models of tests/unit/test_limits.c (committed, so
the test needs no Python): models whose declared shapes, initializers or
external data would need absurd memory. Each must be refused at import with
a clear message, before kiln allocates anything of that size. Run with
Debian's /usr/bin/python3 (onnx): python3 tests/data/limits/gen_limits.py"""
import os
import onnx
from onnx import helper, TensorProto

OUT = os.path.dirname(os.path.abspath(__file__))


def model(name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")
    onnx.save(m, os.path.join(OUT, name + ".onnx"))


def relu_model(name, x_dims, inits=(), extra_in=None):
    model(name, [helper.make_node("Relu", ["x"], ["y"])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_dims)], inits)


def add_model(name, w):
    """y = x + w, with w an initializer (its data given raw, typed or external)."""
    model(name, [helper.make_node("Add", ["x", "w"], ["y"])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])


def tensor(name, dims, **fields):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    for k, v in fields.items():
        if k == "raw_data":
            t.raw_data = v
        elif k == "float_data":
            t.float_data.extend(v)
        elif k == "external":
            t.data_location = TensorProto.EXTERNAL
            for kk, vv in v.items():
                e = t.external_data.add()
                e.key, e.value = kk, vv
    return t


def main():
    # Declared input shapes: the element count overflows int64; a byte size
    # far beyond any memory (2^50 floats = 4 PiB).
    relu_model("input_dims_overflow", [1 << 32, 1 << 32, 1 << 32])
    relu_model("input_huge", [1 << 25, 1 << 25])
    # Large but under the limit (2^40 floats = 4 TiB): a declared shape costs
    # nothing at import, so this one loads.
    relu_model("input_big_ok", [1 << 20, 1 << 20])
    # Initializers: 10^15 elements with 4 bytes of raw_data; 10^12 elements
    # (4 TB) with a single float_data value; 2^31 elements (8 GiB) with one
    # float_data value (small enough that malloc might succeed).
    add_model("init_raw_tiny", tensor("w", [10**15], raw_data=b"\0\0\0\0"))
    add_model("init_typed_tiny", tensor("w", [10**12], float_data=[1.0]))
    add_model("init_typed_8g", tensor("w", [1 << 31], float_data=[1.0]))
    add_model("init_dims_overflow", tensor("w", [1 << 40, 1 << 40], raw_data=b""))
    # External data: 16 bytes in the file, the tensor needs 2^36 floats;
    # and a tensor of the file's size read from an offset past its end.
    with open(os.path.join(OUT, "limits_weights.bin"), "wb") as f:
        f.write(bytes(range(16)))
    add_model("ext_beyond_file", tensor("w", [1 << 36], external={"location": "limits_weights.bin"}))
    add_model("ext_offset_beyond", tensor("w", [4], external={"location": "limits_weights.bin",
                                                             "offset": "4096"}))
    add_model("ext_length_huge", tensor("w", [4], external={"location": "limits_weights.bin",
                                                           "length": str(10**15)}))

    shape_arithmetic()


def i64(name, vals):
    return helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals)


def shape_arithmetic():
    """Shape rules whose arithmetic overflowed (issue 20 4.4): each must be
    refused with a message, or (Slice) give the right answer."""
    I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
    wrap = ((1 << 64) + 2) // 3  # 3 * wrap wraps to 2 in 64 bits
    # Tile of a [3] input by `wrap`: fixed shape (refused at load) and a
    # dynamic dim (refused when it runs with 3)
    for name, dims in (("tile_wrap", [3]), ("tile_wrap_dynamic", ["n"])):
        model(name, [helper.make_node("Tile", ["x", "r"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [i64("r", [wrap])])
    # Slice with INT64_MIN as step and end: one element, x[4]
    model("slice_int64_min", [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
          [i64("s", [-1]), i64("e", [I64_MIN]), i64("a", [0]), i64("st", [I64_MIN])])
    # Pad by INT64_MIN before and INT64_MAX after: the sum is small, the pads are not
    model("pad_huge", [helper.make_node("Pad", ["x", "p"], ["y"])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [i64("p", [I64_MIN, I64_MAX])])
    # ConvTranspose: stride 2^31-1 over 2^20 positions (2^51 outputs), and
    # an output_shape of 2^62
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 1], [1.0])
    model("convt_stride", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[(1 << 31) - 1])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1 << 20])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model("convt_output_shape", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[1 << 62])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    # Expand to [2^30, 2^30]: 4 EiB of float32, inferred (no declared shape says so)
    model("expand_huge", [helper.make_node("Expand", ["x", "s"], ["y"])],
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [i64("s", [1 << 30, 1 << 30])])


if __name__ == "__main__":
    main()
