#!/usr/bin/python3
"""Writes big ONNX models of one layer repeated n times, to time `kiln build`
on them (issue 20: a model of n layers must build in about O(n); see
docs/probing.md). Run with Debian's /usr/bin/python3 (onnx + numpy):

    /usr/bin/python3 scripts/gen_big_graphs.py KIND N OUT.onnx
    time ./build/kiln build OUT.onnx -o /tmp/m.kiln

KIND:
    mm_sum               N MatMuls reading one input and one weight, one Sum of them
    mm_outputs           N MatMuls reading one input, each a graph output
    add_relu             a chain of N Add(constant) + Relu
    conv_bn_relu         a chain of N small Conv + BatchNormalization + Relu
    conv_bn_relu_shared  the same, every Conv reading one weight
    layernorm            a chain of N decomposed LayerNorms (ReduceMean ... Add)
    attention            a chain of N MatMul, Mul(scale), Softmax, MatMul
    movement             a chain of N Relu, Transpose, Reshape, Transpose (merge_movement:
                         one Gather of rows each)
"""
import sys
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh

RNG = np.random.default_rng(0)

def model(nodes, inits, ins, outs, path):
    g = h.make_graph(nodes, "g", ins, outs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)

def vi(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)

def c(name, arr):
    return nh.from_array(np.asarray(arr, dtype=np.float32), name)

def mm_sum(n, path):  # n MatMuls reading one input, one Sum
    nodes = [h.make_node("MatMul", ["x", "w"], [f"y{i}"]) for i in range(n)]
    nodes.append(h.make_node("Sum", [f"y{i}" for i in range(n)], ["out"]))
    model(nodes, [c("w", np.eye(4))], [vi("x", [4, 4])], [vi("out", [4, 4])], path)

def mm_outputs(n, path):  # n MatMuls, each a graph output
    nodes = [h.make_node("MatMul", ["x", "w"], [f"y{i}"]) for i in range(n)]
    model(nodes, [c("w", np.eye(4))], [vi("x", [4, 4])], [vi(f"y{i}", [4, 4]) for i in range(n)], path)

def add_relu(n, path):  # a chain of Add(const) + Relu
    nodes, cur = [], "x"
    for i in range(n):
        nodes.append(h.make_node("Add", [cur, "b"], [f"a{i}"]))
        nodes.append(h.make_node("Relu", [f"a{i}"], [f"r{i}"]))
        cur = f"r{i}"
    nodes.append(h.make_node("Identity", [cur], ["out"]))
    model(nodes, [c("b", np.ones(4))], [vi("x", [1, 4])], [vi("out", [1, 4])], path)

def conv_bn_relu(n, path, shared=False):  # a chain of small Conv + BN + Relu
    nodes, inits, cur = [], [], "x"
    inits += [c("s", np.ones(2)), c("bb", np.zeros(2)), c("mu", np.zeros(2)), c("var", np.ones(2))]
    if shared: inits.append(c("w", RNG.random((2, 2, 1, 1))))
    for i in range(n):
        w = "w" if shared else f"w{i}"
        if not shared: inits.append(c(w, RNG.random((2, 2, 1, 1))))
        nodes.append(h.make_node("Conv", [cur, w], [f"c{i}"]))
        nodes.append(h.make_node("BatchNormalization", [f"c{i}", "s", "bb", "mu", "var"], [f"n{i}"]))
        nodes.append(h.make_node("Relu", [f"n{i}"], [f"r{i}"]))
        cur = f"r{i}"
    nodes.append(h.make_node("Identity", [cur], ["out"]))
    model(nodes, inits, [vi("x", [1, 2, 2, 2])], [vi("out", [1, 2, 2, 2])], path)

def layernorm(n, path):  # a chain of decomposed LayerNorms
    nodes, cur = [], "x"
    for i in range(n):
        p = f"l{i}_"
        nodes += [
            h.make_node("ReduceMean", [cur], [p + "m"], axes=[-1]),
            h.make_node("Sub", [cur, p + "m"], [p + "d"]),
            h.make_node("Pow", [p + "d", "two"], [p + "p"]),
            h.make_node("ReduceMean", [p + "p"], [p + "v"], axes=[-1]),
            h.make_node("Add", [p + "v", "eps"], [p + "ve"]),
            h.make_node("Sqrt", [p + "ve"], [p + "s"]),
            h.make_node("Div", [p + "d", p + "s"], [p + "n"]),
            h.make_node("Mul", [p + "n", "g"], [p + "w"]),
            h.make_node("Add", [p + "w", "b"], [p + "o"]),
        ]
        cur = p + "o"
    nodes.append(h.make_node("Identity", [cur], ["out"]))
    inits = [c("two", 2.0), c("eps", 1e-5), c("g", np.ones(8)), c("b", np.zeros(8))]
    model(nodes, inits, [vi("x", [2, 8])], [vi("out", [2, 8])], path)

def attention(n, path):  # a chain of MatMul, scale, Softmax, MatMul
    nodes, cur = [], "x"
    for i in range(n):
        p = f"a{i}_"
        nodes += [
            h.make_node("Transpose", [cur], [p + "kt"], perm=[0, 1, 3, 2]),
            h.make_node("MatMul", [cur, p + "kt"], [p + "qk"]),
            h.make_node("Mul", [p + "qk", "scale"], [p + "s"]),
            h.make_node("Softmax", [p + "s"], [p + "p"], axis=-1),
            h.make_node("MatMul", [p + "p", cur], [p + "o"]),
        ]
        cur = p + "o"
    nodes.append(h.make_node("Identity", [cur], ["out"]))
    model(nodes, [c("scale", 0.5)], [vi("x", [1, 2, 4, 8])], [vi("out", [1, 2, 4, 8])], path)

def movement(n, path):  # a chain of Relu + Transpose + Reshape + Transpose: one Gather each
    nodes, cur = [], "x"
    for i in range(n):
        p = f"m{i}_"
        nodes += [
            h.make_node("Relu", [cur], [p + "r"]),
            h.make_node("Transpose", [p + "r"], [p + "t"], perm=[1, 0]),
            h.make_node("Reshape", [p + "t", "s64" if i % 2 == 0 else "s46"], [p + "v"]),
            h.make_node("Transpose", [p + "v"], [p + "o"], perm=[1, 0]),
        ]
        cur = p + "o"
    nodes.append(h.make_node("Identity", [cur], ["out"]))
    inits = [nh.from_array(np.array([6, 4], dtype=np.int64), "s64"),
             nh.from_array(np.array([4, 6], dtype=np.int64), "s46")]
    model(nodes, inits, [vi("x", [6, 4])], [vi("out", [6, 4] if n % 2 == 0 else [4, 6])], path)

KINDS = {"mm_sum": mm_sum, "mm_outputs": mm_outputs, "add_relu": add_relu, "conv_bn_relu": conv_bn_relu,
         "conv_bn_relu_shared": lambda n, p: conv_bn_relu(n, p, True),
         "layernorm": layernorm, "attention": attention, "movement": movement}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in KINDS:
        sys.exit(__doc__)
    KINDS[sys.argv[1]](int(sys.argv[2]), sys.argv[3])
