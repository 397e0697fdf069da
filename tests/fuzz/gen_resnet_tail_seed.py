#!/usr/bin/env python3
"""Writes resnet_tail.onnx (in the current folder): the end of a ResNet, a
3x3 convolution + ReLU, a 3x3 convolution + residual Add + ReLU and a
GlobalAveragePool, small enough (16 -> 32 channels at 8x8) for a fuzz seed.
Built for the CPU, the convolutions run kiln's Winograd kernel on NHWC
tensors and the pool reads NHWC (engine format 4), so the engine fuzzer
mutates those layouts and tactics (a tactic byte 3 -> 4 is Winograd
F(2x2)). The seeds corpus/onnx/resnet_tail.onnx and
corpus/engine/resnet_tail.kiln (`kiln build resnet_tail.onnx -o
resnet_tail.kiln --threads 1`) come from it. Needs numpy and onnx."""
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
rng=np.random.default_rng(0)
C=32
def W(name,*shape,s=0.1): return numpy_helper.from_array((rng.standard_normal(shape)*s).astype(np.float32),name)
inits=[W("w0",C,16,3,3),W("b0",C),W("w1",C,C,3,3),W("b1",C)]
n=[helper.make_node("Conv",["x","w0","b0"],["c0"],pads=[1,1,1,1],name="ca"),
   helper.make_node("Relu",["c0"],["a"],name="ra"),
   helper.make_node("Conv",["a","w1","b1"],["c1"],pads=[1,1,1,1],name="cb"),
   helper.make_node("Add",["c1","a"],["s"],name="add"),
   helper.make_node("Relu",["s"],["r"],name="rr"),
   helper.make_node("GlobalAveragePool",["r"],["y"],name="gap")]
g=helper.make_graph(n,"tail",[helper.make_tensor_value_info("x",TensorProto.FLOAT,[1,16,8,8])],
                    [helper.make_tensor_value_info("y",TensorProto.FLOAT,[1,C,1,1])],inits)
m=helper.make_model(g,opset_imports=[helper.make_opsetid("",13)]); m.ir_version=8
onnx.checker.check_model(m); onnx.save(m,"resnet_tail.onnx")
