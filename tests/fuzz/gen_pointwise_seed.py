#!/usr/bin/env python3
"""Writes pointwise_masks.onnx (in the current folder): BERT-like mask preparation
(Cast of an int64 mask, Sub, Mul), an Add, SiLU as Sigmoid + Mul and the SDPA
export's IsNaN + Where, with the Sigmoid also read by a ReduceSum: kiln fuses the
eight elementwise nodes into one kiln.Pointwise layer with two outputs. The fuzz
seeds corpus/onnx/pointwise_masks.onnx and corpus/engine/pointwise_masks.kiln
(`kiln build pointwise_masks.onnx -o pointwise_masks.kiln`) come from it. Needs
onnx (the project venv has it)."""
import onnx
from onnx import helper as h, TensorProto as T
nodes = [
    h.make_node("Cast", ["mask"], ["mf"], to=T.FLOAT),
    h.make_node("Sub", ["one", "mf"], ["inv"]),
    h.make_node("Mul", ["inv", "big"], ["bias"]),
    h.make_node("Add", ["x", "bias"], ["s"]),
    h.make_node("Sigmoid", ["s"], ["sg"]),
    h.make_node("Mul", ["s", "sg"], ["silu"]),
    h.make_node("IsNaN", ["silu"], ["nan"]),
    h.make_node("Where", ["nan", "zero", "silu"], ["y"]),
    h.make_node("ReduceSum", ["sg"], ["r"], keepdims=1),
]
g = h.make_graph(nodes, "pointwise_seed",
    [h.make_tensor_value_info("x", T.FLOAT, [2, 8]), h.make_tensor_value_info("mask", T.INT64, [2, 8])],
    [h.make_tensor_value_info("y", T.FLOAT, [2, 8]), h.make_tensor_value_info("r", T.FLOAT, [1, 1])],
    [h.make_tensor("one", T.FLOAT, [], [1.0]), h.make_tensor("big", T.FLOAT, [], [-10000.0]),
     h.make_tensor("zero", T.FLOAT, [], [0.0])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, "pointwise_masks.onnx")
