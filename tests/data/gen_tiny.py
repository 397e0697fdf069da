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


def conv_makers(r, inits, nodes):
    # const(name, shape, scale): a random initializer (from r); conv(name, x,
    # cin, cout, k, stride, group): Conv + bias with "same" pads, output `name`
    def const(name, shape, scale):
        inits.append(numpy_helper.from_array((r.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv(name, x, cin, cout, k, stride=1, group=1):
        w = const(name + "_w", (cout, cin // group, k, k), (2.0 / (cin // group * k * k)) ** 0.5)
        b = const(name + "_b", (cout,), 0.1)
        nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=group))
        return name
    return const, conv


def tiny_mbv3(path):
    # a MobileNetV3/EfficientNet-style net: x[batch,3,32,32] -> stem Conv 3x3/2
    # + HardSwish (16) -> block 1 [Conv 1x1 + Relu (32); depthwise 3x3 + Relu;
    # SE (GlobalAveragePool, Conv 1x1 + Relu (8), Conv 1x1, HardSigmoid, Mul);
    # Conv 1x1 (16) + the block's input] -> block 2 [Conv 1x1 + SiLU (40);
    # depthwise 5x5/2 + SiLU; SE with SiLU and Sigmoid (12); Conv 1x1 (24)]
    # -> feat [batch,24,8,8] (an output) -> GlobalAveragePool -> Flatten ->
    # Gemm -> y [batch,10]. The CUDA fp16 engine runs it as one NHWC chain.
    inits, nodes = [], []
    const, conv = conv_makers(rng, inits, nodes)

    def act(op, x, name, **kw):
        nodes.append(helper.make_node(op, [x], [name], name=name, **kw))
        return name

    def silu(x, name):
        act("Sigmoid", x, name + "_sig")
        nodes.append(helper.make_node("Mul", [x, name + "_sig"], [name], name=name))
        return name

    def se(x, c, sq, name, inner, gate):
        p = act("GlobalAveragePool", x, name + "_gap")
        q = conv(name + "_q", p, c, sq, 1)
        q = act("Relu", q, name + "_qa") if inner == "relu" else silu(q, name + "_qa")
        r = conv(name + "_r", q, sq, c, 1)
        s = act(gate, r, name + "_gate")
        nodes.append(helper.make_node("Mul", [x, s], [name], name=name))
        return name

    h = act("HardSwish", conv("stem", "x", 3, 16, 3, 2), "stem_act")
    e = act("Relu", conv("b1_exp", h, 16, 32, 1), "b1_exp_act")
    d = act("Relu", conv("b1_dw", e, 32, 32, 3, 1, 32), "b1_dw_act")
    m = se(d, 32, 8, "b1_se", "relu", "HardSigmoid")
    nodes.append(helper.make_node("Add", [conv("b1_proj", m, 32, 16, 1), h], ["b1"], name="b1"))
    e = silu(conv("b2_exp", "b1", 16, 40, 1), "b2_exp_act")
    d = silu(conv("b2_dw", e, 40, 40, 5, 2, 40), "b2_dw_act")
    m = se(d, 40, 12, "b2_se", "silu", "Sigmoid")
    nodes.append(helper.make_node("Identity", [conv("b2_proj", m, 40, 24, 1)], ["feat"], name="feat"))
    act("GlobalAveragePool", "feat", "head_gap")
    nodes.append(helper.make_node("Flatten", ["head_gap"], ["head_flat"], name="head_flat", axis=1))
    w = const("fc_w", (10, 24), 0.3)
    b = const("fc_b", (10,), 0.1)
    nodes.append(helper.make_node("Gemm", ["head_flat", w, b], ["y"], name="fc", transB=1))
    g = helper.make_graph(
        nodes, "tiny_mbv3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["batch", 24, 8, 8])],
        initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def se_block(path):
    # EfficientNet's MBConv squeeze-excitation block, NCHW, dynamic batch:
    # x[batch,32,16,16] -> depthwise 3x3 + b -> SiLU -> GlobalAveragePool -> 1x1 32->8 + b
    # -> SiLU -> 1x1 8->32 + b -> Sigmoid -> Mul (the SiLU output) -> 1x1 32->16 + b -> y
    def t(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
    inits = [t("dw_w", 32, 1, 3, 3), t("dw_b", 32, scale=0.1), t("fc1_w", 8, 32, 1, 1),
             t("fc1_b", 8, scale=0.1), t("fc2_w", 32, 8, 1, 1), t("fc2_b", 32, scale=0.1),
             t("pw_w", 16, 32, 1, 1), t("pw_b", 16, scale=0.1)]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "dw_w", "dw_b"], ["d"], name="dw", group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Sigmoid", ["d"], ["ds"], name="dw_sig"), n("Mul", ["d", "ds"], ["a"], name="dw_silu"),
        n("GlobalAveragePool", ["a"], ["g"], name="gap"),
        n("Conv", ["g", "fc1_w", "fc1_b"], ["f1"], name="fc1", kernel_shape=[1, 1]),
        n("Sigmoid", ["f1"], ["f1s"], name="fc1_sig"), n("Mul", ["f1", "f1s"], ["f1a"], name="fc1_silu"),
        n("Conv", ["f1a", "fc2_w", "fc2_b"], ["f2"], name="fc2", kernel_shape=[1, 1]),
        n("Sigmoid", ["f2"], ["sc"], name="scale"), n("Mul", ["a", "sc"], ["e"], name="excite"),
        n("Conv", ["e", "pw_w", "pw_b"], ["y"], name="project", kernel_shape=[1, 1]),
    ]
    g = helper.make_graph(
        nodes, "se_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 16, 16])],
        initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def se_odd(path):
    # squeeze-excite gates fuse_se must leave alone, or fuse and keep right (test_cuda_precision
    # fuse_se_odd_graphs): x[batch,8,4,4], each branch GlobalAveragePool -> 1x1 8->4 -> act ->
    # 1x1 4->8 -> Sigmoid, every gate a graph output. Fused (5): plain; strides 2 and
    # dilations 2 (1x1 kernels on a 1x1 input); the gate into an Add, not a Mul; two gates
    # sharing their weights; no first bias (B1 absent, B2 present). Kept (6): the pooled
    # value also a graph output; also read by another node; the hidden value also a graph
    # output; a grouped first conv; pads on the first conv (a 3x3 hidden); the second conv
    # giving 6 channels, not 8.
    r = np.random.default_rng(11)
    inits, nodes, outs = [], [], []

    def t(name, *shape, scale=0.4):
        inits.append(numpy_helper.from_array((r.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    n = helper.make_node

    def gate(b, w1=None, w2=None, b1=True, c1={}, c2={}, rdim=4, cout=8, g1=1):
        w1 = w1 or t(b + "_w1", rdim, 8 // g1, 1, 1)
        w2 = w2 or t(b + "_w2", cout, rdim, 1, 1)
        nodes.append(n("GlobalAveragePool", ["x"], [b + "_p"], name=b + "_gap"))
        nodes.append(n("Conv", [b + "_p", w1] + ([t(b + "_b1", rdim)] if b1 else []), [b + "_c1"], name=b + "_fc1",
                       group=g1, **c1))
        nodes.append(n("Relu", [b + "_c1"], [b + "_h"], name=b + "_relu"))
        nodes.append(n("Conv", [b + "_h", w2, t(b + "_b2", cout)], [b + "_c2"], name=b + "_fc2", **c2))
        nodes.append(n("Sigmoid", [b + "_c2"], [b + "_s"], name=b + "_sig"))
        return b + "_s"

    def out(v, shape):
        outs.append(helper.make_tensor_value_info(v, TensorProto.FLOAT, shape))

    y8 = ["batch", 8, 1, 1]
    nodes.append(n("Mul", ["x", gate("plain")], ["plain_y"], name="plain_mul"))
    out("plain_y", ["batch", 8, 4, 4])
    out(gate("strided", c1={"strides": [2, 2], "dilations": [2, 2]}, c2={"strides": [3, 3]}), y8)
    nodes.append(n("Add", ["x", gate("add")], ["add_y"], name="add_add"))
    out("add_y", ["batch", 8, 4, 4])
    out(gate("shared1"), y8)
    out(gate("shared2", w1="shared1_w1", w2="shared1_w2"), y8)
    out(gate("nob1", b1=False), y8)
    out(gate("pout"), y8)
    out("pout_p", y8)
    out(gate("pread"), y8)
    nodes.append(n("Neg", ["pread_p"], ["pread_neg"], name="pread_other"))
    out("pread_neg", y8)
    out(gate("hout"), y8)
    out("hout_h", ["batch", 4, 1, 1])
    out(gate("grouped", g1=2), y8)
    out(gate("padded", c1={"pads": [1, 1, 1, 1]}), ["batch", 8, 3, 3])
    out(gate("six", cout=6), ["batch", 6, 1, 1])
    g = helper.make_graph(nodes, "se_odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 4, 4])],
                          outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def save_feat_net(path, name, nodes, inits, c):
    # a net of test_cuda_engine's nhwc_dynamic_batch: x[batch,c,32,32] ->
    # y[batch,10] and feat[batch,24,8,8], opset 17
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["batch", 24, 8, 8])],
        initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def tiny_dyncnn(path):
    # a CNN for a dynamic batch (the CUDA fp16 engine's NHWC chain with the
    # batch taken at run time): x[batch,8,32,32] -> MaxPool 2x2/2 (an NCHW
    # graph input into an NHWC pool: a conversion in) -> Conv 3x3 + Relu (16)
    # -> Conv 3x3 + the residual + Relu (16) -> Conv 1x1 + Relu (32) ->
    # depthwise 3x3/2 + Relu -> SE (GlobalAveragePool, Conv 1x1 + Relu (8),
    # Conv 1x1, HardSigmoid, Mul) -> Conv 1x1 (24) = feat [batch,24,8,8]
    # (an output: a conversion out) -> AveragePool 2x2/2 -> Conv 3x3 + Relu
    # (32) -> GlobalAveragePool -> Flatten -> Gemm -> y [batch,10]. Its own
    # random numbers: the other models stay as they were.
    inits, nodes = [], []
    const, conv = conv_makers(np.random.default_rng(2112), inits, nodes)

    def op(kind, ins, name, **kw):
        nodes.append(helper.make_node(kind, ins, [name], name=name, **kw))
        return name

    h = op("MaxPool", ["x"], "pool_in", kernel_shape=[2, 2], strides=[2, 2])
    h = op("Relu", [conv("c1", h, 8, 16, 3)], "c1_act")
    h = op("Relu", [op("Add", [conv("c2", h, 16, 16, 3), h], "c2_res")], "c2_act")
    e = op("Relu", [conv("exp", h, 16, 32, 1)], "exp_act")
    d = op("Relu", [conv("dw", e, 32, 32, 3, 2, 32)], "dw_act")
    q = op("Relu", [conv("se_q", op("GlobalAveragePool", [d], "se_gap"), 32, 8, 1)], "se_qa")
    s = op("HardSigmoid", [conv("se_r", q, 8, 32, 1)], "se_gate")
    m = op("Mul", [d, s], "se")
    op("Identity", [conv("proj", m, 32, 24, 1)], "feat")
    a = op("AveragePool", ["feat"], "pool_mid", kernel_shape=[2, 2], strides=[2, 2])
    c = op("Relu", [conv("c3", a, 24, 32, 3)], "c3_act")
    f = op("Flatten", [op("GlobalAveragePool", [c], "head_gap")], "head_flat", axis=1)
    op("Gemm", [f, const("fc_w", (10, 32), 0.3), const("fc_b", (10,), 0.1)], "y", transB=1)
    save_feat_net(path, "tiny_dyncnn", nodes, inits, 8)


def tiny_convnext(path):
    # a ConvNeXt-style net as torch's exporter writes torchvision's convnext
    # (opset 17): x[batch,3,32,32] -> stem Conv 4x4/4 (24) -> LayerNorm2d
    # (Transpose(0,2,3,1), LayerNormalization, Transpose(0,3,1,2)) -> block
    # [depthwise 7x7 pad 3 + bias; Transpose(0,2,3,1); LayerNormalization;
    # MatMul + Add (96); GELU as Div, Erf, Add, Mul, Mul; MatMul + Add (24);
    # Transpose(0,3,1,2); Mul by the layer scale [24,1,1]; Add the block's
    # input] (its depthwise output is feat [batch,24,8,8], an output: a
    # conversion out) -> LayerNorm2d -> Conv 2x2/2
    # (32) -> block (32, 4x4) -> GlobalAveragePool -> LayerNorm2d on
    # [batch,32,1,1] -> Flatten -> Gemm -> y [batch,10]. The CUDA fp16 engine
    # runs it as one NHWC chain: the Transposes around the LayerNorms and
    # MLPs are views. Its own random numbers.
    r = np.random.default_rng(2606)
    inits, nodes = [], []

    def const(name, shape, scale, base=0.0):
        inits.append(numpy_helper.from_array((base + r.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def op(kind, ins, name, **kw):
        nodes.append(helper.make_node(kind, ins, [name], name=name, **kw))
        return name

    def conv(name, x, cin, cout, k, stride, pad, group=1):
        w = const(name + "_w", (cout, cin // group, k, k), (2.0 / (cin // group * k * k)) ** 0.5)
        return op("Conv", [x, w, const(name + "_b", (cout,), 0.1)], name, kernel_shape=[k, k],
                  strides=[stride, stride], pads=[pad] * 4, group=group)

    def ln(name, x, c):
        return op("LayerNormalization", [x, const(name + "_g", (c,), 0.1, 1.0), const(name + "_b", (c,), 0.1)],
                  name, axis=-1, epsilon=1e-6)

    def ln2d(name, x, c):
        t = op("Transpose", [x], name + "_in", perm=[0, 2, 3, 1])
        return op("Transpose", [ln(name, t, c)], name + "_out", perm=[0, 3, 1, 2])

    def linear(name, x, cin, cout):
        m = op("MatMul", [x, const(name + "_w", (cin, cout), cin ** -0.5)], name + "_mm")
        return op("Add", [const(name + "_b", (cout,), 0.1), m], name)

    def block(name, x, c, dw=None):
        t = op("Transpose", [conv(dw or name + "_dw", x, c, c, 7, 1, 3, c)], name + "_in", perm=[0, 2, 3, 1])
        h = linear(name + "_fc1", ln(name + "_ln", t, c), c, 4 * c)
        k = [const(name + n, (), 0.0, v) for n, v in (("_sqrt2", 2 ** 0.5), ("_one", 1.0), ("_half", 0.5))]
        e = op("Add", [op("Erf", [op("Div", [h, k[0]], name + "_div")], name + "_erf"), k[1]], name + "_erf1")
        g = op("Mul", [op("Mul", [h, e], name + "_gelu0"), k[2]], name + "_gelu")
        o = op("Transpose", [linear(name + "_fc2", g, 4 * c, c)], name + "_out", perm=[0, 3, 1, 2])
        s = op("Mul", [const(name + "_scale", (c, 1, 1), 0.1, 0.5), o], name + "_ls")
        return op("Add", [s, x], name)

    h = ln2d("stem_ln", conv("stem", "x", 3, 24, 4, 4, 0), 24)
    h = block("b1", h, 24, "feat")  # (the depthwise layer's output: also a graph output)
    h = conv("down", ln2d("down_ln", h, 24), 24, 32, 2, 2, 0)
    h = block("b2", h, 32)
    f = op("Flatten", [ln2d("head_ln", op("GlobalAveragePool", [h], "gap"), 32)], "flat", axis=1)
    op("Gemm", [f, const("fc_w", (10, 32), 0.3), const("fc_b", (10,), 0.1)], "y", transB=1)
    save_feat_net(path, "tiny_convnext", nodes, inits, 3)


def tiny_regnet(path):
    # a RegNetY-style net (grouped 3x3 layers of 24 and 8 channels a group):
    # x[batch,3,32,32] -> stem Conv 3x3/2 + Relu (24) -> block 1 [Conv 1x1 +
    # Relu (48); grouped 3x3/2 (2 groups of 24) + Relu; SE (GlobalAveragePool,
    # Conv 1x1 + Relu (12), Conv 1x1, Sigmoid, Mul); Conv 1x1 (24) + Conv
    # 1x1/2 of the block's input, Relu] -> block 2 [Conv 1x1 + Relu (32);
    # grouped 3x3 (4 groups of 8) + Relu; Conv 1x1 (24) + the block's input,
    # Relu] -> feat [batch,24,8,8] (an output) -> GlobalAveragePool -> Flatten
    # -> Gemm -> y [batch,10]. The CUDA fp16 engine runs it as one NHWC chain.
    inits, nodes = [], []
    const, conv = conv_makers(rng, inits, nodes)

    def op(kind, ins, name, **kw):
        nodes.append(helper.make_node(kind, ins, [name], name=name, **kw))
        return name

    h = op("Relu", [conv("stem", "x", 3, 24, 3, 2)], "stem_act")
    a = op("Relu", [conv("b1_a", h, 24, 48, 1)], "b1_a_act")
    b = op("Relu", [conv("b1_b", a, 48, 48, 3, 2, 2)], "b1_b_act")
    p = op("GlobalAveragePool", [b], "b1_se_gap")
    q = op("Relu", [conv("b1_se_q", p, 48, 12, 1)], "b1_se_qa")
    s = op("Sigmoid", [conv("b1_se_r", q, 12, 48, 1)], "b1_se_gate")
    m = op("Mul", [b, s], "b1_se")
    r = op("Add", [conv("b1_c", m, 48, 24, 1), conv("b1_proj", h, 24, 24, 1, 2)], "b1_add")
    h = op("Relu", [r], "b1")
    a = op("Relu", [conv("b2_a", h, 24, 32, 1)], "b2_a_act")
    b = op("Relu", [conv("b2_b", a, 32, 32, 3, 1, 4)], "b2_b_act")
    h = op("Relu", [op("Add", [conv("b2_c", b, 32, 24, 1), h], "b2_add")], "feat")
    f = op("Flatten", [op("GlobalAveragePool", [h], "gap")], "flat", axis=1)
    op("Gemm", [f, const("fc_w", (10, 24), 0.3), const("fc_b", (10,), 0.1)], "y", transB=1)
    save_feat_net(path, "tiny_regnet", nodes, inits, 3)


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
    se_block(f"{out}/se_block.onnx")
    se_odd(f"{out}/se_odd.onnx")
    tiny_mbv3(f"{out}/tiny_mbv3.onnx")
    tiny_dyncnn(f"{out}/tiny_dyncnn.onnx")
    tiny_convnext(f"{out}/tiny_convnext.onnx")
    tiny_regnet(f"{out}/tiny_regnet.onnx")
