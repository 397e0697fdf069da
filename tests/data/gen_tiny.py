#!/usr/bin/python3
"""Writes the small ONNX models the C unit tests use (committed, so tests
need no Python): run with Debian's /usr/bin/python3 (onnx + numpy)."""
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(1234)


def mlp(path):
    # x[batch,16] -> MatMul(16x32) + b -> Relu -> MatMul(32x8) + b -> Softmax
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["h4"], name="fc2_bias"),
        helper.make_node("Softmax", ["h4"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[w1, b1, w2, b2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    # Reference input/output for batch 3, computed with numpy: raw float32 x then y.
    x = rng.standard_normal((3, 16)).astype(np.float32)
    h = np.maximum(x @ numpy_helper.to_array(w1) + numpy_helper.to_array(b1), 0)
    z = h @ numpy_helper.to_array(w2) + numpy_helper.to_array(b2)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    y = (z / z.sum(axis=-1, keepdims=True)).astype(np.float32)
    with open(path.replace(".onnx", "_io.bin"), "wb") as f:
        f.write(x.tobytes())
        f.write(y.tobytes())


def unknown_op(path):
    nodes = [helper.make_node("FancyOp", ["x"], ["y"], name="my_fancy_node", domain="")]
    g = helper.make_graph(nodes, "unknown_op",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, path)


def lstm(path, activations):
    # LSTM over x[seq 4, batch 2, input 3], hidden 5; optional explicit activations.
    r = np.random.default_rng(7)
    w = numpy_helper.from_array(r.standard_normal((1, 20, 3)).astype(np.float32), "W")
    rr = numpy_helper.from_array(r.standard_normal((1, 20, 5)).astype(np.float32), "R")
    attrs = {"hidden_size": 5}
    if activations:
        attrs["activations"] = activations
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", **attrs)]
    g = helper.make_graph(nodes, "lstm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1, 2, 5])],
                          initializer=[w, rr])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    onnx.save(m, path)


def opset18_forms(path):
    # Forms that changed in opset 18: Reduce* take `axes` as an input, Split
    # takes `num_outputs`, Pad takes an `axes` input. x[2,6] -> outputs:
    #   m = ReduceMean(x, axes=[1], keepdims=1)      [2,1]
    #   a, b = Split(x, axis=1, num_outputs=2)       [2,3] each
    #   p = Pad(x, pads=[1,2] on axes=[1], constant 0)  [2,9]
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    pads = numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "pads")
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean", keepdims=1),
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Pad", ["x", "pads", "", "axes"], ["p"], name="pad"),
    ]
    g = helper.make_graph(nodes, "opset18",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in ("m", "a", "b", "p")],
                          initializer=[axes, pads])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)


def window_reverse(path):
    # The window-reverse step of a Swin block (issue 20 item 1), small: a
    # projection's output goes through a Dropout (inference: in place in the
    # activation arena) and a Reshape to 6-D whose shape is computed from
    # the tensor's own Shape (Shape/Gather/Unsqueeze/Concat, as exported by
    # torch), then Transpose perm=[0,1,3,2,4,5] and a Reshape back:
    #   x[4,8,8,16] (4 windows of 8x8, 16 channels); s = Sigmoid(x)
    #   p = s @ w + b; d = Dropout(p)
    #   r = Reshape(d, [1, 2, 2, 8, 8, C]) with C = Shape(d)[3]
    #   y = Reshape(Transpose(r, [0,1,3,2,4,5]), [1, 16, 16, 16]) + Reshape(s, same)
    # The memory planner used to leave r (a view of d, which is in place
    # over p) at offset 0, which no block reserved for it: s's bytes (the
    # first block, live to the end as the residual) or, where s is elsewhere,
    # the Transpose's own output.
    rng = np.random.default_rng(20)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16,)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(3, dtype=np.int64), "i3"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0"),
             numpy_helper.from_array(np.array([1, 2, 2, 8, 8], dtype=np.int64), "head"),
             numpy_helper.from_array(np.array([1, 16, 16, 16], dtype=np.int64), "back")]
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
        helper.make_node("MatMul", ["s", "w"], ["p0"], name="proj"),
        helper.make_node("Add", ["p0", "b"], ["p"], name="proj_bias"),
        helper.make_node("Dropout", ["p"], ["d"], name="dropout"),
        helper.make_node("Shape", ["d"], ["d_shape"], name="shape"),
        helper.make_node("Gather", ["d_shape", "i3"], ["c"], name="gather_c", axis=0),
        helper.make_node("Unsqueeze", ["c", "ax0"], ["c1"], name="unsqueeze_c"),
        helper.make_node("Concat", ["head", "c1"], ["shape6"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["d", "shape6"], ["r"], name="reshape6"),
        helper.make_node("Transpose", ["r"], ["t"], name="window_reverse", perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["t", "back"], ["yt"], name="reshape_back"),
        helper.make_node("Reshape", ["s", "back"], ["sb"], name="shortcut"),
        helper.make_node("Add", ["yt", "sb"], ["y"], name="residual"),
    ]
    g = helper.make_graph(nodes, "window_reverse",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8, 8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    # Reference for one input, with numpy: raw float32 x then y.
    x = rng.standard_normal((4, 8, 8, 16)).astype(np.float32)
    s = 1 / (1 + np.exp(-x.astype(np.float64)))
    y = (s @ w + b).reshape(1, 2, 2, 8, 8, 16).transpose(0, 1, 3, 2, 4, 5).reshape(1, 16, 16, 16)
    y = y + s.reshape(1, 16, 16, 16)
    with open(path.replace(".onnx", "_io.bin"), "wb") as f:
        f.write(x.tobytes())
        f.write(y.astype(np.float32).tobytes())


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    mlp(f"{out}/tiny_mlp.onnx")
    unknown_op(f"{out}/unknown_op.onnx")
    lstm(f"{out}/lstm_default.onnx", None)
    lstm(f"{out}/lstm_explicit.onnx", ["Sigmoid", "Tanh", "Tanh"])
    lstm(f"{out}/lstm_relu.onnx", ["Sigmoid", "Relu", "Tanh"])
    lstm(f"{out}/lstm_bad_act.onnx", ["HardSigmoid", "Tanh", "Tanh"])
    opset18_forms(f"{out}/opset18_forms.onnx")
    window_reverse(f"{out}/window_reverse.onnx")
