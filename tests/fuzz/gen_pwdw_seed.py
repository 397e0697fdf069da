#!/usr/bin/env python3
"""Writes pwdw_blocks.onnx (in the current folder): two MobileNetV2-like blocks,
a depthwise 3x3 + project 1x1 and an expand 1x1 + depthwise 3x3 + project 1x1 +
residual, large enough (64 x 48 x 48) for kiln to fuse each into one
kiln.PwDwConv layer. The fuzz seeds corpus/onnx/pwdw_blocks.onnx and
corpus/engine/pwdw_blocks.kiln (`kiln build pwdw_blocks.onnx -o pwdw_blocks.kiln
--threads 1`) come from it. Needs numpy and onnx (the project venv has both)."""
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
rng=np.random.default_rng(0)
def W(name, *shape, s=0.2): return numpy_helper.from_array((rng.standard_normal(shape)*s).astype(np.float32), name)
inits=[W("w0",64,1,3,3),W("b0",64),W("w1",16,64,1,1),W("b1",16),
       W("w2",64,16,1,1),W("b2",64),W("w3",64,1,3,3),W("b3",64),W("w4",16,64,1,1),W("b4",16)]
inits+=[numpy_helper.from_array(np.array(0,np.float32),"lo"), numpy_helper.from_array(np.array(6,np.float32),"hi")]
n=[helper.make_node("Conv",["x","w0","b0"],["c0"],group=64,pads=[1,1,1,1],name="dw0"),
   helper.make_node("Clip",["c0","lo","hi"],["a0"],name="clip0"),
   helper.make_node("Conv",["a0","w1","b1"],["p0"],name="proj0"),
   helper.make_node("Conv",["p0","w2","b2"],["c2"],name="expand1"),
   helper.make_node("Clip",["c2","lo","hi"],["a2"],name="clip1"),
   helper.make_node("Conv",["a2","w3","b3"],["c3"],group=64,pads=[1,1,1,1],name="dw1"),
   helper.make_node("Clip",["c3","lo","hi"],["a3"],name="clip2"),
   helper.make_node("Conv",["a3","w4","b4"],["c4"],name="proj1"),
   helper.make_node("Add",["c4","p0"],["y"],name="add1")]
g=helper.make_graph(n,"pwdw",[helper.make_tensor_value_info("x",TensorProto.FLOAT,[1,64,48,48])],
                    [helper.make_tensor_value_info("y",TensorProto.FLOAT,[1,16,48,48])],inits)
m=helper.make_model(g,opset_imports=[helper.make_opsetid("",13)]); m.ir_version=8
onnx.checker.check_model(m); onnx.save(m,"pwdw_blocks.onnx")
