#!/usr/bin/python3
"""Writes tests/stress/stress_cnn.onnx, the model of the concurrency stress
test (committed, so the test needs no Python). Run with Debian's
/usr/bin/python3 (onnx + numpy): python3 tests/stress/gen_stress_model.py

x[batch, 3, H, W] (batch, H and W dynamic) ->
  Conv 3->16 3x3 pad 1 -> Relu -> Conv 16->16 3x3 pad 1 -> Add(residual) ->
  MaxPool 2x2 -> GlobalAveragePool -> Flatten -> Gemm 16->10 -> Softmax = probs
  and ReduceMean over H, W of the pooled map -> LayerNormalization = feat
Convolutions, a matrix product, pooling, reductions and normalization: the
kernels that use the thread pool and per-context state."""
import os
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(20261202)
C = 16  # channels


def t(name, *shape):
    return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)


def main():
    inits = [t("w1", C, 3, 3, 3), t("b1", C), t("w2", C, C, 3, 3), t("b2", C),
             t("wg", 10, C), t("bg", 10), t("ln_s", C), t("ln_b", C)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="residual"),
        helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
        helper.make_node("ReduceMean", ["p"], ["m"], name="mean_hw", axes=[2, 3], keepdims=0),
        helper.make_node("LayerNormalization", ["m", "ln_s", "ln_b"], ["feat"], name="ln",
                         axis=-1),
    ]
    g = helper.make_graph(
        nodes, "stress_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "H", "W"])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["batch", C])],
        initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="kiln-tests")
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stress_cnn.onnx"))


if __name__ == "__main__":
    main()
